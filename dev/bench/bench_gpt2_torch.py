"""dev/bench/bench_gpt2_torch.py: the reference for make bench's GPT-2 row.

transformers' GPT2LMHeadModel of fsdp.c's shape, trained on one CPU thread
(torch.set_num_threads(1): fsdp.c's rank is one thread too) with
torch.optim.AdamW on B sequences of T tokens, fp32: forward, backward and
step, as one fsdp.c step on one rank. Prints "ms_per_step tok_per_s" of the
best of 3 runs of STEPS steps (the first step excluded: allocation).

    .venv-torch/bin/python dev/bench/bench_gpt2_torch.py L D H T V B STEPS
"""
import sys, time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

L, D, H, T, V, B, STEPS = map(int, sys.argv[1:8])
torch.set_num_threads(1)
torch.manual_seed(0)
cfg = GPT2Config(n_layer=L, n_embd=D, n_head=H, n_positions=T, vocab_size=V, resid_pdrop=0.0,
                 embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
                 bos_token_id=V - 1, eos_token_id=V - 1)
model = GPT2LMHeadModel(cfg).float()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
x = torch.randint(0, V, (B, T))
y = torch.randint(0, V, (B, T))


def step():
    loss = torch.nn.functional.cross_entropy(model(input_ids=x).logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()


step()
best = None
for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    ms = 1e3 * (time.perf_counter() - t0) / STEPS
    best = ms if best is None or ms < best else best
print("%.2f %.0f" % (best, B * T / (best / 1e3)))
