#!/usr/bin/env python3
"""sim/report.py -- one self-contained HTML page from `fsdp --trace` files.

    python3 sim/report.py TRACE.json [TRACE2.json] -o report.html
    python3 sim/report.py --phases TRACE.json     (a table of a step's time: no page)

Reads one trace, or two to compare side by side (typically a no_shard (DDP)
run and a full_shard (FSDP) run of the same model on the same number of
ranks), and writes a single HTML file that needs nothing else: no network,
no external scripts, fonts or style sheets. The data is embedded as JSON and
drawn as inline SVG by inline JavaScript; the tables are plain HTML.

The page shows, per trace:
  1. memory per rank over time, stacked by ledger category, with the --vram
     budget line when there was one;
  2. the unit timeline per rank: forward/backward/optimizer spans on a
     compute lane, collectives on a communication lane, with hover details;
  3. traffic per unit and collective kind: bytes each rank sends per step;
and with two traces, the two side by side: peak memory per category,
traffic per kind and step time.

`fsdp --compare --trace FILE.json` writes the pair to compare as
FILE.no_shard.json and FILE.full_shard.json:

    mpirun -np 4 ./fsdp --compare --trace run.json
    python3 sim/report.py run.no_shard.json run.full_shard.json -o report.html

Long runs stay readable: the timeline shows the first few steps, the memory
charts can show that window or the whole run (thinned, peaks kept), and the
traffic tables count every step; the page says what it left out.

Python 3 standard library only. Bad input (a missing file, not JSON, a
truncated file, JSON that is not an fsdp trace, two traces of different world
sizes, an unwritable output) prints one line on stderr and exits with 2.
"""
import argparse
import bisect
import html
import json
import math
import os
import stat
import sys
import tempfile

PROG = "report.py"
CATEGORIES = ["parameters", "gradients", "optimizer", "full params",
              "full grads", "activations", "comm buffers"]
KINDS = ["all_gather", "reduce_scatter", "all_reduce"]
PHASES = ["forward", "backward", "optimizer"]
STRATEGY_BLURB = {
    "no_shard": "DDP: every rank holds the whole model, gradients are all-reduced",
    "full_shard": "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded 1/N",
    "shard_grad_op": "ZeRO-2: gradients and optimizer state sharded, parameters kept from forward to backward",
}

# Size limits that keep the page small and quick to draw.
TIMELINE_MAX_STEPS = 3      # steps drawn on the timeline when a run has more than ...
TIMELINE_ALL_STEPS = 4      # ... this many steps
TIMELINE_MAX_SPANS = 6000   # spans + collectives per trace on the timeline, all ranks
MEM_RUN_POINTS = 600        # memory samples per rank for the whole-run view
MEM_WINDOW_POINTS = 3000    # memory samples per rank for the timeline window


class InputError(Exception):
    """A problem with the input or output; the message names the file."""


# ---------------------------------------------------------------------------
# Reading and checking one trace
# ---------------------------------------------------------------------------

