#!/usr/bin/env bash
# tests/test_report.sh -- sim/report.py, the HTML report of fsdp --trace files.
#
# Makes synthetic traces (tests/fixtures/make_trace.py: the format sim/record.c
# writes), turns them into reports, and checks that
#   - one trace and two traces (DDP vs FSDP) give a page, exit 0;
#   - the page loads nothing from the network (no http(s) anywhere, no
#     <script src>, <link>, <img>, @import or url());
#   - headless Chromium renders it: the page's own marker says every chart
#     drew without an exception, the console has no uncaught error, and the
#     screenshot is a picture, not a blank page; and these checks do catch a
#     page with a runtime error, a page with a syntax error and a blank page;
#   - bad input exits 2 with a one-line message naming the file: missing file,
#     not JSON, truncated JSON, not an fsdp trace, different world sizes,
#     unwritable output;
#   - a real trace from ./fsdp --trace, when this build has --trace; and its
#     --phases table (a step's time by phase) counts nested spans once and
#     fits in the step.
# Prints one line per check. Exit 0: all passed; 1: a check failed; 77:
# Chromium is missing (the checks that need no browser still ran and passed).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
REPORT="$PY sim/report.py"
MAKE_TRACE="$PY tests/fixtures/make_trace.py"
CHECK="$PY tests/report_screenshot.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

ok() { passed=$((passed + 1)); local m="$*"; echo "ok    ${m//$tmp\//}"; }
bad() { failed=$((failed + 1)); local m="$*"; echo "FAIL  ${m//$tmp\//}"; }
show() { sed 's/^/        /' "$1" | head -n "${2:-15}"; }

# -- fixtures ------------------------------------------------------------------
if $MAKE_TRACE --strategy full_shard -o "$tmp/fsdp.json" &&
   $MAKE_TRACE --strategy no_shard -o "$tmp/ddp.json" &&
   $MAKE_TRACE --strategy shard_grad_op --model large --steps 12 --clock sim --net pcie \
               --vram $((160 * 1024 * 1024)) --shuffle -o "$tmp/zero2.json" &&
   $MAKE_TRACE --strategy full_shard --world 2 -o "$tmp/fsdp2.json"; then
  ok "fixtures: synthetic traces (4 ranks full_shard, no_shard; 12-step shuffled shard_grad_op with --vram; 2 ranks)"
else
  bad "fixtures: tests/fixtures/make_trace.py failed"; exit 1
fi

# -- reports ---------------------------------------------------------------------
report_ok() { # report_ok NAME OUT TRACE...
  local name=$1 out=$2; shift 2
  if $REPORT "$@" -o "$out" >"$tmp/out.log" 2>"$tmp/err.log" && [ -s "$out" ] && [ ! -s "$tmp/err.log" ]; then
    ok "$name: $(cat "$tmp/out.log")"
  else
    bad "$name: sim/report.py failed"; show "$tmp/err.log"
  fi
}
report_ok "one trace" "$tmp/one.html" "$tmp/fsdp.json"
report_ok "two traces, DDP vs FSDP" "$tmp/two.html" "$tmp/ddp.json" "$tmp/fsdp.json"
report_ok "12 steps, events in random order, --vram, sim clock" "$tmp/zero2.html" "$tmp/zero2.json"
pages=("$tmp/one.html" "$tmp/two.html" "$tmp/zero2.html")

# what the comparison says: full_shard on 4 ranks holds 1/4 of DDP's
# parameters, gradients and optimizer state, and sends 1.44x the bytes
if grep -q 'holds <b>0.25×</b> the parameters, gradients and optimizer state of A (no_shard)' "$tmp/two.html" &&
   grep -q 'sends 4.93 MiB per step against 3.42 MiB for A (1.44×)' "$tmp/two.html"; then
  ok "two.html says: B (full_shard) holds 0.25x A's (no_shard) state per rank and sends 1.44x the bytes"
else
  bad "two.html lacks the 0.25x memory / 1.44x traffic comparison"
fi
if grep -q "show steps 0 to 2 of 12" "$tmp/zero2.html"; then
  ok "zero2.html: a 12-step run draws the first 3 steps on the timeline, and says so"
else
  bad "zero2.html does not say that it limits the timeline to the first steps"
fi

