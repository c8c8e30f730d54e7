"""bridge/fsdp_lab.py: the fsdp.c run, again in PyTorch FSDP, on CPU ranks.

The labs this course prepares for are written in PyTorch. This script trains
the very model of an fsdp.c run (the byte MLP in stock torch modules, or
GPT-2 as transformers' GPT2LMHeadModel) wrapped in
FullyShardedDataParallel, from the same initial parameters (fsdp.c's
--export at --steps 0), on the same batches (fsdp.c's sampler, written again
below), and compares the losses with those fsdp.c wrote to --json.

    mpirun -np 4 ./fsdp --model tiny --data FILE --steps 4 --json run.json
    mpirun -np 4 ./fsdp --model tiny --data FILE --steps 0 --export init.st
    torchrun --standalone --nproc-per-node 4 bridge/fsdp_lab.py \\
        --fsdp-run run.json --init init.st --data FILE

The model, the strategy, the auto-wrap threshold and the optimizer's
settings all come from run.json's "config", so the two runs cannot drift
apart. A run of `./fsdp --fsdp2` is reproduced in FSDP2: fully_shard on
each of the run's units (run.json's "units", deepest first), then on the
root, instead of FullyShardedDataParallel. --save-dir DIR --save-at K writes a DCP checkpoint after step K;
--resume DIR continues from one, on any number of ranks. Rank 0 prints one
line per step (losses to 6 decimals, for reading) and a verdict, and with
--json FILE writes PyTorch's losses at full precision, as fsdp.c's --json
holds its own ("steps": [{"step": 1, "loss": ...}, ...]; notebook 9 plots
the two); the exit status is 1 if a loss differs from fsdp.c's by more than
--rtol (relative), or if the ranks clipped by different gradient norms. Bad input (a file that is not
what it should be, a world size that does not divide the batch, an option
the bridge does not reproduce) is refused before the ranks connect: one
message, exit 2 on every rank (torchrun itself then exits 1).

Why a tolerance, and why 1e-4: both runs compute in fp32, but not in the
same order. A matmul's sums (our register-blocked loops against PyTorch's
CPU kernels), LayerNorm's statistics, erf in GELU and the order in which a
reduce-scatter adds the ranks' gradients each round differently, by a few
units in the last place (about 1e-7 relative). AdamW divides each
gradient by its own running magnitude, which carries those differences
into the parameters without growing them: over 20 steps the losses of the
two programs agree to about 2e-7 relative (notebook 9). 1e-4 leaves a
margin of hundreds over that, and is far below what the accumulation
mistake of lecture 17 does to the loss (3.5e-3 at its first step). It is
not below every mistake: the clipping one (each rank clips by its own
shards' norm) moved the loss by only 2.1e-5 in 4 steps, AdamW hiding most
of it, and only the second check, that every rank saw the same gradient
norm, caught it.

With --param-dtype bf16 (MixedPrecision / MixedPrecisionPolicy) the byte
MLP's first loss agrees to fp32's rounding (the forward rounds the same
values to bf16 at the same places: 7e-10 here; GPT-2's to 1.3e-5, its
attention rounding at other places); after it, a gradient element that
rounds to the other side of a bf16 step (2^-8 relative) moves AdamW's
update, and the losses drift apart by about 3e-4 in 6 steps. So a bf16
run's default --rtol is 2e-3, half a bf16 step: still below the
accumulation mistake's 3.5e-3.
"""
import argparse
import contextlib
import datetime
import functools
import json
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy,
                                    fully_shard)
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy

STRATEGIES = {
    "full_shard": ShardingStrategy.FULL_SHARD,
    "shard_grad_op": ShardingStrategy.SHARD_GRAD_OP,
    "no_shard": ShardingStrategy.NO_SHARD,
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PREFETCH = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST,
            "none": None}


# ---- the model: model/tree.h and kernels/layers.h, in torch.nn -------------------------