def read_json(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise InputError("%s: no such file" % path)
    except IsADirectoryError:
        raise InputError("%s: is a directory, not a trace file" % path)
    except PermissionError:
        raise InputError("%s: cannot read it (permission denied)" % path)
    except OSError as e:
        raise InputError("%s: cannot read it (%s)" % (path, e.strerror or e))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("%s: not JSON (not UTF-8 text; is it a binary file?)" % path)
    if not text.strip():
        raise InputError("%s: empty file, not JSON (did the run that wrote it fail?)" % path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            raise InputError("%s: truncated JSON: the file ends in the middle of the data "
                             "(after %d bytes); was the run that wrote it interrupted?" % (path, len(raw)))
        if e.msg == "Extra data":
            raise InputError("%s: not JSON: extra data after the end at line %d, column %d"
                             % (path, e.lineno, e.colno))
        raise InputError("%s: not JSON: %s at line %d, column %d" % (path, e.msg, e.lineno, e.colno))
    except (RecursionError, ValueError) as e:
        raise InputError("%s: not JSON: %s" % (path, e))


def num(x, default=0.0):
    """A finite float, or default (NaN, strings and nulls are not numbers)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return default
    x = float(x)
    return x if math.isfinite(x) else default


def integer(x, default=None):
    if isinstance(x, bool):
        return default
    if isinstance(x, int):
        return x
    if isinstance(x, float) and math.isfinite(x) and x == int(x):
        return int(x)
    return default


def header_of(path, doc):
    if not isinstance(doc, dict):
        raise InputError("%s: not an fsdp trace: the JSON is %s, not an object with traceEvents"
                         % (path, {"list": "an array", "str": "a string", "int": "a number", "float": "a number", "bool": "true or false", "NoneType": "null"}.get(type(doc).__name__, "not an object")))
    if not isinstance(doc.get("traceEvents"), list):
        raise InputError("%s: not an fsdp trace: no traceEvents array (is it a file written by fsdp --trace?)" % path)
    other = doc.get("otherData")
    meta = other.get("fsdp") if isinstance(other, dict) else None
    if not isinstance(meta, dict):
        raise InputError("%s: not an fsdp trace: no otherData.fsdp header "
                         "(a Chrome trace, but not one written by fsdp --trace)" % path)
    world = integer(meta.get("world"))
    if world is None or world < 1:
        raise InputError("%s: not an fsdp trace: otherData.fsdp.world is missing or not a positive integer" % path)
    if world > 4096:
        raise InputError("%s: otherData.fsdp.world is %d; this report draws at most 4096 ranks" % (path, world))
    return meta, world


def load_trace(path, label):
    doc = read_json(path)
    meta, world = header_of(path, doc)
    try:
        return Trace(path, label, meta, world, doc["traceEvents"])
    except InputError:
        raise
    except Exception as e:  # a header field of an unexpected shape: say which file
        raise InputError("%s: malformed fsdp trace (%s: %s)" % (path, type(e).__name__, e))


class Trace:
    """One trace, digested into what the page draws."""

    def __init__(self, path, label, meta, world, events):
        self.path, self.label, self.world = path, label, world
        self.name = os.path.basename(path)
        cats = meta.get("categories")
        self.cats = cats if isinstance(cats, list) and cats and all(isinstance(c, str) for c in cats) else CATEGORIES
        self.strategy = str(meta.get("strategy", "?"))
        self.model = str(meta.get("model", "?"))
        self.clock = str(meta.get("clock", "real"))
        self.net = str(meta.get("net", "none"))
        self.vram = num(meta.get("vram"))
        self.seconds = num(meta.get("seconds"), None)
        self.final_loss = num(meta.get("final_loss"), None)
        self.version = meta.get("version")
        self.units = {}
        for u in meta.get("units") or []:
            if isinstance(u, dict) and integer(u.get("index")) is not None:
                self.units[integer(u["index"])] = {
                    "index": integer(u["index"]), "name": str(u.get("name", "unit %s" % u["index"])),
                    "numel": num(u.get("numel")), "padded": num(u.get("padded")), "shard": num(u.get("shard"))}
        self.skipped = 0
        self.parse_events(events)
        steps = integer(meta.get("steps"))
        self.steps = steps if steps and steps > 0 else max(1, self.steps_seen)
        self.peaks(meta)
        self.bytes_sent_meta = self.per_rank_dict(meta.get("bytes_sent"), KINDS)

    # -- events ---------------------------------------------------------------
    def parse_events(self, events):
        N = self.world
        self.compute = [[] for _ in range(N)]   # (ts, dur, phase, unit, step)
        self.comm = [[] for _ in range(N)]      # (ts, dur, kind, unit, count, bytes, sim_us, step)
        self.frees = [[] for _ in range(N)]     # (ts, unit, step)
        self.mem = [[] for _ in range(N)]       # (ts, [bytes per category])
        for ev in events:
            if not isinstance(ev, dict):
                self.skipped += 1
                continue
            ph = ev.get("ph")
            if ph not in ("X", "C", "i", "I"):
                continue  # metadata and anything else
            pid, ts = integer(ev.get("pid")), num(ev.get("ts"), None)
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            if pid is None or not 0 <= pid < N or ts is None:
                self.skipped += 1
                continue
            if ph == "X":
                dur = max(0.0, num(ev.get("dur")))
                step = integer(args.get("step"), 0)
                unit = integer(args.get("unit"), -1)
                if ev.get("cat") == "comm" or "kind" in args:
                    kind = args.get("kind")
                    if kind not in KINDS:
                        self.skipped += 1
                        continue
                    self.comm[pid].append((ts, dur, KINDS.index(kind), unit, num(args.get("count")),
                                           num(args.get("bytes")), num(args.get("sim_us")), step))
                else:
                    phase = args.get("phase")
                    if phase not in PHASES:
                        name = str(ev.get("name", ""))
                        phase = next((p for p in PHASES if name.startswith(p)), None)
                    if phase is None:
                        self.skipped += 1
                        continue
                    self.compute[pid].append((ts, dur, PHASES.index(phase), unit, step))
            elif ph == "C":
                if ev.get("name") != "memory":
                    continue
                self.mem[pid].append((ts, [num(args.get(c)) for c in self.cats]))
            else:
                if str(ev.get("name", "")).startswith("free"):
                    self.frees[pid].append((ts, integer(args.get("unit"), -1), integer(args.get("step"), 0)))
        for lists in (self.compute, self.comm, self.frees, self.mem):
            for lst in lists:
                lst.sort(key=lambda e: e[0])
        steps = [e[-1] for r in range(N) for e in self.compute[r] + self.comm[r]]
        self.steps_seen = max(steps) + 1 if steps else 0
        starts = [e[0] for r in range(N) for e in self.compute[r] + self.comm[r] + self.frees[r] + self.mem[r]]
        ends = [e[0] + e[1] for r in range(N) for e in self.compute[r] + self.comm[r]] + starts
        self.t0 = min(starts) if starts else 0.0
        self.t1 = max(ends) if ends else 0.0
        self.n_events = sum(len(x[r]) for x in (self.compute, self.comm, self.frees, self.mem) for r in range(N))

    def per_rank_dict(self, d, keys):
        if not isinstance(d, dict):
            return None
        out = {}
        for k in keys:
            v = d.get(k)
            if isinstance(v, list) and len(v) == self.world:
                out[k] = [num(x) for x in v]
        return out

    def peaks(self, meta):
        """Peak bytes per category and rank: the writer's ledger peaks, or the
        largest memory sample where the header lacks them."""
        N = self.world
        computed = {c: [max((s[1][k] for s in self.mem[r]), default=0.0) for r in range(N)]
                    for k, c in enumerate(self.cats)}
        computed_total = [max((sum(s[1]) for s in self.mem[r]), default=0.0) for r in range(N)]
        given = self.per_rank_dict(meta.get("peak"), self.cats + ["total"]) or {}
        self.peak = {c: given.get(c, computed[c]) for c in self.cats}
        self.peak_total = given.get("total", computed_total)

    # -- what the page draws ----------------------------------------------------
    def step_bounds(self):
        lo, hi = {}, {}
        for r in range(self.world):
            for e in self.compute[r] + self.comm[r]:
                s = e[-1]
                lo[s] = min(lo.get(s, e[0]), e[0])
                hi[s] = max(hi.get(s, e[0] + e[1]), e[0] + e[1])
        return {s: (lo[s], hi[s]) for s in lo}

    def window(self):
        """The steps the timeline shows, and their time range."""
        bounds = self.step_bounds()
        if not bounds:
            return [], self.t0, self.t1
        steps = sorted(bounds)
        if len(steps) > TIMELINE_ALL_STEPS:
            steps = steps[:TIMELINE_MAX_STEPS]
        per_step = max(1, sum(len(self.compute[r]) + len(self.comm[r]) for r in range(self.world)) // len(bounds))
        while len(steps) > 1 and per_step * len(steps) > TIMELINE_MAX_SPANS:
            steps = steps[:-1]
        w0 = min(bounds[s][0] for s in steps)
        w1 = max(bounds[s][1] for s in steps)
        return steps, w0, w1

    def timeline(self, steps, w0, w1):
        keep = set(steps)
        ms = lambda t: round((t - w0) / 1000.0, 4)
        ranks, maxdepth = [], 0
        for r in range(self.world):
            comp = [e for e in self.compute[r] if e[4] in keep]
            comp.sort(key=lambda e: (e[0], -e[1]))
            out, stack = [], []
            for ts, dur, ph, unit, step in comp:
                # nested: starts before the enclosing span ends and ends
                # within it (0.01 us of slack for the writer's rounding)
                while stack and (stack[-1] <= ts + 0.01 or ts + dur > stack[-1] + 0.01):
                    stack.pop()
                depth = len(stack)
                stack.append(ts + dur)
                maxdepth = max(maxdepth, depth)
                out.append([ms(ts), round(dur / 1000.0, 4), ph, unit, step, depth])
            comm = [[ms(e[0]), round(e[1] / 1000.0, 4), e[2], e[3], e[4], e[5], round(e[6], 3), e[7]]
                    for e in self.comm[r] if e[7] in keep]
            frees = [[ms(t), u] for t, u, s in self.frees[r] if s in keep and w0 <= t <= w1]
            ranks.append({"c": out, "m": comm, "f": frees})
        bounds = self.step_bounds()
        return {"steps": [[s, ms(bounds[s][0]), ms(bounds[s][1])] for s in steps],
                "end": ms(w1), "depth": min(maxdepth + 1, 4), "ranks": ranks}

    def memory(self, t_from, t_to, max_points):
        """Per rank: times (ms from t_from) and bytes per category, the value
        before t_from carried in, and at most max_points samples, keeping
        each bucket's lowest and highest total so peaks survive."""
        out = []
        for r in range(self.world):
            samples = self.mem[r]
            times = [s[0] for s in samples]
            i = bisect.bisect_left(times, t_from)
            j = bisect.bisect_right(times, t_to)
            sel = samples[i:j]
            if i > 0:
                sel = [(t_from, samples[i - 1][1])] + sel
            if len(sel) > max_points:
                sel = downsample(sel, max_points, t_from, t_to)
            out.append({"t": [round((t - t_from) / 1000.0, 4) for t, _ in sel],
                        "v": [[int(round(x)) for x in vals] for _, vals in sel]})
        return out

    def traffic(self):
        """Bytes each rank sends per step, by unit and kind (max over ranks;
        a ring sends the same from every rank), and calls per step."""
        N, per = self.world, float(self.steps)
        sums = {}
        for r in range(N):
            for e in self.comm[r]:
                row = sums.setdefault(e[3], [[0.0] * N for _ in KINDS] + [[0] * N for _ in KINDS])
                row[e[2]][r] += e[5]
                row[3 + e[2]][r] += 1
        rows = []
        for unit in sorted(sums, key=lambda u: (u < 0, u)):
            row = sums[unit]
            rows.append({"unit": unit, "name": self.unit_name(unit),
                         "numel": self.units.get(unit, {}).get("numel", 1 if unit < 0 else 0),
                         "bytes": [max(row[k]) / per for k in range(3)],
                         "calls": [max(row[3 + k]) / per for k in range(3)]})
        per_rank_kind = [[sum(sums[u][k][r] for u in sums) for r in range(N)] for k in range(3)]
        check = None
        if self.bytes_sent_meta:
            check = all(abs(per_rank_kind[k][r] - self.bytes_sent_meta[kind][r]) <= 1e-6 * max(1.0, self.bytes_sent_meta[kind][r]) + 1
                        for k, kind in enumerate(KINDS) if kind in self.bytes_sent_meta for r in range(N))
        totals = [max(per_rank_kind[k]) / per for k in range(3)]
        return {"rows": rows, "total": totals, "check": check,
                "calls": [sum(r["calls"][k] for r in rows) for k in range(3)]}

    def unit_name(self, unit):
        if unit < 0:
            return "the loss"
        return self.units.get(unit, {}).get("name", "unit %d" % unit)

    def timing(self):
        """Per step, mean over ranks and steps, from the events: a rank's
        step lasts from its first event of the step to its last; busy is the
        union of its compute spans and collectives; compute is busy less the
        collectives; other (waiting between hooks, bookkeeping) the rest."""
        per = {}
        for r in range(self.world):
            for e in self.compute[r] + self.comm[r]:
                per.setdefault((r, e[-1]), []).append(e)
        if not per:
            return None
        wall = busy = comm = sim = 0.0
        for evs in per.values():
            wall += max(e[0] + e[1] for e in evs) - min(e[0] for e in evs)
            busy += union_length([(e[0], e[0] + e[1]) for e in evs])
            comms = [e for e in evs if len(e) == 8]
            comm += sum(e[1] for e in comms)
            sim += sum(e[6] for e in comms)
        n = 1000.0 * len(per)
        wall, busy, comm = wall / n, busy / n, comm / n
        return {"wall": wall, "comm": comm, "compute": max(0.0, busy - comm),
                "other": max(0.0, wall - busy), "sim_comm": sim / n,
                "writer": self.seconds * 1000.0 / self.steps if self.seconds else None}


def union_length(intervals):
    total, end = 0.0, None
    start = None
    for a, b in sorted(intervals):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    if end is not None:
        total += end - start
    return total


def downsample(sel, max_points, t_from, t_to):
    nb = max(1, max_points // 2 - 1)
    span = max(t_to - t_from, 1e-9)
    buckets = {}
    for idx, (t, vals) in enumerate(sel):
        b = min(nb - 1, int((t - t_from) / span * nb))
        tot = sum(vals)
        lo_hi = buckets.get(b)
        if lo_hi is None:
            buckets[b] = [idx, tot, idx, tot]
        else:
            if tot < lo_hi[1]:
                lo_hi[0], lo_hi[1] = idx, tot
            if tot > lo_hi[3]:
                lo_hi[2], lo_hi[3] = idx, tot
    keep = {0, len(sel) - 1}
    for lo, _, hi, _ in buckets.values():
        keep.add(lo)
        keep.add(hi)
    return [sel[i] for i in sorted(keep)]


# ---------------------------------------------------------------------------
# The page: tables in HTML, charts from the embedded data by inline JS
# ---------------------------------------------------------------------------

def fmt_bytes(b):
    b = float(b)
    if abs(b) < 1024:
        return "%d B" % round(b)
    for unit, div in (("KiB", 1024.0), ("MiB", 1024.0 ** 2), ("GiB", 1024.0 ** 3)):
        if abs(b) < 1024 * div or unit == "GiB":
            v = b / div  # the same digits as the page's script (f3)
            return ("%.0f" % v if v >= 100 else "%.1f" % v if v >= 10 else "%.2f" % v) + " " + unit


def fmt_mib(b):
    return "%.3f" % (b / 1024.0 ** 2)


def fmt_ms(ms):
    if ms is None:
        return "n/a"
    if ms < 1:
        return "%.1f µs" % (ms * 1000)
    return "%.3g ms" % ms if ms < 100 else "%.0f ms" % ms


def ratio(a, b):
    """b / a, where both are comparable: nothing when either is under 1%
    of the other (12 bytes of loss against megabytes is no ratio)."""
    if a <= 0.01 * b or b <= 0.01 * a:
        return ""
    return "%.2f×" % (b / a)


E = html.escape


def run_card(t, timing):
    rows = [
        ("strategy", "<b>%s</b><br><span class=muted>%s</span>" % (E(t.strategy), E(STRATEGY_BLURB.get(t.strategy, "")))),
        ("model", E(t.model)),
        ("ranks (world)", str(t.world)),
        ("steps", "%d%s" % (t.steps, "" if t.steps_seen in (0, t.steps) else " (%d in the events)" % t.steps_seen)),
        ("units", str(len(t.units)) if t.units else "?"),
        ("clock", {"real": "real: this machine's wall clock",
                   "sim": "sim: collectives last what the %s model says" % E(t.net)}.get(t.clock, E(t.clock))),
        ("network model", E(t.net) if t.net != "none" else "none"),
        ("--vram budget", fmt_bytes(t.vram) + " per rank" if t.vram > 0 else "unlimited"),
        ("time per step", "%s (the run's %.3g s / %d steps)" % (fmt_ms(timing["writer"]), t.seconds, t.steps)
         if timing and timing["writer"] else (fmt_ms(timing["wall"]) if timing else "n/a")),
        ("peak memory", "%s MiB per rank (max over ranks)" % fmt_mib(max(t.peak_total or [0]))),
        ("final loss", "%.4f" % t.final_loss if t.final_loss is not None else "n/a"),
    ]
    body = "".join("<tr><th>%s</th><td>%s</td></tr>" % r for r in rows)
    return ('<div class="card trace-%s"><h3><span class="tag">%s</span> %s</h3>'
            '<div class="file">%s</div><table class="kv">%s</table></div>'
            % (t.label.lower(), t.label, E(t.strategy), E(t.path), body))


def peak_table(t):
    head = "".join("<th>rank %d</th>" % r for r in range(t.world))
    rows = []
    for c in t.cats:
        cells = "".join("<td>%s</td>" % fmt_mib(v) for v in t.peak[c])
        rows.append('<tr><th><span class="sw" style="--c:var(--cat%d)"></span>%s</th>%s</tr>'
                    % (t.cats.index(c) % 7, E(c), cells))
    cells = "".join("<td><b>%s</b></td>" % fmt_mib(v) for v in t.peak_total)
    rows.append("<tr class=total><th>total (peak of the sum)</th>%s</tr>" % cells)
    return ('<table class="num"><caption>%s: %s, peak MiB per rank</caption><thead><tr><th></th>%s</tr></thead>'
            '<tbody>%s</tbody></table>' % (t.label, E(t.strategy), head, "".join(rows)))


def traffic_table(t, tr):
    rows = []
    for row in tr["rows"]:
        cells = "".join("<td>%s</td>" % (fmt_bytes(b) if b else '<span class=muted>0</span>') for b in row["bytes"])
        calls = " + ".join("%g %s" % (c, k) for c, k in zip(row["calls"], ("AG", "RS", "AR")) if c)
        rows.append("<tr><th>%s</th><td>%s</td>%s<td><b>%s</b></td><td>%s</td></tr>"
                    % (E(row["name"]), "%d" % row["numel"], cells, fmt_bytes(sum(row["bytes"])), calls))
    tot = "".join("<td><b>%s</b></td>" % fmt_bytes(b) for b in tr["total"])
    calls = " + ".join("%g %s" % (c, k) for c, k in zip(tr["calls"], ("AG", "RS", "AR")) if c)
    rows.append("<tr class=total><th>total</th><td></td>%s<td><b>%s</b></td><td>%s</td></tr>"
                % (tot, fmt_bytes(sum(tr["total"])), calls))
    if tr["check"] is True:
        note = "These add up to the writer's own per-rank totals (otherData.fsdp.bytes_sent). ✓"
    elif tr["check"] is False:
        note = "<b>Warning:</b> these do not add up to the writer's totals (otherData.fsdp.bytes_sent)."
    else:
        note = ""
    return ('<table class="num"><caption>%s: %s, bytes sent per rank per step</caption><thead><tr><th>unit</th>'
            '<th>elements</th><th>all_gather</th><th>reduce_scatter</th><th>all_reduce</th><th>total</th><th>calls/step</th>'
            '</tr></thead><tbody>%s</tbody></table><p class="note">%s</p>' % (t.label, E(t.strategy), "".join(rows), note))


def compare_section(a, b, ta, tb, fa, fb):
    N = a.world
    sharded = lambda t: sum(max(t.peak[c]) for c in ("parameters", "gradients", "optimizer") if c in t.peak)
    sa, sb = sharded(a), sharded(b)
    pa, pb = max(a.peak_total or [0]), max(b.peak_total or [0])
    ba, bb = sum(fa["total"]), sum(fb["total"])
    paren = lambda r: " (%s)" % r if r else ""
    ddp_vs_sharded = (a.strategy == "no_shard") != (b.strategy == "no_shard")
    lines = []
    if sa > 0 and sb > 0:
        lines.append("<b>Memory.</b> Per rank, B (%s) holds <b>%s</b> the parameters, gradients and optimizer "
                     "state of A (%s)%s; its peak is %s MiB against %s MiB%s."
                     % (E(b.strategy), ratio(sa, sb) or "about as much as", E(a.strategy),
                        "; sharding over N = %d ranks would give 1/N = %.2f" % (N, 1.0 / N)
                        if ddp_vs_sharded and N > 1 else "",
                        fmt_mib(pb), fmt_mib(pa), paren(ratio(pa, pb))))
    if ba > 0 or bb > 0:
        lines.append("<b>Traffic.</b> Each rank of B sends %s per step against %s for A%s%s."
                     % (fmt_bytes(bb), fmt_bytes(ba), paren(ratio(ba, bb)),
                        ": sharding trades memory for communication" if ddp_vs_sharded else ""))
    if ta and tb:
        lines.append("<b>Time.</b> A step takes %s in B against %s in A%s, of which collectives %s against %s%s."
                     % (fmt_ms(tb["wall"]), fmt_ms(ta["wall"]), paren(ratio(ta["wall"], tb["wall"])),
                        fmt_ms(tb["comm"]), fmt_ms(ta["comm"]),
                        " (clock: %s)" % E(a.clock) if a.clock == b.clock else
                        "; <b>careful</b>: A is on the %s clock, B on the %s clock" % (E(a.clock), E(b.clock))))
    warn = []
    if a.model != b.model:
        warn.append("the two traces are of different models (%s, %s): the comparison is of different things"
                    % (E(a.model), E(b.model)))
    if a.steps != b.steps:
        warn.append("different numbers of steps (%d, %d); figures are per step" % (a.steps, b.steps))
    rows = []
    for c in a.cats:
        va, vb = max(a.peak.get(c, [0])), max(b.peak.get(c, [0]))
        rows.append('<tr><th><span class="sw" style="--c:var(--cat%d)"></span>%s</th><td>%s</td><td>%s</td><td>%s</td></tr>'
                    % (a.cats.index(c) % 7, E(c), fmt_mib(va), fmt_mib(vb), ratio(va, vb)))
    rows.append("<tr class=total><th>total (peak of the sum)</th><td>%s</td><td>%s</td><td>%s</td></tr>"
                % (fmt_mib(pa), fmt_mib(pb), ratio(pa, pb)))
    rows.append('<tr class=sub><th colspan=4>traffic per rank per step</th></tr>')
    for k, kind in enumerate(KINDS):
        rows.append('<tr><th><span class="sw" style="--c:var(--k%d)"></span>%s (%g / %g calls)</th><td>%s</td><td>%s</td><td>%s</td></tr>'
                    % (k, kind, fa["calls"][k], fb["calls"][k], fmt_bytes(fa["total"][k]), fmt_bytes(fb["total"][k]),
                       ratio(fa["total"][k], fb["total"][k])))
    rows.append("<tr class=total><th>total sent</th><td>%s</td><td>%s</td><td>%s</td></tr>" % (fmt_bytes(ba), fmt_bytes(bb), ratio(ba, bb)))
    if ta and tb:
        rows.append('<tr class=sub><th colspan=4>time per step (from the events, mean over ranks)</th></tr>')
        for key, label in (("wall", "step"), ("compute", "compute"), ("comm", "collectives")):
            rows.append("<tr><th>%s</th><td>%s</td><td>%s</td><td>%s</td></tr>"
                        % (label, fmt_ms(ta[key]), fmt_ms(tb[key]), ratio(ta[key], tb[key])))
    table = ('<table class="num cmp"><thead><tr><th>max over ranks</th><th>A: %s</th><th>B: %s</th><th>B / A</th></tr></thead>'
             '<tbody>%s</tbody></table>' % (E(a.strategy), E(b.strategy), "".join(rows)))
    return ('<section id="compare"><h2>At a glance: A (%s) against B (%s), %d ranks</h2>'
            '<div class="lead">%s</div>%s'
            '<div class="grid2"><div><h4>Peak memory per rank, by category (MiB, max over ranks)</h4><div class="chart" id="cmp-mem"></div></div>'
            '<div><h4>Bytes sent per rank per step, by collective</h4><div class="chart" id="cmp-traffic"></div>'
            '<h4>Time per step (mean over ranks)</h4><div class="chart" id="cmp-time"></div></div></div>'
            '<details><summary>the numbers</summary>%s</details></section>'
            % (E(a.strategy), E(b.strategy), N, "".join("<p>%s</p>" % l for l in lines),
               "".join('<p class="warn">Note: %s.</p>' % w for w in warn), table))


def build_page(traces):
    two = len(traces) == 2
    data = {"traces": [], "cats": traces[0].cats, "kinds": KINDS, "phases": PHASES}
    timings, traffics, notes = [], [], []
    tl_end = run_end = ymax = 0.0
    for t in traces:
        steps, w0, w1 = t.window()
        tl = t.timeline(steps, w0, w1)
        run_mem = t.memory(t.t0, t.t1, MEM_RUN_POINTS)
        win_mem = t.memory(w0, w1, MEM_WINDOW_POINTS)
        timing, traffic = t.timing(), t.traffic()
        timings.append(timing)
        traffics.append(traffic)
        tl_end = max(tl_end, (w1 - w0) / 1000.0)
        run_end = max(run_end, (t.t1 - t.t0) / 1000.0)
        ymax = max([ymax] + list(t.peak_total) + [sum(v) for r in run_mem for v in r["v"]])
        if steps and len(steps) < t.steps_seen:
            notes.append((t.label, "the timeline and the memory charts' first view show steps %d to %d of %d; "
                          "the whole-run memory view and the traffic tables cover every step."
                          % (steps[0], steps[-1], t.steps_seen)))
        n_mem = max((len(m) for m in t.mem), default=0)
        if n_mem > MEM_RUN_POINTS:
            notes.append((t.label, "the whole-run memory view keeps about %d of up to %d samples per rank (each time "
                          "slice's lowest and highest total, so peaks are kept)." % (MEM_RUN_POINTS, n_mem)))
        if t.skipped:
            notes.append((t.label, "%d malformed events were skipped." % t.skipped))
        if t.version not in (None, 1):
            notes.append((t.label, "trace format version %s; this report knows version 1." % E(str(t.version))))
        data["traces"].append({
            "label": t.label, "file": t.name, "strategy": t.strategy, "model": t.model, "world": t.world,
            "steps": t.steps, "clock": t.clock, "net": t.net, "vram": t.vram,
            "units": {str(k): v["name"] for k, v in t.units.items()},
            "peak": [t.peak.get(c, [0] * t.world) for c in t.cats], "peak_total": t.peak_total,
            "tl": tl, "mem": {"window": win_mem, "run": run_mem, "window_end": round((w1 - w0) / 1000.0, 4),
                              "run_end": round((t.t1 - t.t0) / 1000.0, 4)},
            "traffic": traffic, "timing": timing,
        })
    vram = max(t.vram for t in traces)
    data["mem_ymax"] = ymax
    data["vram_on_scale"] = bool(vram and vram <= 2.5 * ymax)
    data["xmax"] = {"window": tl_end, "run": run_end}
    title = " vs ".join("%s (%s)" % (t.strategy, t.model) for t in traces)
    world = traces[0].world
    parts = []
    parts.append('<header><h1>fsdp.c trace report</h1><p class="sub">%s on %d rank%s, from %s</p></header>'
                 % (E(title), world, "s" if world != 1 else "", " and ".join("<code>%s</code>" % E(t.name) for t in traces)))
    parts.append('<noscript><p class="warn">The charts are drawn by JavaScript, which is off; the tables still show the numbers.</p></noscript>')
    parts.append('<section id="runs"><div class="lead"><p>What a trace is: <code>fsdp --trace FILE</code> records, on every rank '
                 '(one MPI process playing one GPU), each unit\'s forward and backward computation, every collective, '
                 'and the memory ledger after every allocation and free. A <i>unit</i> is a group of modules whose '
                 'parameters are sharded, gathered and freed together (PyTorch: one FSDP instance).</p></div>'
                 '<div class="cards">%s</div></section>' % "".join(run_card(t, tm) for t, tm in zip(traces, timings)))
    if two:
        parts.append(compare_section(traces[0], traces[1], timings[0], timings[1], traffics[0], traffics[1]))
    # memory
    xtoggle = ('<div class="toggle" role="group"><span class="muted">time axis </span><button class="x-own on">each its own</button>'
               '<button class="x-shared">shared by A and B</button></div>') if two else ""
    mem_grid = "".join('<div class="col"><h4>%s: %s</h4><div class="chart memcol" id="mem-%d"></div></div>'
                       % (t.label, E(t.strategy), i) for i, t in enumerate(traces))
    parts.append('<section id="memory"><h2>1. Memory per rank over time</h2><div class="lead"><p>Each chart is one rank\'s '
                 'memory ledger: every byte <code>fsdp.c</code> allocated, stacked by category. <i>parameters</i>, '
                 '<i>gradients</i> and <i>optimizer</i> are what a rank keeps between steps; under full_shard they are '
                 '1/N of the model. <i>full params</i> and <i>full grads</i> are a unit\'s gathered (unsharded) state: '
                 'they rise when a unit is all-gathered and fall when it is freed, one unit at a time. '
                 'All charts share one memory scale%s, so heights compare directly. Hover for the values at a moment.</p></div>'
                 '<div class="bar"><div class="legend" id="mem-legend"></div><div class="toggle" role="group"><span class="muted">show </span>'
                 '<button id="view-window" class="on">timeline window</button><button id="view-run">whole run</button>'
                 '</div>%s</div><div class="cols n%d">%s</div>'
                 '<details><summary>peak memory per rank (the ledger\'s own peaks)</summary><div class="cols n%d">%s</div></details>'
                 '</section>' % (", with the --vram budget as a dashed red line" if vram else "", xtoggle, len(traces), mem_grid,
                                 len(traces), "".join('<div class="scroll">%s</div>' % peak_table(t) for t in traces)))
    # timeline
    tls = "".join('<h4>%s: %s</h4><div class="chart" id="tl-%d"></div><p class="note" id="tl-note-%d"></p>'
                  % (t.label, E(t.strategy), i, i) for i, t in enumerate(traces))
    parts.append('<section id="timeline"><h2>2. Unit timeline per rank</h2><div class="lead"><p>Time runs left to right'
                 '%s. Each rank has a <i>compute</i> lane (the root unit\'s span encloses the other units\' spans, '
                 'drawn below it; F = forward, B = backward, the number is the unit) and a <i>communication</i> lane '
                 'with its collectives. Small red ticks mark the moment a unit\'s full state is freed. '
                 'Collectives are blocking here, so compute waits for them. Hover over any box for details.</p></div>'
                 '<div class="bar"><div class="legend" id="tl-legend"></div>%s</div>%s</section>'
                 % ("; the toggle puts both traces on one time axis" if two else "", xtoggle, tls))
    # traffic
    parts.append('<section id="traffic"><h2>3. Traffic per unit</h2><div class="lead"><p>Bytes each rank sends per step '
                 '(it receives as many), by unit and collective: the ring volume, (N-1)/N of a buffer for an '
                 'all-gather or a reduce-scatter and twice that for an all-reduce. DDP all-reduces each unit\'s '
                 'gradient once; full_shard all-gathers each unit for forward and again for backward (the root unit only '
                 'once: it stays gathered) and reduce-scatters its gradient; shard_grad_op gathers each unit once '
                 'and keeps it from forward to backward.</p></div>'
                 '<div class="legend" id="traffic-legend"></div><div class="chart" id="traffic-chart"></div>'
                 '%s</section>'
                 % "".join('<div class="scroll">%s</div>' % traffic_table(t, f) for t, f in zip(traces, traffics)))
    merged = {}
    for label, msg in notes:
        merged.setdefault(msg, []).append(label)
    notes = ["%s: %s" % (" and ".join(labels), msg) for msg, labels in merged.items()]
    notes.append("Generated by <code>sim/report.py</code> from %s. Times are microseconds in the trace, shown in ms. "
                 "To zoom into every event, open the trace file itself in Perfetto (ui.perfetto.dev) or chrome://tracing."
                 % " and ".join("<code>%s</code>" % E(t.name) for t in traces))
    parts.append('<footer>%s</footer>' % "".join("<p>%s</p>" % n for n in notes))
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False)
    # safe inside <script>, and no "//" left that could read as a link
    blob = blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("/", "\\/")
    return PAGE.format(title=E("fsdp.c report: " + title), css=CSS, body="\n".join(parts), data=blob, js=JS)


# ---------------------------------------------------------------------------
# Static parts of the page
# ---------------------------------------------------------------------------

CSS = r"""
:root { --cat0:#4e79a7; --cat1:#f28e2b; --cat2:#e15759; --cat3:#76b7b2; --cat4:#59a14f; --cat5:#edc948; --cat6:#b07aa1;
  --k0:#17a2b8; --k1:#d62728; --k2:#8c564b; --fwd:#3b73b9; --bwd:#f08c2e; --opt:#2ca02c;
  --A:#64748b; --B:#0284c7; --ink:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header, section, footer, noscript { display: block; max-width: 1360px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 18px; }
h1 { font-size: 26px; margin: 0 0 2px; }
h2 { font-size: 19px; margin: 26px 0 6px; padding-top: 10px; border-top: 1px solid var(--line); }
h3 { font-size: 16px; margin: 0 0 2px; }
h4 { font-size: 13px; margin: 12px 0 4px; color: #374151; }
.sub { color: var(--muted); margin: 0 0 8px; }
.lead p { margin: 4px 0; max-width: 1100px; }
.muted { color: var(--muted); }
.note { color: var(--muted); font-size: 12.5px; margin: 4px 0 10px; }
.warn { color: #92400e; background: #fef3c7; padding: 4px 8px; border-radius: 4px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; background: #eef0f3; padding: 0 3px; border-radius: 3px; }
.cards { display: flex; gap: 16px; flex-wrap: wrap; margin-top: 10px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; flex: 1 1 420px; border-top: 4px solid var(--A); }
.card.trace-b { border-top-color: var(--B); }
.tag { display: inline-block; min-width: 22px; text-align: center; color: #fff; background: var(--A); border-radius: 4px; padding: 0 5px; }
.trace-b .tag { background: var(--B); }
.file { color: var(--muted); font-size: 12px; margin-bottom: 6px; word-break: break-all; }
table.kv { border-collapse: collapse; width: 100%; font-size: 13px; }
table.kv th { text-align: left; font-weight: 500; color: var(--muted); padding: 2px 10px 2px 0; white-space: nowrap; vertical-align: top; width: 120px; }
table.kv td { padding: 2px 0; }
table.num { border-collapse: collapse; font-size: 12.5px; background: #fff; margin: 8px 0; border: 1px solid var(--line); }
table.num caption { text-align: left; font-weight: 600; padding: 4px 0; }
table.num th, table.num td { padding: 3px 8px; border-bottom: 1px solid #f0f1f3; }
.scroll { overflow-x: auto; }
table.num td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.num th { text-align: left; font-weight: 500; white-space: nowrap; }
table.num thead th { background: #f3f4f6; font-weight: 600; text-align: right; }
table.num thead th:first-child { text-align: left; }
table.num tr.total th, table.num tr.total td { border-top: 1px solid #cbd5e1; }
table.num tr.sub th { background: #f9fafb; color: var(--muted); font-weight: 600; }
.sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; background: var(--c); margin-right: 6px; vertical-align: -1px; }
.grid2 { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 24px; }
.cols { display: grid; gap: 20px; }
.cols.n1 { grid-template-columns: 1fr; }
.cols.n2 { grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); }
.chart { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 6px; min-height: 40px; overflow: hidden; }
.chart svg { display: block; }
.chart svg text { font-size: 11px; fill: #374151; }
.chart svg text.lbl { fill: #fff; font-size: 9.5px; pointer-events: none; }
.chart svg text.title { font-size: 12px; font-weight: 600; fill: var(--ink); }
.chart svg text.small { font-size: 10px; fill: var(--muted); }
.chart svg text.halo { paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.chart svg .grid { stroke: #eef0f3; }
.chart svg .axis { stroke: #9ca3af; }
.bar { display: flex; justify-content: space-between; align-items: center; gap: 12px; flex-wrap: wrap; margin: 8px 0; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12.5px; margin: 6px 0; }
.legend span { white-space: nowrap; }
.toggle button { font: inherit; font-size: 12.5px; border: 1px solid #cbd5e1; background: #fff; padding: 3px 10px; cursor: pointer; }
.toggle { white-space: nowrap; }
.toggle button:first-of-type { border-radius: 5px 0 0 5px; }
.toggle button:last-of-type { border-radius: 0 5px 5px 0; border-left: 0; }
.toggle button.on { background: #1f2937; color: #fff; border-color: #1f2937; }
details { margin: 8px 0; }
summary { cursor: pointer; color: #374151; font-size: 13px; }
footer { color: var(--muted); font-size: 12.5px; margin: 30px auto 40px; border-top: 1px solid var(--line); padding-top: 8px; }
.tip { position: fixed; z-index: 10; pointer-events: none; background: rgba(17,24,39,.94); color: #fff; font-size: 12px; line-height: 1.4;
  padding: 6px 9px; border-radius: 5px; white-space: pre-line; max-width: 360px; box-shadow: 0 2px 8px rgba(0,0,0,.2); }
.err { color: #b91c1c; background: #fee2e2; padding: 6px 10px; border-radius: 4px; }
#render-error { max-width: 1320px; margin: 10px auto; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
{body}
<div id="tip" class="tip" hidden></div>
<script id="fsdp-data" type="application/json">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""

JS = r"""
(function () {
'use strict';
var errors = [], drawn = {}, D, state = {view: 'window', shared: false};
var CAT = ['var(--cat0)', 'var(--cat1)', 'var(--cat2)', 'var(--cat3)', 'var(--cat4)', 'var(--cat5)', 'var(--cat6)'];
var CATHEX = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1'];
var KIND = ['#17a2b8', '#d62728', '#8c564b'];
var KSHORT = ['AG', 'RS', 'AR'];
var PHASE = ['#3b73b9', '#f08c2e', '#2ca02c'];
var PSHORT = ['F', 'B', 'opt'];
var TRACE = ['#64748b', '#0284c7'];

function esc(s) {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
function f3(v) { return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2); }
function fmtBytes(b) {
  if (b < 1024) return Math.round(b) + ' B';
  if (b < 1048576) return f3(b / 1024) + ' KiB';
  if (b < 1073741824) return f3(b / 1048576) + ' MiB';
  return f3(b / 1073741824) + ' GiB';
}
function fmtMs(ms) {
  if (ms < 1) return (ms * 1000).toFixed(ms < 0.01 ? 2 : 1) + ' \u00b5s';
  return f3(ms) + ' ms';
}
function fmtInt(n) { return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ','); }
function n1(v) { return (Math.round(v * 10) / 10).toString(); }
function niceStep(range, n) {
  if (!(range > 0)) return 1;
  var raw = range / n, mag = Math.pow(10, Math.floor(Math.log10(raw))), norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}
function ticks(max, n) {
  var st = niceStep(max, n), out = [];
  for (var v = 0; v <= max * 1.0001; v += st) out.push(v);
  return out;
}
function byteUnit(max) {
  if (max >= 1073741824 * 0.9) return {div: 1073741824, name: 'GiB'};
  if (max >= 1048576 * 0.9) return {div: 1048576, name: 'MiB'};
  if (max >= 1024) return {div: 1024, name: 'KiB'};
  return {div: 1, name: 'B'};
}
function tickLabel(v) { var s = v.toPrecision(6); return String(parseFloat(s)); }
function widthOf(el, fallback) {
  var w = el.clientWidth;
  if (!(w > 0)) w = fallback;
  return Math.max(280, Math.floor(w - 14));
}
function svgOpen(w, h, label) {
  return '<svg width="' + w + '" height="' + h + '" viewBox="0 0 ' + w + ' ' + h + '" role="img" aria-label="' + esc(label) + '">';
}
function unitName(tr, u) {
  if (u < 0) return 'the loss';
  var n = tr.units[String(u)];
  return n ? n : 'unit ' + u;
}
function legend(id, items) {
  var el = document.getElementById(id);
  if (!el) return;
  el.innerHTML = items.map(function (it) {
    return '<span><span class="sw" style="--c:' + it[1] + '"></span>' + esc(it[0]) + '</span>';
  }).join('');
}

// ---- the tooltip: any element with data-tip ---------------------------------
var tip = document.getElementById('tip');
function showTip(text, ev) {
  tip.textContent = text;
  tip.hidden = false;
  var x = ev.clientX + 14, y = ev.clientY + 14, r = tip.getBoundingClientRect();
  if (x + r.width > window.innerWidth - 8) x = ev.clientX - r.width - 14;
  if (y + r.height > window.innerHeight - 8) y = ev.clientY - r.height - 14;
  tip.style.left = Math.max(4, x) + 'px';
  tip.style.top = Math.max(4, y) + 'px';
}
function hideTip() { tip.hidden = true; }
document.addEventListener('mousemove', function (ev) {
  var t = ev.target;
  if (t && t.closest) {
    var el = t.closest('[data-tip]');
    if (el) { showTip(el.getAttribute('data-tip'), ev); return; }
    if (t.closest('[data-mem]')) return;
  }
  hideTip();
});

// ---- charts -----------------------------------------------------------------

function render(id, fn) {
  var el = document.getElementById(id);
  if (!el) { errors.push(id + ': no such element'); return; }
  try {
    fn(el);
    if (!el.querySelector('svg')) throw new Error('nothing was drawn');
    drawn[id] = 1;
  } catch (e) {
    errors.push(id + ': ' + (e && e.message ? e.message : e));
    el.innerHTML = '<p class="err">This chart failed to draw: ' + esc(e && e.message ? e.message : e) + '</p>';
  }
}

// One rank's memory: a stacked step chart of the ledger by category.
function memChart(tr, rank, view, W, H) {
  var s = tr.mem[view][rank], cats = D.cats;
  var m = {l: 54, r: 30, t: 20, b: 22}, iw = W - m.l - m.r, ih = H - m.t - m.b;
  var xmax = xmaxOf(tr, view), ymax = D.mem_ymax * 1.08 || 1;
  var vram = tr.vram > 0 && D.vram_on_scale ? tr.vram : 0;
  if (vram) ymax = Math.max(ymax, vram * 1.06);
  var X = function (t) { return m.l + t / xmax * iw; };
  var Y = function (b) { return m.t + ih - b / ymax * ih; };
  var u = byteUnit(ymax), o = [];
  o.push(svgOpen(W, H, 'memory of rank ' + rank));
  ticks(ymax / u.div, 4).forEach(function (v) {
    var y = Y(v * u.div).toFixed(1);
    o.push('<line class="grid" x1="' + m.l + '" x2="' + (W - m.r) + '" y1="' + y + '" y2="' + y + '"/>');
    o.push('<text x="' + (m.l - 5) + '" y="' + y + '" dy="3.5" text-anchor="end">' + tickLabel(v) + '</text>');
  });
  ticks(xmax, Math.max(2, Math.floor(iw / 90))).forEach(function (v) {
    var x = X(v).toFixed(1);
    o.push('<line class="grid" x1="' + x + '" x2="' + x + '" y1="' + m.t + '" y2="' + (m.t + ih) + '"/>');
    o.push('<text x="' + x + '" y="' + (H - 7) + '" text-anchor="middle">' + tickLabel(v) + '</text>');
  });
  var n = s.t.length, tEnd = Math.max(tr.mem[view + '_end'], n ? s.t[n - 1] : 0);
  if (n) {
    var bot = new Array(n).fill(0);
    for (var k = 0; k < cats.length; k++) {
      var top = new Array(n), any = false;
      for (var i = 0; i < n; i++) { top[i] = bot[i] + (s.v[i][k] || 0); if (s.v[i][k]) any = true; }
      if (any) {
        var p = 'M' + X(s.t[0]).toFixed(1) + ',' + Y(top[0]).toFixed(1);
        for (i = 1; i < n; i++) p += 'H' + X(s.t[i]).toFixed(1) + 'V' + Y(top[i]).toFixed(1);
        p += 'H' + X(tEnd).toFixed(1) + 'V' + Y(bot[n - 1]).toFixed(1);
        for (i = n - 1; i >= 1; i--) p += 'H' + X(s.t[i]).toFixed(1) + 'V' + Y(bot[i - 1]).toFixed(1);
        p += 'H' + X(s.t[0]).toFixed(1) + 'Z';
        o.push('<path d="' + p + '" fill="' + CATHEX[k % 7] + '" fill-opacity="0.9" stroke="none"/>');
      }
      bot = top;
    }
    var q = 'M' + X(s.t[0]).toFixed(1) + ',' + Y(bot[0]).toFixed(1);
    for (i = 1; i < n; i++) q += 'H' + X(s.t[i]).toFixed(1) + 'V' + Y(bot[i]).toFixed(1);
    q += 'H' + X(tEnd).toFixed(1);
    o.push('<path d="' + q + '" fill="none" stroke="#111827" stroke-width="0.8" stroke-opacity="0.6"/>');
  }
  if (vram) {
    var yv = Y(vram).toFixed(1);
    o.push('<line x1="' + m.l + '" x2="' + (W - m.r) + '" y1="' + yv + '" y2="' + yv + '" stroke="#dc2626" stroke-width="1.5" stroke-dasharray="6 4"/>');
    o.push('<text class="small" x="' + (W - m.r) + '" y="13" text-anchor="end" style="fill:#dc2626">- - - --vram budget ' + fmtBytes(vram) + '</text>');
  }
  var pk = tr.peak_total[rank] || 0;
  var note = tr.vram > 0 && !D.vram_on_scale ? ' \u00b7 budget ' + fmtBytes(tr.vram) + ' (off the scale)' : '';
  o.push('<text class="title" x="' + m.l + '" y="13">rank ' + rank + '</text>');
  o.push('<text class="small" x="' + (m.l + 48) + '" y="13">peak ' + fmtBytes(pk) + note + '</text>');
  o.push('<text class="small" x="' + (m.l - 5) + '" y="13" text-anchor="end">' + u.name + '</text>');
  o.push('<text class="small" x="' + (W - 2) + '" y="' + (H - 7) + '" text-anchor="end">ms</text>');
  o.push('<line class="axis" x1="' + m.l + '" x2="' + (W - m.r) + '" y1="' + (m.t + ih) + '" y2="' + (m.t + ih) + '"/>');
  o.push('<line class="cursor" x1="0" x2="0" y1="' + m.t + '" y2="' + (m.t + ih) + '" stroke="#111827" stroke-width="1" visibility="hidden"/>');
  o.push('<rect class="hover" data-mem="1" x="' + m.l + '" y="' + m.t + '" width="' + iw + '" height="' + ih + '" fill="transparent"/>');
  o.push('</svg>');
  return {html: o.join(''), hover: function (svg) {
    var cur = svg.querySelector('.cursor'), hov = svg.querySelector('.hover');
    hov.addEventListener('mousemove', function (ev) {
      var box = svg.getBoundingClientRect(), x = ev.clientX - box.left, t = (x - m.l) / iw * xmax;
      var lo = 0, hi = n - 1;
      if (!n || t < s.t[0] || t > tEnd) { cur.setAttribute('visibility', 'hidden'); hideTip(); return; }
      while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (s.t[mid] <= t) lo = mid; else hi = mid - 1; }
      var v = s.v[lo], lines = [tr.label + ' \u00b7 rank ' + rank + ' \u00b7 t = ' + fmtMs(t)], tot = 0;
      for (var k = cats.length - 1; k >= 0; k--) if (v[k]) lines.push(cats[k] + ': ' + fmtBytes(v[k]));
      for (k = 0; k < v.length; k++) tot += v[k];
      lines.push('total: ' + fmtBytes(tot));
      cur.setAttribute('x1', x); cur.setAttribute('x2', x); cur.setAttribute('visibility', 'visible');
      showTip(lines.join('\n'), ev);
    });
    hov.addEventListener('mouseleave', function () { cur.setAttribute('visibility', 'hidden'); hideTip(); });
  }};
}

// The time axis: each trace its own, or one shared by both (the toggle).
function xmaxOf(tr, view) {
  return (state.shared ? D.xmax[view] : tr.mem[view + '_end']) || 1;
}

function drawMemory(view) {
  D.traces.forEach(function (tr, ti) {
    render('mem-' + ti, function (el) {
      var W = widthOf(el, D.traces.length === 2 ? 650 : 1320), H = D.traces.length === 2 || tr.world > 2 ? 150 : 190;
      var charts = [];
      for (var r = 0; r < tr.world; r++) charts.push(memChart(tr, r, view, W, H));
      el.innerHTML = charts.map(function (c) { return c.html; }).join('');
      var svgs = el.querySelectorAll('svg');
      charts.forEach(function (c, i) { c.hover(svgs[i]); });
    });
  });
}

// The unit timeline of one trace: per rank a compute lane (nested spans
// drawn one row deeper) and a communication lane.
function drawTimeline(el, tr) {
  var tl = tr.tl, N = tr.world, W = widthOf(el, 1320);
  var rowH = 14, freeH = 7, commH = 14, rankGap = 14, rows = Math.max(1, tl.depth);
  var rankH = rows * rowH + freeH + commH;
  var m = {l: 118, r: 12, t: 34, b: 26}, iw = W - m.l - m.r;
  var H = m.t + N * (rankH + rankGap) - rankGap + m.b;
  var xmax = xmaxOf(tr, 'window');
  var X = function (t) { return m.l + t / xmax * iw; };
  var o = [svgOpen(W, H, 'timeline of ' + tr.strategy)];
  tl.steps.forEach(function (st, i) {
    var x0 = X(st[1]), x1 = X(st[2]);
    o.push('<rect x="' + x0.toFixed(1) + '" y="' + (m.t - 16) + '" width="' + Math.max(1, x1 - x0).toFixed(1) + '" height="' + (H - m.t - m.b + 20) + '" fill="' + (i % 2 ? '#f8fafc' : '#f1f5f9') + '"/>');
    o.push('<text class="small" x="' + (x0 + 4).toFixed(1) + '" y="' + (m.t - 5) + '">step ' + st[0] + '</text>');
  });
  ticks(xmax, Math.max(2, Math.floor(iw / 100))).forEach(function (v) {
    var x = X(v).toFixed(1);
    o.push('<line class="grid" x1="' + x + '" x2="' + x + '" y1="' + (m.t - 2) + '" y2="' + (H - m.b + 2) + '"/>');
    o.push('<text x="' + x + '" y="' + (H - 8) + '" text-anchor="middle">' + tickLabel(v) + '</text>');
  });
  o.push('<text class="small" x="' + (W - m.r) + '" y="12" text-anchor="end">time since the first step shown, ms</text>');
  for (var r = 0; r < N; r++) {
    var top = m.t + r * (rankH + rankGap), R = tl.ranks[r], commY = top + rows * rowH + freeH;
    o.push('<text class="title" x="6" y="' + (top + 11) + '">rank ' + r + '</text>');
    o.push('<text class="small" x="' + (m.l - 6) + '" y="' + (top + 11) + '" text-anchor="end">compute</text>');
    o.push('<text class="small" x="' + (m.l - 6) + '" y="' + (commY + 11) + '" text-anchor="end">comm</text>');
    o.push('<line class="axis" x1="' + m.l + '" x2="' + (W - m.r) + '" y1="' + (commY + commH + 0.5) + '" y2="' + (commY + commH + 0.5) + '" stroke-opacity="0.4"/>');
    R.c.forEach(function (e) {
      var x = X(e[0]), w = Math.max(1, X(e[0] + e[1]) - x), d = Math.min(e[5], rows - 1), y = top + d * rowH;
      var what = e[2] === 2 ? 'optimizer step (AdamW on this rank\'s shards)' : D.phases[e[2]] + ' \u00b7 ' + unitName(tr, e[3]);
      var t = what + '\nrank ' + r + ' \u00b7 step ' + e[4] + '\nstart ' + fmtMs(e[0]) + ' \u00b7 duration ' + fmtMs(e[1]);
      o.push('<rect x="' + x.toFixed(2) + '" y="' + (y + 1) + '" width="' + w.toFixed(2) + '" height="' + (rowH - 2) + '" fill="' + PHASE[e[2]] + '" fill-opacity="' + (d === 0 && e[2] !== 2 ? 0.55 : 0.95) + '" stroke="#fff" stroke-width="0.5" data-tip="' + esc(t) + '"/>');
      var lab = e[2] === 2 ? 'opt' : PSHORT[e[2]] + e[3];
      if (w > lab.length * 6 + 4) o.push('<text class="lbl" x="' + (x + w / 2).toFixed(1) + '" y="' + (y + 10.5) + '" text-anchor="middle">' + lab + '</text>');
    });
    R.f.forEach(function (f) {
      var x = X(f[0]).toFixed(1), y = top + rows * rowH + 1;
      o.push('<path d="M' + x + ',' + (y + freeH - 1) + 'l-3,-' + (freeH - 2) + 'h6z" fill="#b91c1c" data-tip="' + esc('free full state \u00b7 ' + unitName(tr, f[1]) + '\nrank ' + r + ' \u00b7 t = ' + fmtMs(f[0])) + '"/>');
    });
    R.m.forEach(function (e) {
      var x = X(e[0]), w = Math.max(1, X(e[0] + e[1]) - x);
      var t = D.kinds[e[2]] + ' \u00b7 ' + unitName(tr, e[3]) + '\nrank ' + r + ' \u00b7 step ' + e[7] +
        '\n' + fmtInt(e[4]) + ' elements (' + fmtBytes(e[4] * 4) + ' full buffer)' +
        '\nthis rank sent ' + fmtBytes(e[5]) + '\nstart ' + fmtMs(e[0]) + ' \u00b7 duration ' + fmtMs(e[1]) +
        (tr.net !== 'none' ? '\non ' + tr.net + ' it would take ' + fmtMs(e[6] / 1000) : '');
      o.push('<rect x="' + x.toFixed(2) + '" y="' + (commY + 1) + '" width="' + w.toFixed(2) + '" height="' + (commH - 2) + '" fill="' + KIND[e[2]] + '" stroke="#fff" stroke-width="0.5" data-tip="' + esc(t) + '"/>');
      var lab = KSHORT[e[2]] + (e[3] >= 0 ? e[3] : '');
      if (w > lab.length * 6 + 4) o.push('<text class="lbl" x="' + (x + w / 2).toFixed(1) + '" y="' + (commY + 10.5) + '" text-anchor="middle">' + lab + '</text>');
    });
  }
  o.push('</svg>');
  el.innerHTML = o.join('');
  var tm = tr.timing, note = document.getElementById('tl-note-' + D.traces.indexOf(tr));
  var seen = tr.tl.steps.length, shown = seen ? 'Showing step' + (seen > 1 ? 's ' + tl.steps[0][0] + ' to ' + tl.steps[seen - 1][0] : ' ' + tl.steps[0][0]) + ' of ' + tr.steps + '. ' : '';
  if (note && tm) {
    note.textContent = shown + 'Per step, mean over ranks and all ' + tr.steps + ' steps: ' + fmtMs(tm.wall) + ' in all, of which compute ' +
      fmtMs(tm.compute) + ', collectives ' + fmtMs(tm.comm) + ', other (waiting, bookkeeping) ' + fmtMs(tm.other) + '.' +
      (tr.net !== 'none' && tr.clock === 'real' ? ' On ' + tr.net + ' the collectives would take ' + fmtMs(tm.sim_comm) + ' per step.' : '') +
      (tr.clock === 'sim' ? ' (Simulated clock: collectives last what the ' + tr.net + ' model says.)' : '');
  }
}

// Horizontal bars: rows of [label, [value per series], [colour per series], extra text].
function hbars(el, rows, names, fmt, opts) {
  opts = opts || {};
  var W = widthOf(el, 600), bh = opts.bh || 13, gap = opts.gap || 9, ns = names.length;
  var lw = opts.lw || 150, m = {l: lw, r: opts.r || 120, t: 6, b: 24}, iw = W - m.l - m.r;
  var rowH = ns * (bh + 2) + gap, H = m.t + rows.length * rowH + m.b;
  var max = 0;
  rows.forEach(function (row) { row.values.forEach(function (v) { var s = Array.isArray(v) ? v.reduce(function (a, b) { return a + b; }, 0) : v; max = Math.max(max, s); }); });
  if (!(max > 0)) max = 1;
  var X = function (v) { return m.l + v / max * iw; };
  var o = [svgOpen(W, H, opts.label || 'bar chart')];
  var u = opts.unit ? opts.unit(max) : null;
  ticks(u ? max / u.div : max, Math.max(2, Math.floor(iw / 90))).forEach(function (v) {
    var x = X(u ? v * u.div : v).toFixed(1);
    o.push('<line class="grid" x1="' + x + '" x2="' + x + '" y1="' + m.t + '" y2="' + (H - m.b) + '"/>');
    o.push('<text x="' + x + '" y="' + (H - 8) + '" text-anchor="middle">' + tickLabel(v) + '</text>');
  });
  if (u) o.push('<text class="small" x="' + (W - m.r) + '" y="' + (H - 8) + '" dx="8">' + u.name + '</text>');
  rows.forEach(function (row, i) {
    var y0 = m.t + i * rowH;
    o.push('<text x="' + (m.l - 8) + '" y="' + (y0 + ns * (bh + 2) / 2 + 3.5) + '" text-anchor="end"' + (row.bold ? ' style="font-weight:600"' : '') + '>' + esc(row.label) + '</text>');
    row.values.forEach(function (v, si) {
      var y = y0 + si * (bh + 2), x = m.l, parts = Array.isArray(v) ? v : [v], total = 0;
      parts.forEach(function (p, pi) {
        var w = p / max * iw;
        if (w > 0) {
          var col = row.colors ? row.colors[si][pi] : TRACE[si];
          o.push('<rect x="' + x.toFixed(2) + '" y="' + y + '" width="' + Math.max(0.8, w).toFixed(2) + '" height="' + bh + '" fill="' + col + '" data-tip="' + esc((row.tips ? row.tips[si][pi] : names[si] + ' \u00b7 ' + row.label) + ': ' + fmt(p)) + '"/>');
        }
        x += w; total += p;
      });
      var txt = (ns > 1 ? names[si].split(':')[0] + ' ' : '') + fmt(total) + (row.extra && row.extra[si] ? row.extra[si] : '');
      o.push('<text class="small" x="' + (x + 5).toFixed(1) + '" y="' + (y + bh - 2.5) + '">' + esc(txt) + '</text>');
    });
  });
  o.push('</svg>');
  el.innerHTML = o.join('');
}

function ratioText(a, b) { return a > 0.01 * b && b > 0.01 * a ? '  (\u00d7' + (b / a).toFixed(2) + ')' : ''; }

function drawCompare() {
  var A = D.traces[0], B = D.traces[1], names = ['A: ' + A.strategy, 'B: ' + B.strategy];
  render('cmp-mem', function (el) {
    var rows = D.cats.map(function (c, k) {
      var a = Math.max.apply(null, A.peak[k]), b = Math.max.apply(null, B.peak[k]);
      return {label: c, values: [a, b], colors: [[CATHEX[k]], [CATHEX[k]]], extra: ['', ratioText(a, b)]};
    });
    var pa = Math.max.apply(null, A.peak_total), pb = Math.max.apply(null, B.peak_total);
    rows.push({label: 'total (peak)', bold: true, values: [pa, pb], colors: [['#374151'], ['#374151']], extra: ['', ratioText(pa, pb)]});
    hbars(el, rows, names, fmtBytes, {label: 'peak memory per category', unit: byteUnit, r: 170, lw: 110});
    shadeSecond(el);
  });
  render('cmp-traffic', function (el) {
    var rows = D.kinds.map(function (k, i) {
      var a = A.traffic.total[i], b = B.traffic.total[i];
      return {label: k, values: [a, b], colors: [[KIND[i]], [KIND[i]]], extra: ['', ratioText(a, b)]};
    });
    var ta = A.traffic.total.reduce(function (x, y) { return x + y; }, 0), tb = B.traffic.total.reduce(function (x, y) { return x + y; }, 0);
    rows.push({label: 'total', bold: true, values: [ta, tb], colors: [['#374151'], ['#374151']], extra: ['', ratioText(ta, tb)]});
    hbars(el, rows, names, fmtBytes, {label: 'traffic per kind', unit: byteUnit, r: 170, lw: 110});
    shadeSecond(el);
  });
  render('cmp-time', function (el) {
    var parts = function (tm) { return tm ? [tm.compute, tm.comm, tm.other] : [0, 0, 0]; };
    var cols = ['#3b73b9', '#d62728', '#cbd5e1'], nm = ['compute', 'collectives', 'other'];
    var mk = function (tr) { return nm.map(function (n) { return tr.label + ' \u00b7 ' + n; }); };
    var rows = [
      {label: names[0], values: [parts(A.timing)], colors: [cols], tips: [mk(A)]},
      {label: names[1], values: [parts(B.timing)], colors: [cols], tips: [mk(B)], extra: [A.timing && B.timing ? ratioText(A.timing.wall, B.timing.wall) : '']}
    ];
    hbars(el, rows, ['time'], fmtMs, {label: 'time per step', r: 150, lw: 110, bh: 16, gap: 8});
    el.insertAdjacentHTML('beforeend', '<div class="legend">' + nm.map(function (n, i) {
      return '<span><span class="sw" style="--c:' + cols[i] + '"></span>' + n + '</span>'; }).join('') + '<span class="muted">time, ms</span></div>');
  });
}
// In the comparison charts the second bar of each pair (trace B) is hatched-lighter.
function shadeSecond(el) {
  var svg = el.querySelector('svg'), rects = svg.querySelectorAll('rect');
  for (var i = 0; i < rects.length; i++) {
    var tipText = rects[i].getAttribute('data-tip') || '';
    if (tipText.indexOf('B: ') === 0) rects[i].setAttribute('fill-opacity', '0.55');
  }
}

function drawTraffic(el) {
  var order = [], seen = {};
  D.traces.forEach(function (tr) { tr.traffic.rows.forEach(function (r) { if (!seen[r.unit]) { seen[r.unit] = 1; order.push(r.unit); } }); });
  order.sort(function (a, b) { return (a < 0) - (b < 0) || a - b; });
  var names = D.traces.map(function (tr) { return tr.label + ': ' + tr.strategy; });
  var rows = order.map(function (u) {
    var vals = [], cols = [], tips = [];
    D.traces.forEach(function (tr) {
      var row = tr.traffic.rows.filter(function (r) { return r.unit === u; })[0];
      vals.push(row ? row.bytes : [0, 0, 0]);
      cols.push(KIND);
      tips.push(D.kinds.map(function (k) { return tr.label + ' \u00b7 ' + unitName(tr, u) + ' \u00b7 ' + k; }));
    });
    return {label: unitName(D.traces[0], u), values: vals, colors: cols, tips: tips};
  });
  if (!rows.length) { el.innerHTML = svgOpen(300, 24, 'no traffic') + '<text x="6" y="16">no collectives in this trace</text></svg>'; return; }
  hbars(el, rows, names, fmtBytes, {label: 'traffic per unit', unit: byteUnit, lw: 140, r: 160});
}

function main() {
  D = JSON.parse(document.getElementById('fsdp-data').textContent);
  legend('mem-legend', D.cats.map(function (c, k) { return [c, CAT[k % 7]]; }).concat(D.traces.some(function (t) { return t.vram > 0; }) ? [['--vram budget', '#dc2626']] : []));
  legend('tl-legend', [['forward', PHASE[0]], ['backward', PHASE[1]], ['optimizer step', PHASE[2]]].concat(D.kinds.map(function (k, i) { return [k, KIND[i]]; })).concat([['free full state', '#b91c1c']]));
  legend('traffic-legend', D.kinds.map(function (k, i) { return [k, KIND[i]]; }));
  if (D.traces.length === 2) drawCompare();
  render('traffic-chart', drawTraffic);
  var bw = document.getElementById('view-window'), br = document.getElementById('view-run');
  var so = document.querySelectorAll('.x-own'), ss = document.querySelectorAll('.x-shared');
  function redraw() {
    bw.className = state.view === 'window' ? 'on' : '';
    br.className = state.view === 'run' ? 'on' : '';
    for (var i = 0; i < so.length; i++) { so[i].className = 'x-own' + (state.shared ? '' : ' on'); ss[i].className = 'x-shared' + (state.shared ? ' on' : ''); }
    drawMemory(state.view);
    D.traces.forEach(function (tr, i) { render('tl-' + i, function (el) { drawTimeline(el, tr); }); });
    finish();
  }
  bw.addEventListener('click', function () { state.view = 'window'; redraw(); });
  br.addEventListener('click', function () { state.view = 'run'; redraw(); });
  for (var i = 0; i < so.length; i++) {
    so[i].addEventListener('click', function () { state.shared = false; redraw(); });
    ss[i].addEventListener('click', function () { state.shared = true; redraw(); });
  }
  var hash = location.hash.replace('#', '').split(',');
  state.view = hash.indexOf('run') >= 0 ? 'run' : 'window';
  state.shared = hash.indexOf('shared') >= 0;
  redraw();
  if (hash.indexOf('selftest') >= 0) selfTest();
}

// #selftest (tests/test_report.sh): hover over a timeline box and a memory
// chart with synthetic mouse events, and check the tooltip says the right thing.
function selfTest() {
  var seen = [];
  function hover(el, want) {
    if (!el) throw new Error('selftest: nothing to hover for "' + want + '"');
    var b = el.getBoundingClientRect();
    el.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: b.left + b.width / 2, clientY: b.top + b.height / 2}));
    if (tip.hidden || tip.textContent.indexOf(want) < 0) throw new Error('selftest: hovering showed "' + tip.textContent + '", not "' + want + '"');
    seen.push(want);
    hideTip();
  }
  try {
    hover(document.querySelector('#tl-0 rect[data-tip*="all_"]'), 'this rank sent');
    hover(document.querySelector('#tl-0 rect[data-tip*="step"]'), 'duration');
    hover(document.querySelector('#mem-0 rect.hover'), 'total: ');
    hover(document.querySelector('#traffic-chart rect[data-tip]'), 'unit');
    document.body.setAttribute('data-selftest', 'ok: ' + seen.length + ' tooltips');
  } catch (e) {
    errors.push(e.message);
  }
  finish();
}

