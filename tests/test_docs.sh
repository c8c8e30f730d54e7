#!/usr/bin/env bash
# tests/test_docs.sh — the commands README.md and lectures/README.md show run,
# and print what the pages say they print (tests/check_docs.py; the convention
# is docs/testing.md; tests/run.sh checks each page of docs/ and each numbered
# lecture on a line of its own, with its own time limit). Both pages may show
# only commands that cannot run here (README's `make run` and `make test`, whose
# output docs/running.md shows and checks): then the checker exits 77, and their
# markup has still been checked. Then proof that the checker can fail: on
# the fixtures in tests/fixtures/docs/ it must FAIL drifted output, a wrong
# exit code and a timeout, PASS a number within tolerance, SKIP a GPU block
# with the reason, and refuse bad markup (a no-run block without a reason)
# without running any of the file's commands; and a page's `torchrun` is the
# project's (.venv-torch/bin), never another first on PATH (Debian's 1.13).
set -u
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
[ -x ./fsdp ] || make -s fsdp >/dev/null || { echo "FAIL: cannot build ./fsdp"; exit 1; }
CHECK="python3 tests/check_docs.py"
FIX=tests/fixtures/docs
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT

# ---- the pages ------------------------------------------------------------------
pages=(README.md lectures/README.md)
start=$SECONDS
timeout $((280 * ${TIMEOUT_SCALE:-1})) $CHECK "${pages[@]}" >"$d/pages.log" 2>&1; rc=$?
cat "$d/pages.log"
if [ $rc -eq 0 ]; then
  ok "${pages[*]}: every command that can run here passed ($((SECONDS - start)) s)"
elif [ $rc -eq 77 ]; then
  ok "${pages[*]}: the markup is right, and every command they show is one that is shown only, skipped with its reason"
else
  bad "${pages[*]}: tests/check_docs.py exit $rc (see the FAIL lines above)"
fi

# ---- the checker can fail ---------------------------------------------------------
# run NAME FILE EXPECTED_EXIT: the checker on one fixture, its output in $d/NAME.log
fixture() {
  local name=$1 file=$2 want=$3; shift 3
  # the fixtures' timeouts as written, under make sanitize too
  TIMEOUT_SCALE= CHECK_DOCS_MARK="$d/mark" timeout 60 $CHECK --no-gpu "$@" "$file" >"$d/$name.log" 2>&1
  local rc=$?
  [ $rc -eq "$want" ] && ok "$file: exit $rc" || { bad "$file: exit $rc, expected $want"; sed 's/^/    /' "$d/$name.log"; }
}
has() { # has NAME REGEX WHAT: the fixture's output has a line matching REGEX
  grep -qE -- "$2" "$d/$1.log" && ok "$3" || { bad "$3: no line matching '$2' in:"; sed 's/^/    /' "$d/$1.log"; }
}

fixture pass $FIX/pass.md 0
has pass '^9 passed, 0 failed, 0 skipped$' "pass.md: text, spacing, '...', '<any>', timings, state, exit=2, continued: all 9 pass"
has pass '^PASS .*# within-tolerance' "a number within the block's tolerance (rel=1e-3) passes"
[ ! -e written-by-check-docs-fixture ] && ok "a file a page writes lands in its temporary directory, not in the repository" ||
  { bad "a fixture's file appeared in the repository"; rm -f written-by-check-docs-fixture; }

fixture drift $FIX/drift.md 1
has drift '^0 passed, 7 failed, 0 skipped$' "drift.md: all 7 commands fail"
has drift "number 0.7080 where the block shows 0.7074 \(tolerance: rel=0.0001" "a number outside the tolerance fails, naming both numbers"
has drift "number 1.275 where the block shows 0.771" "a drifted figure in a table line fails"
has drift '^FAIL .*# missing-line' "an expected line missing from the output fails"
has drift '^      - c$' "the FAIL shows the expected line that was not found"
has drift '^FAIL .*# not-consecutive' "lines shown one under another must be consecutive unless '...' is between them"
has drift 'exit 3, expected 0' "a command exiting 3 where 0 is expected fails"
has drift 'exit 0, expected 2' "a command exiting 0 in an exit=2 block fails"
has drift 'timed out after 1 s' "a command past its timeout is killed and fails"