class Block(nn.Module):
    """h + fc2(gelu(fc1(norm(h)))): one residual MLP block."""

    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=1e-5)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, h):
        return h + self.fc2(F.gelu(self.fc1(self.norm(h))))  # exact erf GELU, as nn.GELU()


class ByteMLP(nn.Module):
    """The byte-level model: the last T bytes -> the next byte. Its module
    names are fsdp.c's, so its --export loads with load_state_dict."""

    def __init__(self, vocab, embed_dim, context, width, depth):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim)
        self.proj_in = nn.Linear(context * embed_dim, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.norm_f = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        h = self.proj_in(self.embed(tokens).flatten(1))
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm_f(h))


def build_model(cfg):
    """The run's model: the byte MLP above, or GPT-2 as transformers builds
    it (GPT2LMHeadModel, lm_head tied to wte) from the run's shape, without
    dropout, as fsdp.c trains it. Both take fsdp.c's --export as it is."""
    if cfg["arch"] != "gpt2":
        return ByteMLP(cfg["vocab"], cfg["embed_dim"], cfg["context"], cfg["width"],
                       cfg["depth"])
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=cfg["vocab"], n_positions=cfg["n_ctx"], n_embd=cfg["width"],
                        n_layer=cfg["depth"], n_head=cfg["n_head"], layer_norm_epsilon=1e-5,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=True)
    return GPT2LMHeadModel(config)


def logits_of(model, tokens):
    """(B, V) for the byte MLP, (B, T, V) for GPT-2"""
    out = model(tokens)
    return out.logits if hasattr(out, "logits") else out


def read_safetensors(path):
    """{name: tensor} of an F32 safetensors file: an 8-byte little-endian
    header length, a JSON header, then the tensors' bytes. Raises ValueError
    (or OSError) with what is wrong."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])  # a json.JSONDecodeError is a ValueError
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{name} is {info['dtype']}; export from an fp32 run")
        a, b = info["data_offsets"]
        if not 0 <= a <= b <= len(blob) - 8 - n:
            raise ValueError(f"{name}'s bytes lie outside the file")
        data = bytearray(blob[8 + n + a:8 + n + b])
        tensors[name] = torch.frombuffer(data, dtype=torch.float32).reshape(info["shape"])
    return tensors


# ---- the data: fsdp.c's sampler (data/sampler.h), bit for bit -------------------------------

MASK = (1 << 64) - 1
STREAM_SAMPLER = 2


def mix64(x):
    """SplitMix64's finaliser, as fsdp.c's mix64"""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def rng_u64(seed, stream, a, b):
    inner = mix64(seed ^ mix64((stream + 0x9E3779B97F4A7C15) & MASK))
    return mix64((mix64((inner + a) & MASK) + b) & MASK)


def local_batch(data, seed, step, rank, world, first, count, context, sequences=False):
    """Samples first .. first + count - 1 of this rank's share of global
    batch `step`: j = rank, rank + N, ... (DistributedSampler's
    interleaving), each a window at a position fixed by (seed, step, j).
    The byte MLP's target is the byte after the window; GPT-2's
    (sequences) are the window's bytes one further on, as
    sampler_local_sequences draws them."""
    positions = len(data) - context
    tokens, targets = [], []
    for k in range(first, first + count):
        j = rank + k * world
        pos = rng_u64(seed, STREAM_SAMPLER, step, j) % positions
        tokens.append(list(data[pos:pos + context]))
        targets.append(list(data[pos + 1:pos + context + 1]) if sequences else data[pos + context])
    return torch.tensor(tokens, dtype=torch.long), torch.tensor(targets, dtype=torch.long)


# ---- the run ------------------------------------------------------------------------------

def refuse(message):
    """Bad input: one message (from rank 0) and exit 2 on every rank, before
    the process group starts, so no rank waits in a collective for one that
    has left. Every rank runs the same checks on the same files, so rank 0
    refuses too. The others wait for it: torchrun stops every rank as soon as
    one exits, and a rank 1 that left first would have rank 0 killed before
    it said why (seen once in CI: exit 2 and no message). Rank 0's exit ends
    the wait; the 60 s bound only matters if rank 0 never gets here."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
    else:
        time.sleep(60)
    sys.exit(2)


