#!/usr/bin/env python3
"""dev/profile/kernel_times.py -- where a GPU step's time went, kernel by kernel,
from what dev/profile/kernel_times.so recorded (CUPTI: each kernel's, copy's and
memset's start and end on the GPU's clock).

    python3 dev/profile/kernel_times.py K.rank0.txt --steps 3
    python3 dev/profile/kernel_times.py LONG.rank0.txt --minus SHORT.rank0.txt --steps 2 \\
        --roofline PLAN.txt

Prints, for one step:
  - how long the GPU was busy (any stream) against how long the step took on
    its clock: the rest is idle, the GPU waiting for the host to queue work
    (launches) or for the host to wait on it;
  - each stream's busy time (the compute stream, the communication stream);
  - the time by kind of work, named as ./fsdp --plan --roofline names its
    rows, beside the roofline's bound for that row when --roofline gives
    that output (run with the same flags): which kind is furthest from it;
  - the kernels that took the most, each with its calls a step.
Every figure is a recorded total divided by --steps. A run's first steps
carry the start-up (copies of the initial parameters, the first launches);
--minus SHORT subtracts a shorter run of the same command, so what is left
is STEPS steps with no start-up, as make bench-gpu times a step.

Python 3 standard library only. Bad input prints one line and exits with 2.
"""
import argparse
import re
import signal
import sys

# Kinds of work, the first that matches a kernel's short name. The names
# are the roofline's rows (./fsdp --plan --roofline), where it has one:
# ROOFLINE_ROWS gives the first word of the rows a kind is compared with.
KINDS = [
    ("collectives (NCCL's kernels)", r"^nccl"),
    ("matmuls (Linear, Conv1D)", r"gemm|nvjet|cutlass|xmma|gemv|splitK|cublas|^sm\d+_|bias_broadcast"),
    ("attention", r"flash|causal_softmax|attention"),
    ("layernorm", r"layernorm"),
    ("cross-entropy (softmax over V)", r"crossentropy"),
    ("bias gradients (column sums)", r"column_sums|bias_backward"),
    ("gelu", r"gelu"),
    ("residual adds", r"residual_add"),
    ("embeddings", r"embedding"),
    ("AdamW (this rank's shards)", r"adamw"),
    ("gradient norm (clipping)", r"sum_squares"),
    ("copies between host and GPU (start-up, --cpu-offload, staging)", r"^memcpy (HtoD|DtoH)"),
    ("FSDP's passes (packs, the mean's unpack, copies, zeroing, FSDP2's copy-out and chunk_cat)",
     r"pack_one|unpack|scale_one|scale_half|round_one|round_copy|add_one|rank_major_copy|"
     r"^memset|^memcpy"),
]
OTHER = "other"
ROOFLINE_ROWS = {"FSDP's": ["all-gathers:"]}  # zero1's shards packed for its all-gather


class BadInput(Exception):
    pass


def short_name(name):
    """A demangled kernel name as the emulator's FSDP_EMU_STATS spells it:
    no return type, no parameter list, for_each_kernel<fn> by its fn."""
    name = name.replace("(anonymous namespace)", "anonymous_namespace")  # no "(" of its own
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            name = name[:i]
            break
    m = re.search(r"for_each_kernel<&\(?(?:\w+::)*(\w+)", name)
    return f"for_each_kernel<{m.group(1)}>" if m else name


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name):
            return kind
    return OTHER