# real traces, once fsdp has --trace
if [ -x ./fsdp ] && ./fsdp --help 2>&1 | grep -q -- '--trace'; then
  . sim/mpi-env.sh
  if timeout 120 $MPIRUN -np 4 ./fsdp --model tiny --steps 3 --batch 12 --strategy ddp --trace "$tmp/real_ddp.json" >"$tmp/run.log" 2>&1 &&
     timeout 120 $MPIRUN -np 4 ./fsdp --model tiny --steps 3 --batch 12 --strategy full_shard --trace "$tmp/real_fsdp.json" >>"$tmp/run.log" 2>&1; then
    report_ok "real traces from ./fsdp --trace (tiny, 4 ranks)" "$tmp/real.html" "$tmp/real_ddp.json" "$tmp/real_fsdp.json"
    [ -s "$tmp/real.html" ] && pages+=("$tmp/real.html")
    # --phases: each phase's own time. The root unit's forward span encloses
    # its children's, so rank 0's forward a step must equal the union of its
    # forward spans (a plain sum counts the children twice), and forward,
    # backward and optimizer together fit in the step.
    if $REPORT --phases "$tmp/real_fsdp.json" >"$tmp/phases.log" 2>&1 &&
       $PY - "$tmp/real_fsdp.json" "$tmp/phases.log" >"$tmp/phases.check" 2>&1 <<'EOF'
import json, re, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
table = open(sys.argv[2]).read()
spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("ph") == "X" and e.get("pid") == 0 and e["name"].startswith("forward")
               and e.get("args", {}).get("step", 0) >= 1)
steps = max(e.get("args", {}).get("step", 0) for e in events if e.get("ph") == "X")  # after step 0
union, end = 0.0, float("-inf")
for a, b in spans:
    if b > end:
        union, end = union + b - max(a, end), b
want = union / steps / 1000.0
got = {m.group(1): float(m.group(2)) for m in re.finditer(r"^  (\w+) +([0-9.]+)", table, re.M)}
step = float(re.search(r"after the first\): ([0-9.]+) ms a step", table).group(1))
own = sum(got[p] for p in ("forward", "backward", "optimizer"))
print("forward %.3f ms a step (its spans' union %.3f); forward + backward + optimizer %.3f of a %.3f ms step"
      % (got["forward"], want, own, step))
sys.exit(0 if abs(got["forward"] - want) <= 0.002 + 1e-3 * want and own <= 1.01 * step else 1)
EOF
    then
      ok "--phases: $(cat "$tmp/phases.check")"
    else
      bad "--phases: a phase's own time is not its spans' union, or the phases overflow the step"
      show "$tmp/phases.log"; show "$tmp/phases.check"
    fi
  else
    bad "real traces: mpirun ./fsdp --trace failed"; show "$tmp/run.log"
  fi
else
  echo "note  ./fsdp has no --trace (or is not built): real traces not checked, fixtures only"
fi

# -- self-contained: nothing loaded from anywhere ---------------------------------
for page in "${pages[@]}"; do
  name=$(basename "$page")
  if grep -qiE 'https?:' "$page"; then
    bad "$name: mentions http(s): $(grep -oiE '.{30}https?:.{30}' "$page" | head -1)"
  elif grep -qiE '<script[^>]*\ssrc=|<link[^>]*href|<img|<iframe|@import|url\(' "$page"; then
    bad "$name: references an external resource: $(grep -oiE '<script[^>]*src=[^>]*>|<link[^>]*>|<img[^>]*>|@import[^;]*|url\([^)]*\)' "$page" | head -1)"
  else
    ok "$name: self-contained ($(($(wc -c <"$page") / 1024)) KiB; no http(s), no src/href/@import/url())"
  fi
done