# what the bridge reads from fsdp.c's --json "config"
CONFIG_KEYS = ("vocab embed_dim context width depth min_params strategy batch steps seed lr beta1 "
               "beta2 eps weight_decay clip_grad_norm grad_accum no_sync backward_prefetch "
               "forward_prefetch limit_all_gathers param_dtype reduce_dtype cpu_offload "
               "activation_checkpointing grad_scaler lr_schedule warmup step_size gamma optimizer "
               "fsdp2 reshard_after_forward arch n_head n_ctx auto_wrap").split()


def check_config(cfg, world):
    """The fsdp.c options this bridge reproduces; anything else is refused
    with the option to drop, rather than compared wrongly."""
    unsupported = {
        "activation_checkpointing": False, "grad_scaler": False, "warmup": 0,
        "optimizer": "adamw",
    }
    for key, want in unsupported.items():
        if cfg[key] != want:
            refuse(f"the bridge reproduces {key} = {want} only; this run has {cfg[key]}")
    for key in ("param_dtype", "reduce_dtype"):
        if cfg[key] not in DTYPES:
            refuse(f"the bridge reproduces {key} fp32 and bf16; this run has {cfg[key]} (fp16 "
                   "needs the gradient scaler, which it does not reproduce)")
    if cfg["lr_schedule"] not in ("constant", "step"):
        refuse(f"the bridge reproduces lr_schedule constant and step (StepLR) only; this run "
               f"has {cfg['lr_schedule']}")
    if cfg["strategy"] not in STRATEGIES:
        refuse(f"the bridge runs {', '.join(STRATEGIES)}; this run is {cfg['strategy']}")
    if cfg["fsdp2"] and cfg["strategy"] == "no_shard":
        refuse("FSDP2 has no no_shard (fsdp.c refuses it too)")
    if cfg["arch"] == "gpt2" and not cfg["fsdp2"] and cfg["auto_wrap"] != "transformer":
        refuse("GPT-2 under FSDP1 needs --auto-wrap transformer: PyTorch's size-based policy "
               "does not know that wte and lm_head are one tensor, and may wrap them apart "
               "(fsdp.c keeps them in the root, lecture 18)")
    if cfg["cpu_offload"] and not cfg["fsdp2"]:
        refuse("FSDP1's CPUOffload needs a GPU (it moves the shards between pinned host memory "
               "and CUDA, and fails on CPU ranks with 'Found no NVIDIA driver'); FSDP2's "
               "CPUOffloadPolicy runs here: add --fsdp2 to the fsdp.c run")
    if cfg["batch"] % (world * cfg["grad_accum"]):
        refuse(f"--batch {cfg['batch']} does not divide by {world} ranks x "
               f"{cfg['grad_accum']} micro-batches: run torchrun with a world size that "
               "divides it")