def read_ops(path):
    """[(name, start, end, stream)] from a file dev/profile/kernel_times.so wrote"""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror}")
    ops = []
    for n, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        f = line.split(" ", 4)
        try:
            if f[0] == "kernel" and len(f) == 5:
                name = short_name(f[4])
            elif f[0] == "memcpy" and len(f) == 5 and len(f[4].split()) == 2:
                name = "memcpy " + f[4].split()[1]
            elif f[0] == "memset" and len(f) == 5:
                name = "memset"
            else:
                raise ValueError
            start, end, stream = int(f[1]), int(f[2]), int(f[3])
        except (ValueError, IndexError):
            raise BadInput(f"{path}:{n}: not a line dev/profile/kernel_times.so writes: {line[:80]!r}")
        if end < start:
            raise BadInput(f"{path}:{n}: ends before it starts")
        ops.append((name, start, end, stream))
    if not ops:
        raise BadInput(f"{path}: no operations recorded (did CUDA load dev/profile/kernel_times.so? "
                       "CUDA_INJECTION64_PATH must name it by a full path)")
    return ops


def union_length(intervals):
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def totals(ops):
    """What one run adds up to: per name (time, calls), per stream busy,
    busy on any stream, and the span from the first start to the last end"""
    by_name, by_stream, stream_kinds = {}, {}, {}
    for name, start, end, stream in ops:
        t, c = by_name.get(name, (0, 0))
        by_name[name] = (t + end - start, c + 1)
        by_stream.setdefault(stream, []).append((start, end))
        key = (stream, kind_of(name))
        stream_kinds[key] = stream_kinds.get(key, 0) + end - start
    return {
        "names": by_name,
        "streams": {s: union_length(v) for s, v in by_stream.items()},
        "stream_kinds": stream_kinds,
        "busy": union_length([(o[1], o[2]) for o in ops]),
        "span": max(o[2] for o in ops) - min(o[1] for o in ops),
    }


def minus(a, b):
    """a's totals less b's: the steps a ran that b did not"""
    names = {n: (t - b["names"].get(n, (0, 0))[0], c - b["names"].get(n, (0, 0))[1])
             for n, (t, c) in a["names"].items()}
    return {
        "names": {n: v for n, v in names.items() if v[1] != 0 or v[0] != 0},
        "streams": {s: v - b["streams"].get(s, 0) for s, v in a["streams"].items()},
        "stream_kinds": {k: v - b["stream_kinds"].get(k, 0) for k, v in a["stream_kinds"].items()},
        "busy": a["busy"] - b["busy"],
        "span": a["span"] - b["span"],
    }


def read_roofline(path, precision):
    """{first word of a row: ms} from ./fsdp --plan --roofline's output,
    rows with the same first word summed (the math path's two attention
    rows), the whole step's under total"""
    column = {"fp32": 2, "bf16": 3}[precision]  # GFLOP, GB, ms fp32, ms bf16 GEMM, ms bf16
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror}")
    rows = {}
    for line in text[text.find("\nroofline"):].splitlines():
        m = re.match(r"  (\S.*?)((?:\s+[\d.]+){4,5})\b", line)
        if not m:
            continue
        numbers = [float(x) for x in m.group(2).split()]
        if m.group(1) == "total":  # no GB column
            numbers.insert(1, 0.0)
        if len(numbers) == 5:
            key = m.group(1).split()[0].lower()
            rows[key] = rows.get(key, 0.0) + numbers[column]
    if not rows:
        raise BadInput(f"{path}: no roofline rows (give the output of ./fsdp --plan ... --roofline h100)")
    if "attention GEMMs" in text:  # the math path's, which cuBLAS runs
        rows["note"] = ("the math path's attention GEMMs are cuBLAS kernels, so here under matmuls; "
                        "the roofline has them under attention")
    return rows