# -- bad input: exit 2, one line on stderr naming the file ------------------------
expect_2() { # expect_2 NAME "EXPECTED TEXT" ARGS...
  local name=$1 want=$2; shift 2
  $REPORT "$@" >"$tmp/out.log" 2>"$tmp/err.log"
  local rc=$? lines; lines=$(wc -l <"$tmp/err.log")
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmp/err.log" && ! grep -q Traceback "$tmp/err.log"; then
    ok "bad input, $name: exit 2: $(cat "$tmp/err.log")"
  else
    bad "bad input, $name: exit $rc, $lines line(s) on stderr, wanted exit 2 and one line with \"$want\""; show "$tmp/err.log"
  fi
}
printf 'hello, world\n' >"$tmp/hello.txt"
head -c 20000 "$tmp/fsdp.json" >"$tmp/truncated.json"
printf '{"traceEvents": [], "otherData": {"version": "chrome"}}\n' >"$tmp/chrome.json"
printf '{"name": "not a trace"}\n' >"$tmp/other.json"
: >"$tmp/empty.json"
expect_2 "missing file" "$tmp/nope.json: no such file" "$tmp/nope.json" -o "$tmp/x.html"
expect_2 "not JSON" "$tmp/hello.txt: not JSON" "$tmp/hello.txt" -o "$tmp/x.html"
expect_2 "empty file" "$tmp/empty.json: empty file" "$tmp/empty.json" -o "$tmp/x.html"
expect_2 "truncated JSON" "$tmp/truncated.json: truncated JSON" "$tmp/truncated.json" -o "$tmp/x.html"
expect_2 "JSON, not a trace" "$tmp/other.json: not an fsdp trace: no traceEvents" "$tmp/other.json" -o "$tmp/x.html"
expect_2 "a Chrome trace, not fsdp's" "$tmp/chrome.json: not an fsdp trace: no otherData.fsdp" "$tmp/chrome.json" -o "$tmp/x.html"
expect_2 "different world sizes" "cannot compare: $tmp/fsdp.json has 4 ranks, $tmp/fsdp2.json has 2" "$tmp/fsdp.json" "$tmp/fsdp2.json" -o "$tmp/x.html"
expect_2 "second file bad" "$tmp/hello.txt: not JSON" "$tmp/fsdp.json" "$tmp/hello.txt" -o "$tmp/x.html"
expect_2 "no trace given" "the following arguments are required: TRACE.json" -o "$tmp/x.html"
cp "$tmp/fsdp.json" "$tmp/keep.json"
expect_2 "output would overwrite the input" "$tmp/keep.json: is an input trace; refusing to overwrite it" "$tmp/keep.json" -o "$tmp/keep.json"
cmp -s "$tmp/fsdp.json" "$tmp/keep.json" && ok "the input trace is left as it was" || bad "the input trace was changed"
expect_2 "three traces" "give one or two trace files, not 3" "$tmp/ddp.json" "$tmp/fsdp.json" "$tmp/fsdp.json" -o "$tmp/x.html"
expect_2 "output in a missing directory" "$tmp/no/such/dir/r.html: cannot write the report" "$tmp/fsdp.json" -o "$tmp/no/such/dir/r.html"
expect_2 "output is a directory" "$tmp: cannot write the report" "$tmp/fsdp.json" -o "$tmp"
[ ! -e "$tmp/x.html" ] && ok "bad input leaves no output file behind" || bad "bad input wrote $tmp/x.html"
# the report is an output like fsdp's own: never through a link, never into a
# named pipe, and a failed write (tests/failio.so) leaves the old page
echo "old page" >"$tmp/old.html"; ln -s "$tmp/old.html" "$tmp/link.html"; mkfifo "$tmp/pipe.html"
expect_2 "output is a symbolic link" "it is a symbolic link" "$tmp/fsdp.json" -o "$tmp/link.html"
[ -L "$tmp/link.html" ] && [ "$(cat "$tmp/old.html")" = "old page" ] && ok "the link and its target are untouched" || bad "the link changed"
expect_2 "output is a named pipe" "it is not a regular file" "$tmp/fsdp.json" -o "$tmp/pipe.html"
if [ -f tests/failio.so ]; then
  LD_PRELOAD=$PWD/tests/failio.so FAILIO=fsync:old.html:EIO $REPORT "$tmp/fsdp.json" -o "$tmp/old.html" >/dev/null 2>"$tmp/err.log"; rc=$?
  [ $rc -eq 1 ] && grep -q "writing failed" "$tmp/err.log" && [ "$(cat "$tmp/old.html")" = "old page" ] && [ -z "$(ls "$tmp" | grep tmp-)" ] \
    && ok "a failed fsync: exit 1, the old page kept, no temporary left: $(cat "$tmp/err.log")" \
    || { bad "failed fsync: exit $rc, page now $(head -c 20 "$tmp/old.html")"; cat "$tmp/err.log"; }
fi

# -- rendering in headless Chromium ---------------------------------------------------
CHROME=""
for c in chromium chromium-browser google-chrome google-chrome-stable; do
  command -v "$c" >/dev/null 2>&1 && { CHROME=$(command -v "$c"); break; }
done
if [ -z "$CHROME" ]; then
  echo "skip  chromium is not installed, so the page cannot be rendered here"
  echo "      (Debian/Ubuntu: apt-get install -y chromium); $passed checks passed, $failed failed without it"
  [ $failed -eq 0 ] && exit 77 || exit 1
fi