def read_inputs(args, world):
    """Every input, checked before any collective: (the run, the initial
    parameters, the data)."""
    if args.timeout <= 0 or (args.rtol is not None and args.rtol <= 0):
        refuse("--timeout and --rtol must be positive")
    if args.steps is not None and args.steps < 1:
        refuse(f"--steps {args.steps}: give at least 1")
    if (args.save_dir is None) != (args.save_at is None):
        refuse("--save-dir and --save-at go together: where, and after which step")
    try:
        with open(args.fsdp_run) as f:
            run = json.load(f)
        cfg = run["config"]
        if not isinstance(run["steps"], list):  # fsdp.c's losses, one per step
            raise ValueError("'steps' is not a list")
        missing = [k for k in CONFIG_KEYS if k not in cfg]
    except (OSError, ValueError, KeyError, TypeError) as e:
        refuse(f"--fsdp-run {args.fsdp_run}: not the --json of an fsdp.c run ({e!r})")
    if missing:
        refuse(f"--fsdp-run {args.fsdp_run}: its config lacks {', '.join(missing)}: write it "
               "with this fsdp.c's --json")
    check_config(cfg, world)
    if args.rtol is None:
        args.rtol = 2e-3 if cfg["param_dtype"] == "bf16" else 1e-4
    if args.memory and not cfg["fsdp2"]:
        refuse("--memory tracks FSDP2 only: PyTorch's MemTracker hooks each parameter's "
               "gradient, and FSDP1's parameters are views of its flat parameter, not leaf "
               "tensors (it fails with 'post accumulate grad hooks cannot be registered on "
               "non-leaf tensors'). Add --fsdp2 to the fsdp.c run")
    if args.memory and "memory_peak_bytes" not in run:
        refuse(f"--memory: {args.fsdp_run} has no memory_peak_bytes: write it with this "
               "fsdp.c's --json")
    if args.mistake == "clip" and cfg["fsdp2"]:
        refuse("--mistake clip is FSDP1's: under FSDP2 the gradients are DTensors, and "
               "torch.nn.utils.clip_grad_norm_ computes the whole model's norm, rightly")
    if args.save_at is not None and not 1 <= args.save_at <= (args.steps or cfg["steps"]):
        refuse(f"--save-at {args.save_at}: give a step from 1 to the last one trained")
    if args.resume and not os.path.exists(os.path.join(args.resume, ".metadata")):
        refuse(f"--resume {args.resume}: no DCP checkpoint there (no .metadata)")
    model = build_model(cfg)
    hint = "write them with the run's fsdp.c flags and --steps 0 --export FILE"
    try:
        init = read_safetensors(args.init)
    except (OSError, ValueError, struct.error) as e:
        refuse(f"--init {args.init}: not a safetensors file ({e}); {hint}")
    # GPT-2's lm_head is wte itself (tied): the file holds it once, as wte
    want = {name: tuple(t.shape) for name, t in model.state_dict().items()
            if name != "lm_head.weight"}
    for name in sorted(set(want) | set(init)):
        got = tuple(init[name].shape) if name in init else None
        if got != want.get(name):
            refuse(f"--init {args.init}: {name} is {got or 'missing'} where this run's model has "
                   f"{want.get(name) or 'no such tensor'}; {hint}")
    model.load_state_dict(init, strict=cfg["arch"] != "gpt2")
    try:
        with open(args.data, "rb") as f:
            data = f.read()
    except OSError as e:
        refuse(f"--data {args.data}: {e.strerror}")
    if len(data) <= cfg["context"]:
        refuse(f"--data {args.data}: {len(data)} bytes, but a sample needs {cfg['context'] + 1}")
    return run, model, data


def wrap(run, model):
    """The model, loaded with fsdp.c's initial parameters, wrapped as the
    run was: PyTorch's size-based auto-wrap with fsdp.c's threshold, or
    with --fsdp2, fully_shard on the run's units."""
    cfg = run["config"]
    if cfg["fsdp2"]:
        return wrap_fsdp2(run, model)
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=cfg["min_params"])
    if cfg["auto_wrap"] == "transformer":  # the block class: ours, or transformers' GPT2Block
        blocks = model.transformer.h if cfg["arch"] == "gpt2" else model.blocks
        policy = functools.partial(transformer_auto_wrap_policy,
                                   transformer_layer_cls={type(blocks[0])})
    return FSDP(model, auto_wrap_policy=policy, sharding_strategy=STRATEGIES[cfg["strategy"]],
                backward_prefetch=PREFETCH[cfg["backward_prefetch"]],
                forward_prefetch=cfg["forward_prefetch"],
                limit_all_gathers=cfg["limit_all_gathers"],
                cpu_offload=CPUOffload(offload_params=cfg["cpu_offload"]),
                mixed_precision=MixedPrecision(param_dtype=DTYPES[cfg["param_dtype"]],
                                               reduce_dtype=DTYPES[cfg["reduce_dtype"]]),
                device_id=torch.device("cpu"), use_orig_params=True)