function finish() {
  var old = document.getElementById('render-ok');
  if (old) old.parentNode.removeChild(old);
  var box = document.getElementById('render-error');
  if (errors.length) {
    if (!box) { box = document.createElement('div'); box.id = 'render-error'; box.className = 'err'; document.body.insertBefore(box, document.body.firstChild); }
    box.textContent = 'Some charts could not be drawn: ' + errors.join('; ');
  } else {
    var ok = document.createElement('div');
    ok.id = 'render-ok'; ok.hidden = true; ok.setAttribute('data-charts', String(Object.keys(drawn).length));
    document.body.appendChild(ok);
  }
}
window.addEventListener('error', function (ev) { errors.push('uncaught: ' + (ev.message || 'error')); finish(); });
try { main(); } catch (e) { errors.push('page: ' + (e && e.message ? e.message : e)); }
finish();
})();
"""


# ---------------------------------------------------------------------------

def check_output(path):
    """Like fsdp.c's outputs (files.c): the report replaces only a regular
    file, never a device, a named pipe, a directory or a symbolic link."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise InputError("%s: cannot write the report (no directory %s)" % (path, folder))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError("%s: cannot write the report (%s)" % (path, e.strerror or e))
    if stat.S_ISLNK(st.st_mode):
        raise InputError("%s: cannot write the report (it is a symbolic link: give its target's path)" % path)
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError("%s: cannot write the report (it is %s)" % (path, kind))