fixture gpu $FIX/gpu.md 77
has gpu '^SKIP .*# gpu-only .*needs a GPU: --no-gpu given' "a gpu block is skipped with the reason, without a GPU"
has gpu '^SKIP .*# needs-missing .*needs no-such-program-fsdp, which is not installed' "a block that needs a missing program (needs=) is skipped with the reason"
has gpu '^0 passed, 0 failed, 2 skipped$' "skipped blocks are counted as skipped, not passed; only skips: exit 77"

fixture norun $FIX/norun_no_reason.md 1
has norun 'norun_no_reason.md:7 +`no-run` needs a reason' "a no-run block without a reason is refused, with its line"
[ ! -e "$d/mark" ] && ok "a file with bad markup runs none of its commands" || bad "a command ran in a file with bad markup"

fixture markup $FIX/bad_markup.md 1
has markup 'bad_markup.md:3 +unknown check option `tolerance=1e-3`' "an unknown check option is refused"
has markup 'bad_markup.md:9 +a check comment before a ```sh block' "a check comment before a block that is not console is refused"
has markup 'bad_markup.md:15 +a ```console block starts with a `\$ ` command line' "a console block not starting with \$ is refused"

fixture list $FIX/norun_no_reason.md 1 --list
has list 'norun_no_reason.md:4  \$ touch' "--list prints the commands (and exits 1 on bad markup)"
[ ! -e "$d/mark" ] && ok "--list runs nothing" || bad "--list ran a command"
out=$(TIMEOUT_SCALE=0.5 $CHECK --list $FIX/pass.md 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'TIMEOUT_SCALE=0.5: give a whole number' <<<"$out" \
  && ok "TIMEOUT_SCALE=0.5 is refused, exit 2, saying what to give" \
  || bad "TIMEOUT_SCALE=0.5: exit $rc, '$out' (expected 2 and what to give)"

# torchrun is the project's (.venv-torch/bin/torchrun), not the first on PATH:
# Debian's python3-torch puts PyTorch 1.13's there, which has no
# --nproc-per-node (exit 2, nothing printed). A fake of it goes first on
# PATH, and a fake project torchrun stands in for .venv-torch/bin (the
# checker's TORCH_BIN), so this runs with or without PyTorch installed.
mkdir -p "$d/debian" "$d/venv-bin" "$d/no-venv-bin"
cat >"$d/debian/torchrun" <<'SH'
#!/bin/sh
# as PyTorch 1.13's torchrun (Debian's python3-torch): no --nproc-per-node
for a; do [ "$a" = --nproc-per-node ] && { echo "torchrun: error: unrecognized arguments: $a" >&2; exit 2; }; done
echo "Debian's torchrun: $*"
SH
printf '#!/bin/sh\necho "project torchrun: $*"\n' >"$d/venv-bin/torchrun"
chmod +x "$d/debian/torchrun" "$d/venv-bin/torchrun"
torchrun_fixture() { # torchrun_fixture NAME EXPECTED_EXIT VENV_BIN: the checker on torchrun.md
  local name=$1 want=$2 bin=$3
  PATH="$d/debian:$PATH" TIMEOUT_SCALE= timeout 60 python3 - "$bin" "$FIX/torchrun.md" >"$d/$name.log" 2>&1 <<'PY'
import sys
sys.path.insert(0, "tests")
import check_docs
check_docs.TORCH_BIN = sys.argv[1]  # the repository's .venv-torch/bin, here a stand-in
sys.argv = ["tests/check_docs.py", "--no-gpu", sys.argv[2]]
sys.exit(check_docs.main())
PY
  local rc=$?
  [ $rc -eq "$want" ] && ok "$FIX/torchrun.md ($name): exit $rc" || { bad "$FIX/torchrun.md ($name): exit $rc, expected $want"; sed 's/^/    /' "$d/$name.log"; }
}
torchrun_fixture torchrun 0 "$d/venv-bin"
has torchrun '^PASS .*# project-torchrun' "with another torchrun first on PATH (as Debian's 1.13), the project's runs the page's torchrun"
torchrun_fixture no-torchrun 77 "$d/no-venv-bin"
has no-torchrun "^SKIP .*# project-torchrun .*needs the project's torchrun, .venv-torch/bin/torchrun.*make torch-deps.*$d/debian/torchrun on PATH is not it" \
  "without the project's, the block is skipped saying so, never run with the torchrun on PATH"

echo
[ $fail -eq 0 ] && echo "test_docs: all checks passed" || echo "test_docs: some checks FAILED"
exit $fail