def wrap_fsdp2(run, model):
    """FSDP2: fully_shard on every unit of the run, deepest first (a unit
    inside another must be sharded before it, as fully_shard requires),
    then on the root. FSDP2 has no auto-wrap policy: the calls are the
    policy. full_shard is reshard_after_forward=True, shard_grad_op False;
    the root keeps its parameters after forward either way (as fsdp.c's
    root does), since backward starts with it. The prefetch options are
    FSDP1's constructor arguments; FSDP2 prefetches on its own, and none of
    them changes a number."""
    cfg = run["config"]
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    # shard_grad_op keeps the parameters (False); full_shard frees them
    # (True), or keeps 1/K of them with --reshard-after-forward K (an int)
    after_forward = False
    if cfg["strategy"] == "full_shard":
        after_forward = cfg["reshard_after_forward"] or True
    # the shards on the host: on a CPU there is no pinned memory to ask for
    offload = CPUOffloadPolicy(pin_memory=False) if cfg["cpu_offload"] else OffloadPolicy()
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[cfg["param_dtype"]],
                              reduce_dtype=DTYPES[cfg["reduce_dtype"]])
    units = [u["module"] for u in run["units"] if u["module"] != "(root)"]
    for name in sorted(units, key=lambda n: -n.count(".")):
        fully_shard(model.get_submodule(name), mesh=mesh, reshard_after_forward=after_forward,
                    offload_policy=offload, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, offload_policy=offload,
                mp_policy=mp)
    prefetch_as_fsdp1(cfg, [model.get_submodule(name) for name in units])
    return model


def prefetch_as_fsdp1(cfg, units):
    """FSDP1's prefetch options in FSDP2's words, on the units in forward
    order: --forward-prefetch is each unit naming the next one
    (set_modules_to_forward_prefetch); FSDP2 prefetches one unit ahead in
    backward by itself (BACKWARD_PRE), and --backward-prefetch none is each
    naming none. FSDP2 has no BACKWARD_POST. None of them changes a number."""
    for i, unit in enumerate(units):
        if cfg["forward_prefetch"] and i + 1 < len(units):
            unit.set_modules_to_forward_prefetch([units[i + 1]])
        if cfg["backward_prefetch"] == "none":
            unit.set_modules_to_backward_prefetch([])


def save(trainer, path, next_step):
    """A DCP checkpoint: every rank writes its shards; any world size can
    load it (fsdp.c's --save-dir does the same with its own format). The
    learning-rate scheduler's state rides along: DCP keeps a value that is
    not a tensor as bytes, read back whole by every rank."""
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer)
    state = {"model": model_sd, "optim": optim_sd, "next_step": torch.tensor(next_step)}
    if trainer.scheduler and trainer.mistake != "scheduler":
        state["scheduler"] = trainer.scheduler.state_dict()
    dcp.save(state, checkpoint_id=path)


def load(trainer, path):
    """Loads a DCP checkpoint into a model wrapped on any number of ranks:
    the state dicts of this world size say which pieces to read. Returns
    the step to continue from."""
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer)
    state = {"model": model_sd, "optim": optim_sd, "next_step": torch.tensor(0)}
    if trainer.scheduler and trainer.mistake != "scheduler":
        state["scheduler"] = trainer.scheduler.state_dict()
    dcp.load(state, checkpoint_id=path)
    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    if "scheduler" in state:
        trainer.scheduler.load_state_dict(state["scheduler"])
    return int(state["next_step"])