def write_atomically(path, text):
    """Writes beside path, flushes to disk, then renames into place, so a
    failure (disk full) leaves the old file, or none, never half a page.
    Returns None, or the OSError's message."""
    folder = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".tmp-")
    except OSError as e:
        return e.strerror or str(e)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return e.strerror or str(e)
    return None


def exclusive(spans):
    """Compute spans (sorted by start) with each one's own time: the root
    unit's forward encloses its children's, as FSDP's root module's forward
    encloses theirs, so its duration less theirs is what it did itself."""
    own = [list(e) for e in spans]
    open_ = []  # the spans that enclose the next one, innermost last
    for i, (ts, dur, _, _, _) in enumerate(spans):
        while open_ and spans[open_[-1]][0] + spans[open_[-1]][1] <= ts:
            open_.pop()
        if open_:
            own[open_[-1]][1] -= dur
        open_.append(i)
    return [tuple(e) for e in own]


def phases_text(t):
    """Rank 0's time a step by phase and by collective, as a table: the
    sums of its spans over the steps after the first (the first warms up
    caches, pools and, on a GPU, cuBLAS), and the unit that took the most
    of each phase. Under --trace a span waits for the GPU at both ends, so
    on a GPU these are its times, not the host's."""
    first = 1 if t.steps_seen > 1 else 0
    steps = max(1, t.steps_seen - first)
    total, worst = {}, {}
    spans = [(PHASES[ph], unit, dur, step) for _, dur, ph, unit, step in exclusive(t.compute[0])]
    spans += [(KINDS[k], unit, dur, step) for _, dur, k, unit, _, _, _, step in t.comm[0]]
    for name, unit, dur, step in spans:
        if step < first:
            continue
        total[name] = total.get(name, 0.0) + dur
        by_unit = worst.setdefault(name, {})
        by_unit[unit] = by_unit.get(unit, 0.0) + dur
    bounds = t.step_bounds()
    wall = sum(hi - lo for s, (lo, hi) in bounds.items() if s >= first) / steps
    which = ("the mean of %d step(s) after the first" % steps if first
             else "its one step, warm-up included")
    lines = ["%s: %s, %d rank(s); rank 0 (%s): %.3f ms a step"
             % (t.name, t.model, t.world, which, wall / 1000.0)]
    lines.append("  %-16s %12s %7s   %s" % ("phase", "ms a step", "share", "its largest unit"))
    spent = sum(total.values()) or 1.0
    for name in PHASES + KINDS:
        if name not in total:
            continue
        unit, us = max(worst[name].items(), key=lambda kv: kv[1])
        uname = t.units.get(unit, {}).get("name", "the whole model" if unit < 0 else "unit %d" % unit)
        lines.append("  %-16s %12.3f %6.1f%%   %s (%.3f ms)" % (name, total[name] / steps / 1000.0,
                                                            100.0 * total[name] / spent, uname,
                                                            us / steps / 1000.0))
    return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        print("%s: %s (usage: python3 sim/report.py TRACE.json [TRACE2.json] -o report.html)"
              % (PROG, message), file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    p = Parser(
        prog="sim/report.py",
        description="One self-contained HTML report from one or two fsdp --trace files "
                    "(two: shown side by side, e.g. no_shard (DDP) against full_shard (FSDP)).")
    p.add_argument("traces", nargs="+", metavar="TRACE.json", help="a file written by fsdp --trace (one or two)")
    p.add_argument("-o", "--output", default="report.html", metavar="report.html",
                   help="the HTML file to write (default: report.html)")
    p.add_argument("--phases", action="store_true",
                   help="no page: print rank 0's time a step by phase and collective, per trace "
                        "(make gpu-report's profile of a GPU step)")
    a = p.parse_args(argv)
    try:
        if len(a.traces) > 2:
            raise InputError("give one or two trace files, not %d" % len(a.traces))
        if a.phases:
            print("\n".join(phases_text(load_trace(path, label)) for path, label in zip(a.traces, "AB")))
            return 0
        for path in a.traces:
            if os.path.exists(a.output) and os.path.exists(path) and os.path.samefile(path, a.output):
                raise InputError("%s: is an input trace; refusing to overwrite it with the report (-o)" % a.output)
        check_output(a.output)
        traces = [load_trace(path, label) for path, label in zip(a.traces, "AB")]
        if len(traces) == 2 and traces[0].world != traces[1].world:
            raise InputError("cannot compare: %s has %d ranks, %s has %d"
                             % (traces[0].path, traces[0].world, traces[1].path, traces[1].world))
        page = build_page(traces)
        why = write_atomically(a.output, page)
        if why:
            print("%s: %s: writing failed (%s); no partial report was left under that name"
                  % (PROG, a.output, why), file=sys.stderr)
            return 1
    except InputError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    print("wrote %s (%d KiB): %s" % (a.output, (len(page.encode("utf-8")) + 1023) // 1024,
                                     " vs ".join("%s %s" % (t.label, t.strategy) for t in traces)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