chrome() { # chrome LOG ARGS... : one fresh headless browser
  local log=$1 profile; shift
  profile=$(mktemp -d "$tmp/profile.XXXXXX")
  timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --disable-extensions --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$profile" --enable-logging=stderr --v=0 "$@" 2>"$log"
  local rc=$?
  rm -rf "$profile"
  return $rc
}
# renders URL; passes if the page's marker says every chart drew and the
# console shows no uncaught error
rendered() { # rendered URL  (prints what it saw; returns 0 or 1)
  local url=$1
  chrome "$tmp/chrome.log" --dump-dom "$url" >"$tmp/dom.html" || { echo "chromium failed to load $url"; tail -3 "$tmp/chrome.log"; return 1; }
  local errs; errs=$(grep -E 'CONSOLE|Uncaught' "$tmp/chrome.log" | grep -iE 'uncaught|error' | head -3)
  $CHECK dom "$tmp/dom.html" || return 1
  [ -z "$errs" ] || { echo "console errors: $errs"; return 1; }
  return 0
}

version=$("$CHROME" --version 2>/dev/null | head -1 | awk '{print $1, $2}')
for page in "${pages[@]}"; do
  name=$(basename "$page")
  if rendered "file://$page" >"$tmp/r.log" 2>&1; then ok "$name renders in $version: $(tail -1 "$tmp/r.log")"
  else bad "$name does not render cleanly"; show "$tmp/r.log"; fi
done
if rendered "file://$tmp/two.html#run,shared" >"$tmp/r.log" 2>&1; then ok "two.html with the toggles flipped (whole run, shared time axis) renders: $(tail -1 "$tmp/r.log")"
else bad "two.html#run,shared does not render cleanly"; show "$tmp/r.log"; fi
if rendered "file://$tmp/two.html#selftest" >"$tmp/r.log" 2>&1 && grep -q 'data-selftest="ok' "$tmp/dom.html"; then
  ok "hover tooltips: synthetic mouse events over a collective, a compute span, a memory chart and a traffic bar show their details ($(grep -o 'data-selftest="[^"]*"' "$tmp/dom.html"))"
else
  bad "hover tooltips do not work"; show "$tmp/r.log"
fi

# the checks catch broken pages: a runtime error in one chart, a syntax error
$PY - "$tmp/two.html" "$tmp/broken_runtime.html" "$tmp/broken_syntax.html" <<'EOF'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
fn = "function drawTraffic(el) {"
assert page.count(fn) == 1, "drawTraffic not found in the page"
open(sys.argv[2], "w", encoding="utf-8").write(page.replace(fn, fn + " el.no.such.thing = 1;"))
strict = "'use strict';"
assert strict in page, "no 'use strict' in the page"
open(sys.argv[3], "w", encoding="utf-8").write(page.replace(strict, strict + " var = ;", 1))
EOF
for kind in runtime syntax; do
  if rendered "file://$tmp/broken_$kind.html" >"$tmp/r.log" 2>&1; then
    bad "a page with a deliberate $kind error passed the render check"; show "$tmp/r.log"
  else
    ok "a deliberate $kind error is caught: $(grep -v '^ ' "$tmp/r.log" | head -1 | cut -c1-150)"
  fi
done

# screenshots: a picture, not one colour; and a blank page is told apart
screenshot() { chrome "$tmp/chrome.log" --screenshot="$2" --window-size=1400,2000 "file://$1" >/dev/null && [ -s "$2" ]; }
for page in "$tmp/two.html" "$tmp/one.html"; do
  name=$(basename "$page" .html)
  if screenshot "$page" "$tmp/$name.png" && $CHECK png "$tmp/$name.png" >"$tmp/r.log" 2>&1; then
    ok "$name.html screenshot: $(head -1 "$tmp/r.log" | sed "s|$tmp/||")"
  else
    bad "$name.html screenshot is missing or blank"; show "$tmp/r.log"
  fi
done
printf '<!DOCTYPE html><html><body></body></html>\n' >"$tmp/blank.html"
if screenshot "$tmp/blank.html" "$tmp/blank.png" && ! $CHECK png "$tmp/blank.png" >"$tmp/r.log" 2>&1; then
  ok "a blank page's screenshot is told apart: $(head -1 "$tmp/r.log" | sed "s|$tmp/||")"
else
  bad "the screenshot check does not tell a blank page apart"; show "$tmp/r.log"
fi
[ -n "${REPORT_SCREENSHOT:-}" ] && cp "$tmp/two.png" "$REPORT_SCREENSHOT" && echo "note  screenshot copied to $REPORT_SCREENSHOT"

echo
if [ $failed -eq 0 ]; then echo "report: all $passed checks passed"; else echo "report: $failed of $((passed + failed)) checks failed"; fi
[ $failed -eq 0 ]