def export(model, path):
    """The whole model in one safetensors file, as fsdp.c's --export writes
    it: get_model_state_dict gathers every shard (full_state_dict) into
    host memory (cpu_offload) on rank 0 alone; the other ranks take part in
    the gathers and get nothing. For FSDP1 and FSDP2 alike."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    state.pop("lm_head.weight", None)  # GPT-2's is wte (tied): files hold it once, as wte
    if dist.get_rank() == 0:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in state.items()}, path)


# fsdp.c's ledger rows, and the categories of PyTorch's FSDPMemTracker
# (torch/distributed/_tools/fsdp2_mem_tracker.py) that hold the same bytes
MEMORY_ROWS = [
    ("parameters", ["SHARDED_PARAM"]),
    ("gradients", ["SHARDED_GRAD"]),
    ("optimizer", ["OPT"]),
    ("full params", ["UNSHARDED_PARAM"]),
    ("full grads", ["UNSHARDED_GRAD"]),
    ("activations", ["ACT", "TEMP"]),
    ("comm buffers", ["ALL_GATHER", "REDUCE_SCATTER"]),
]


def tracked_step(trainer, data, step):
    """One training step under PyTorch's FSDPMemTracker, which follows every
    tensor FSDP2's module and optimizer make (a TorchDispatchMode) and sorts
    them as fsdp.c's ledger does. Returns the step's loss and this rank's
    bytes by category at the step's peak, and the peak itself."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    tracker = FSDPMemTracker(trainer.model, trainer.optimizer)
    with tracker:
        loss = trainer.step(data, step)
    snap = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    return loss, {getattr(k, "name", k): int(v) for k, v in snap.items()}


def print_memory(run, every):
    """Rank 0's table: each rank's bytes in PyTorch at its step's peak, by
    fsdp.c's rows, beside fsdp.c's ledger (each row's own peak, and the
    peak of the sum) from run.json. The two columns are not one measure:
    PyTorch's is the moment the sum peaked, fsdp.c's each row at its own
    highest; the shards and the optimizer state, which never change size,
    are the same in both."""
    ledger = run["memory_peak_bytes"]
    print("memory per rank, MiB: PyTorch (FSDPMemTracker, at the step's peak) | "
          "fsdp.c (ledger, each row's peak)")
    rows = MEMORY_ROWS + [("total", ["Total"])]
    for name, cats in rows:
        cells = []
        for r, snap in enumerate(every):
            theirs = ledger[name][r] if r < len(ledger[name]) else float("nan")
            cells.append(f"{sum(snap.get(c, 0) for c in cats) / 2**20:8.3f} |{theirs / 2**20:7.3f}")
        print(f"  {name:14s}" + "   ".join(cells))


MISTAKES = {
    "clip": "torch.nn.utils.clip_grad_norm_ on the FSDP model: each rank clips by the norm of "
            "its own shards",
    "accumulation": "optimizer.step() when micro_batch_index % K == 0, the loss not divided "
                    "by K",
    "barrier": "dist.barrier() inside `if rank == 0:`",
    # not one of lecture 17's: tests/test_bridge.sh's proof that a resume
    # checks the scheduler's state
    "scheduler": "the learning-rate scheduler left out of the DCP checkpoint: a resumed StepLR "
                 "counts its steps from 0",
}


