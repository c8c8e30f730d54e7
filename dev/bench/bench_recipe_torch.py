"""dev/bench/bench_recipe_torch.py: the references of make bench's recipe row.

One step of nanoGPT's CPU recipe (bridge/gpt2_recipe.py): transformers'
GPT2LMHeadModel with fsdp.c's shape (4 layers, 4 heads, n_embd 128,
context 64, 256 byte tokens), 12 sequences of 64 tokens, fp32; forward,
backward, clip_grad_norm_(1.0) and AdamW in nanoGPT's two parameter groups:

  plain THREADS STEPS   one process on THREADS threads, the whole batch
  fsdp1 STEPS           under torchrun, one thread a rank: FSDP1
                        (FullyShardedDataParallel, a unit per GPT2Block,
                        full_shard), the batch split over the ranks
  fsdp2 STEPS           the same with FSDP2 (fully_shard on each block,
                        then the root)

Prints "ms_per_step" (rank 0), the best of 3 runs of STEPS steps after 3
warm-up steps, as make bench prints fsdp.c's best of 3.
"""
import datetime, functools, os, sys, time

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

B, T, V = 12, 64, 256


def model_and_optimizer():
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=T, vocab_size=V,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     activation_function="gelu_new", bos_token_id=V - 1, eos_token_id=V - 1)
    return GPT2LMHeadModel(cfg).float()


def groups(model):  # nanoGPT's configure_optimizers
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def clip_all(model, max_norm):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def best_ms(step, steps):
    for _ in range(3):
        step()
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        ms = 1e3 * (time.perf_counter() - t0) / steps
        best = ms if best is None or ms < best else best
    return best


def run(model, opt, clip, batch):
    x = torch.randint(0, V, (batch, T))
    y = torch.randint(0, V, (batch, T))

    def step():
        loss = F.cross_entropy(model(input_ids=x).logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        clip(1.0)
        opt.step()
    return step


def main():
    mode, steps = sys.argv[1], int(sys.argv[-1])
    if mode == "plain":
        torch.set_num_threads(int(sys.argv[2]))
        model = model_and_optimizer()
        opt = torch.optim.AdamW(groups(model), lr=1e-3, betas=(0.9, 0.99))
        clip = functools.partial(clip_all, model)
        print("%.2f" % best_ms(run(model, opt, clip, B), steps))
        return
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    torch.set_num_threads(1)  # one core a rank, as fsdp.c's ranks
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    world = dist.get_world_size()
    model = model_and_optimizer()
    if mode == "fsdp1":
        model = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True,
                     auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                        transformer_layer_cls={GPT2Block}))
        clip = model.clip_grad_norm_
    else:
        mesh = init_device_mesh("cpu", (world,))
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        clip = functools.partial(clip_all, model)  # DTensors: the norm over every rank
    opt = torch.optim.AdamW(groups(model), lr=1e-3, betas=(0.9, 0.99))
    ms = best_ms(run(model, opt, clip, B // world), steps)
    if dist.get_rank() == 0:
        print("%.2f" % ms)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
