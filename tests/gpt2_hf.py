"""tests/gpt2_hf.py: fsdp.c's GPT-2 is Hugging Face's GPT2LMHeadModel.

Run by tests/test_gpt2_hf.sh with the Python of .venv-torch/ (PyTorch and
transformers). It makes a small GPT-2 with transformers from a GPT2Config
(no download), saves it, and checks, for fsdp.c on N ranks (each --case
RANKS[:FLAGS] in turn, in one process: importing torch and transformers
costs more than a case):
  1. --init-from reads Hugging Face's model.safetensors, and OpenAI's
     layout too (GPT2Model's names, attn.bias buffers), bit for bit;
  2. the loss of every step equals transformers' on the same tokens,
     trained by torch.optim.AdamW with the same hyperparameters;
  3. the exported model.safetensors + config.json load with
     GPT2LMHeadModel.from_pretrained (no missing or unexpected keys), hold
     the parameters AdamW reached, and give transformers' logits.

The data is one sequence of T+1 bytes, so every sample of every batch is
that sequence (fsdp.c's sampler has one position to draw) and both sides
see the same tokens without sharing a sampler.

Tolerances. Both sides compute in fp32 with different summation orders
(fsdp.c's blocked matmuls and per-row loops, PyTorch's BLAS): one step's
loss differs by ~1e-7 relative, and we allow 1e-5. AdamW's first steps
move a parameter by about lr * sign(g) whatever g's size, so rounding in g
shows in the parameters only where g is near zero; after a few steps of lr
1e-3 the parameters agree to ~1e-6, and we allow 1e-4 (a tenth of one
step's move). A wrong gradient in any tensor moves it by lr per step in
the wrong direction and fails both checks.
"""
import argparse, json, os, subprocess, sys, tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel

def case(text):
    """RANKS[:FLAGS] -> (ranks, flags); argparse says what is wrong and exits 2"""
    ranks, _, flags = text.partition(":")
    if not ranks.isdigit() or int(ranks) < 1:
        raise argparse.ArgumentTypeError("%r: give RANKS[:FLAGS], RANKS a number of ranks >= 1" % text)
    return int(ranks), flags


p = argparse.ArgumentParser()
p.add_argument("--fsdp", default="./fsdp")
p.add_argument("--mpirun", default="mpirun")
p.add_argument("--case", type=case, action="append", default=[], metavar="RANKS[:FLAGS]",
               help="fsdp.c on RANKS ranks with more FLAGS (a strategy, --activation-checkpointing);"
                    " repeat it for more cases (default: 3 ranks, full_shard)")
p.add_argument("--steps", type=int, default=4)
p.add_argument("--break-grad", action="store_true",
               help="self-test: drop one tensor's gradient in transformers' training, which must fail")
a = p.parse_args()

L, D, H, T, V, B, LR = 2, 32, 2, 16, 256, 6, 1e-3
torch.manual_seed(0)
cfg = GPT2Config(n_layer=L, n_embd=D, n_head=H, n_positions=32, vocab_size=V,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
                 layer_norm_epsilon=1e-5, bos_token_id=V - 1, eos_token_id=V - 1)
ref = GPT2LMHeadModel(cfg).float()
tmp = tempfile.mkdtemp()
src = os.path.join(tmp, "hf")
ref.save_pretrained(src, safe_serialization=True)
text = b"the cat sat on a mat"[: T + 1]
with open(os.path.join(tmp, "seq.txt"), "wb") as f:
    f.write(text)

# OpenAI's checkpoint on the Hub is GPT2Model's: names without "transformer.",
# and (saved by older versions) each block's causal mask as attn.bias.
# --init-from must read it as the same model: exported with --steps 0, every
# tensor must come back bit for bit.
from safetensors.torch import save_file
openai = {k: v.contiguous() for k, v in ref.transformer.state_dict().items()}
for i in range(L):
    openai["h.%d.attn.bias" % i] = torch.tril(torch.ones(1, 1, 32, 32))
save_file(openai, os.path.join(tmp, "openai.safetensors"), metadata={"format": "pt"})
os.makedirs(os.path.join(tmp, "back"))
r = subprocess.run(a.mpirun.split() + ["-np", "2", a.fsdp, "--model", "gpt2-tiny", "--steps", "0",
                   "--init-from", os.path.join(tmp, "openai.safetensors"),
                   "--export", os.path.join(tmp, "back", "model.safetensors")], capture_output=True, text=True)