def report(t, steps, roofline, top):
    ms = lambda ns: ns / steps / 1e6  # noqa: E731 -- a step's milliseconds
    if t["busy"] <= 0 or t["span"] <= 0:
        raise BadInput("nothing left a step: the operations span no time, or --minus names a run "
                       "as long (it must be a shorter run of the same command)")
    out = [f"a step on the GPU's clock: {ms(t['span']):.2f} ms, busy {ms(t['busy']):.2f} ms "
           f"({100 * t['busy'] / t['span']:.0f}%), idle {ms(t['span'] - t['busy']):.2f} ms "
           "(waiting for the host to queue work, or for the host to wait)"]
    kinds = {}
    for name, (ns, _) in t["names"].items():
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0) + ns
    for s, ns in sorted(t["streams"].items(), key=lambda x: -x[1]):
        if ns <= 0:
            continue
        most = max((v, k) for (s2, k), v in t["stream_kinds"].items() if s2 == s)
        out.append(f"  stream {s}: busy {ms(ns):.2f} ms, most of it {most[1].split(' (')[0]} ({ms(most[0]):.2f} ms)")
    out.append("")
    head = f"  {'kind of work':58} {'ms':>8}"
    if roofline is not None:
        head += f" {'roofline ms':>12} {'x roofline':>10}"
    out.append(head)
    for kind in [k for k, _ in KINDS] + [OTHER]:
        keys = ROOFLINE_ROWS.get(kind.split()[0], [kind.split()[0].lower()])
        rows = [roofline[k] for k in keys if k in roofline] if roofline is not None else []
        bound = sum(rows) if rows else None
        if kind not in kinds and bound is None:
            continue
        line = f"  {kind:58} {ms(kinds.get(kind, 0)):8.2f}"
        if bound is not None:
            line += f" {bound:12.3f} {ms(kinds.get(kind, 0)) / bound:10.1f}" if bound > 0 else f" {bound:12.3f}"
        out.append(line)
    out.append(f"  {'all (stream by stream, so overlap counts twice)':58} {ms(sum(kinds.values())):8.2f}")
    line = f"  {'the step, on the GPU clock':58} {ms(t['span']):8.2f}"
    if roofline and roofline.get("total"):
        line += f" {roofline['total']:12.3f} {ms(t['span']) / roofline['total']:10.1f}"
    out.append(line)
    if roofline and roofline.get("note"):
        out.append("  note: " + roofline["note"])
    out.append("")
    out.append(f"  the {top} that took the most:")
    out.append(f"  {'ms':>8} {'calls':>6} {'us a call':>10}  kernel (kind)")
    for name, (ns, calls) in sorted(t["names"].items(), key=lambda x: -x[1][0])[:top]:
        per = f"{ns / calls / 1e3:10.1f}" if calls > 0 else f"{'':10}"
        shown = name if len(name) <= 70 else name[:69] + "~"
        each = f"{calls // steps:6d}" if calls % steps == 0 else f"{calls / steps:6.1f}"
        out.append(f"  {ms(ns):8.3f} {each} {per}  {shown} ({kind_of(name).split(' (')[0]})")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(prog="dev/profile/kernel_times.py", description=__doc__.split("\n\n")[0])
    p.add_argument("file", metavar="K.rankR.txt", help="what dev/profile/kernel_times.so wrote")
    p.add_argument("--minus", metavar="SHORT.rankR.txt", help="a shorter run of the same command, subtracted")
    p.add_argument("--steps", type=int, default=1, help="steps in FILE (less --minus's): the figures are a step's")
    p.add_argument("--roofline", metavar="PLAN.txt", help="./fsdp --plan ... --roofline h100's output, same flags")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                   help="the roofline's column: bf16 (--param-dtype bf16, the default) or fp32")
    p.add_argument("--top", type=int, default=20, help="kernels listed (20)")
    p.error = lambda m: (print(f"dev/profile/kernel_times.py: {m}", file=sys.stderr), sys.exit(2))
    a = p.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head: stop quietly
    if a.steps < 1 or a.top < 1:
        p.error("--steps and --top take a whole number from 1")
    try:
        t = totals(read_ops(a.file))
        if a.minus:
            t = minus(t, totals(read_ops(a.minus)))
        roofline = read_roofline(a.roofline, a.precision) if a.roofline else None
        print(report(t, a.steps, roofline, a.top))
    except BadInput as e:
        print(f"dev/profile/kernel_times.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