class Trainer:
    """The FSDP model and its optimizer, and one training step as the lab
    writes it, or (with a `mistake`) as one of the three case studies of
    lecture 17 wrote it."""

    def __init__(self, run, model, mistake=None):
        self.cfg, self.mistake = run["config"], mistake
        self.norms_differ = False  # did the ranks clip by different norms?
        self.model = wrap(run, model)
        cfg = self.cfg
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg["lr"],
                                           betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                                           weight_decay=cfg["weight_decay"])
        # --lr-schedule step: StepLR, stepped after every optimizer step;
        # its state (the steps it has counted) goes into the checkpoint
        self.scheduler = None
        if cfg["lr_schedule"] == "step":
            self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, cfg["step_size"],
                                                             cfg["gamma"])

    def step(self, data, step):
        """--grad-accum K micro-batches of B samples, each loss divided by K
        so that the K backward passes add up to the gradient of the mean over
        the local batch (inside no_sync() for all but the last, with
        --no-sync); then clip and step. Returns the local mean loss."""
        cfg, rank, world = self.cfg, dist.get_rank(), dist.get_world_size()
        K = cfg["grad_accum"]
        B = cfg["batch"] // world // K
        total = 0.0
        if self.mistake == "barrier" and rank == 0:
            dist.barrier()  # rank 0 alone: the others are already in the forward's all-gather
        for m in range(K):
            tokens, targets = local_batch(data, cfg["seed"], step, rank, world, m * B, B,
                                          cfg["context"], sequences=cfg["arch"] == "gpt2")
            sync = m == K - 1 or not cfg["no_sync"]
            with self.gradient_sync(sync):
                # the mean over B samples (GPT-2: B x T positions), in fp32 from
                # 16-bit logits, as fsdp.c's
                logits = logits_of(self.model, tokens).float()
                loss = F.cross_entropy(logits.flatten(0, -2), targets.flatten())
                (loss if self.mistake == "accumulation" else loss / K).backward()
            total += loss.item()
            if self.mistake == "accumulation" and (step * K + m) % K == 0:
                self.optimizer_step()  # the lab's: after micro-batch 0 of every K
        if self.mistake != "accumulation":
            self.optimizer_step()
        return total / K

    def gradient_sync(self, sync):
        """The context of one micro-batch's backward: FSDP1's no_sync() when
        it must not reduce; FSDP2 says it with set_requires_gradient_sync."""
        if self.cfg["fsdp2"]:
            self.model.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if sync else self.model.no_sync()

    def optimizer_step(self):
        """Clip (if the run did) and step. FSDP's own clip_grad_norm_ adds the
        ranks' sums of squares, so every rank clips by the whole model's norm,
        as fsdp.c's --clip-grad-norm does; torch.nn.utils.clip_grad_norm_
        sees only this rank's shards. Under FSDP2 the gradients are DTensors,
        whose norm is the whole tensor's: torch.nn.utils.clip_grad_norm_ is
        then the right call, and FSDP2 has no other."""
        max_norm = self.cfg["clip_grad_norm"]
        if max_norm > 0 and (self.mistake == "clip" or self.cfg["fsdp2"]):
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        elif max_norm > 0:
            norm = self.model.clip_grad_norm_(max_norm)
        if max_norm > 0:
            self.norms_differ |= report_norms(norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler:
            self.scheduler.step()


def report_norms(norm):
    """Every rank's view of the gradient norm, printed by rank 0; returns
    whether they differ (then the ranks scaled their shards differently)."""
    norms = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(norms, norm.detach().reshape(1).float())
    if dist.get_rank() == 0:
        print("  gradient norm as each rank saw it: " + ", ".join(f"{n.item():.6f}" for n in norms))
    return any(n.item() != norms[0].item() for n in norms)


def compare(rank, step, mean, theirs):
    """Rank 0's line for one step; returns the relative difference (0 if
    fsdp.c's run has no such step)."""
    ref = theirs.get(step + 1)
    if rank == 0 and ref is None:
        print(f"step {step + 1:4d} | PyTorch FSDP loss {mean:.6f} | fsdp.c: not in --fsdp-run")
    if ref is None:
        return 0.0
    diff = abs(mean - ref) / abs(ref)
    if rank == 0:
        print(f"step {step + 1:4d} | PyTorch FSDP loss {mean:.6f} | fsdp.c {ref:.6f} | "
              f"relative difference {diff:.1e}")
    return diff


def write_losses(path, cfg, world, losses, memory=None):
    """--json: PyTorch's losses as fsdp.c's --json holds its own, each a
    Python float (json writes the shortest text that reads back to the same
    number: no digit lost to printing, unlike the 6 decimals of the step
    lines, whose rounding would be most of a 1e-7 difference). With
    --memory, "memory": each rank's bytes by FSDPMemTracker's category at
    its step's peak."""
    with open(path, "w") as f:
        json.dump({"schema": "fsdp_lab.py losses", "version": 1,
                   "config": {"strategy": cfg["strategy"], "world": world},
                   "steps": losses, **({"memory": memory} if memory else {})}, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fsdp-run", required=True, help="fsdp.c's --json of the run to reproduce")
    ap.add_argument("--init", required=True, help="fsdp.c's --export of that run at --steps 0")
    ap.add_argument("--data", required=True, help="the --data file both runs train on")
    ap.add_argument("--steps", type=int, help="train to this step (default: the run's)")
    ap.add_argument("--save-dir", help="write a DCP checkpoint here after --save-at steps")
    ap.add_argument("--save-at", type=int)
    ap.add_argument("--resume", help="continue from this DCP checkpoint")
    ap.add_argument("--rtol", type=float,
                    help="how far a loss may differ, relative (default 1e-4; 2e-3 in bf16)")
    ap.add_argument("--mistake", choices=sorted(MISTAKES), help="a case study of lecture 17")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a collective may wait")
    ap.add_argument("--json", help="write PyTorch's losses here, at full precision")
    ap.add_argument("--export", help="write the trained parameters here (safetensors)")
    ap.add_argument("--memory", action="store_true",
                    help="FSDP2: track the last step's memory (FSDPMemTracker), print it beside "
                         "fsdp.c's ledger")
    args = ap.parse_args()

    run, model, data = read_inputs(args, int(os.environ.get("WORLD_SIZE", "1")))
    cfg = run["config"]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and args.mistake:
        print(f"case study: {MISTAKES[args.mistake]}")
    trainer = Trainer(run, model, args.mistake)
    first = load(trainer, args.resume) if args.resume else 0
    theirs = {s["step"]: s["loss"] for s in run["steps"]}
    worst, losses = 0.0, []
    last = (args.steps or cfg["steps"]) - 1
    for step in range(first, last + 1):
        if args.memory and step == last:
            loss, memory = tracked_step(trainer, data, step)
            mean = torch.tensor(loss)
        else:
            mean = torch.tensor(trainer.step(data, step))
        dist.all_reduce(mean)  # the global mean, as fsdp.c prints it
        losses.append({"step": step + 1, "loss": mean.item() / world})
        worst = max(worst, compare(rank, step, losses[-1]["loss"], theirs))
        if args.save_dir and step + 1 == args.save_at:
            save(trainer, args.save_dir, step + 1)
            if rank == 0:
                print(f"saved a DCP checkpoint of step {step + 1} to {args.save_dir}")
    every = None  # each rank's memory at its step's peak, by category (--memory)
    if args.memory:
        every = [None] * world
        dist.all_gather_object(every, memory)
        if rank == 0:
            print_memory(run, every)
    if rank == 0 and args.json:
        write_losses(args.json, cfg, world, losses, every)
    if args.export:
        export(trainer.model, args.export)
    ok = worst <= args.rtol and not trainer.norms_differ
    if rank == 0 and trainer.norms_differ:
        print("FAIL: the ranks clipped by different gradient norms (each saw its own shards)")
    if rank == 0:
        design = "FSDP2 (fully_shard) " if cfg["fsdp2"] else ""
        print(f"{world} ranks, {design}{cfg['strategy']}: the losses agree with fsdp.c's within "
              f"{args.rtol:g} (worst {worst:.1e})" if worst <= args.rtol else
              f"FAIL: a loss differs from fsdp.c's by {worst:.1e} > {args.rtol:g}")
    dist.barrier()  # every rank done with gloo before any tears it down
    dist.destroy_process_group()
    # os._exit, not sys.exit: a gloo thread still unwinding at interpreter
    # exit can abort the process ("terminate called without an active
    # exception", about 1 run in 10 here) after the verdict was printed
    sys.stdout.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