back0 = GPT2LMHeadModel.from_pretrained(os.path.join(tmp, "back")) if r.returncode == 0 else None
same = back0 is not None and all(torch.equal(x, y) for x, y in zip(ref.state_dict().values(), back0.state_dict().values()))
if not same:
    print("FAIL: --init-from OpenAI's layout (no transformer. prefix, attn.bias buffers) did not read "
          "the same model: exit %d %s" % (r.returncode, r.stderr[-500:]))
    sys.exit(1)
print("ok: --init-from reads OpenAI's layout (names without transformer., attn.bias buffers ignored): "
      "every tensor back bit for bit")


def check_case(ranks, flags, out):
    """fsdp.c on `ranks` ranks with `flags` against transformers' own
    training of the same initial model; returns a failure's message, or None"""
    cmd = (a.mpirun.split() + ["-np", str(ranks), a.fsdp, "--model", "gpt2-tiny",
           "--init-from", os.path.join(src, "model.safetensors"), "--data", os.path.join(tmp, "seq.txt"),
           "--steps", str(a.steps), "--batch", str(B), "--lr", str(LR), "--log-every", "1",
           "--json", os.path.join(out, "run.json"), "--export", os.path.join(out, "model.safetensors")]
           + flags.split())
    os.makedirs(out)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return "fsdp.c exited %d:\n%s%s" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    losses = [s["loss"] for s in json.load(open(os.path.join(out, "run.json")))["steps"]]

    ref = GPT2LMHeadModel.from_pretrained(src)  # the initial model, trained here
    x = torch.tensor(list(text[:T]), dtype=torch.long).repeat(B, 1)
    y = torch.tensor(list(text[1:T + 1]), dtype=torch.long).repeat(B, 1)
    opt = torch.optim.AdamW(ref.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    worst = 0.0
    for step in range(a.steps):
        logits = ref(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if a.break_grad:
            ref.transformer.h[0].attn.c_attn.weight.grad = None  # (AdamW ignores a scaled one)
        opt.step()
        rel = abs(losses[step] - loss.item()) / abs(loss.item())
        worst = max(worst, rel)
        if rel > 1e-5:
            return ("step %d: fsdp.c's loss %.7f, transformers' %.7f (%.1e relative > 1e-5)"
                    % (step + 1, losses[step], loss.item(), rel))
    print("ok: %d steps on %d ranks (%s): every loss equals transformers' within 1e-5 (worst %.1e)"
          % (a.steps, ranks, flags or "full_shard", worst))
    return check_export(ref, x, out)


def check_export(ref, x, out):
    """fsdp.c's export in `out` against `ref`, the model transformers
    trained: it loads, its lm_head is tied, its parameters and logits are
    ref's; returns a failure's message, or None"""
    back, info = GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        return "from_pretrained(%s): %s" % (out, bad)
    if back.lm_head.weight.data_ptr() != back.transformer.wte.weight.data_ptr():
        return "the exported model's lm_head is not tied to wte"
    diff = max((pa - pb).abs().max().item()
               for pa, pb in zip(ref.state_dict().values(), back.state_dict().values()))
    if diff > 1e-4:
        name = max(ref.state_dict(), key=lambda k: (ref.state_dict()[k] - back.state_dict()[k]).abs().max())
        return "the exported parameters differ from AdamW's by %.1e (> 1e-4), worst in %s" % (diff, name)
    with torch.no_grad():
        dl = (back(input_ids=x).logits - ref(input_ids=x).logits).abs().max().item()
    if dl > 1e-3:
        return "the exported model's logits differ from transformers' by %.1e" % dl
    print("ok: the export loads with from_pretrained (no missing or unexpected keys, lm_head tied to wte), "
          "its parameters are AdamW's within 1e-4 (worst %.1e) and its logits transformers' (worst %.1e)"
          % (diff, dl))
    return None


failed = 0
for n, (ranks, flags) in enumerate(a.case or [(3, "")]):
    why = check_case(ranks, flags, os.path.join(tmp, "out%d" % n))
    if why:
        print("FAIL: %s ranks (%s): %s" % (ranks, flags or "full_shard", why))
        failed += 1
sys.exit(1 if failed else 0)
