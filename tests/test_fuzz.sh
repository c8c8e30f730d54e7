#!/usr/bin/env bash
# tests/test_fuzz.sh — fuzz formats.c's parsers with libFuzzer, under
# AddressSanitizer and UBSan.
#
# Builds tests/fuzz_formats.c, seeds a corpus with valid files of both kinds
# (tests/test_formats --write-seeds), and fuzzes for FUZZ_SECONDS (default
# 20). Exits 0 when nothing was found; 1 on a crash, a leak, undefined
# behaviour, a hang, or a broken promise (see fuzz_formats.c), with the
# input that caused it saved and the command to replay it printed; 77 (the
# suite's "skipped") when clang or libFuzzer's runtime is missing here.
#
#   FUZZ_SECONDS=300 bash tests/test_fuzz.sh     a longer run
#   FUZZ_CORPUS=DIR bash tests/test_fuzz.sh      keep (and grow) a corpus
set -u
cd "$(dirname "$0")/.."
CLANG=${CLANG:-clang}
SECONDS_TO_RUN=${FUZZ_SECONDS:-20}

if ! command -v "$CLANG" >/dev/null 2>&1; then
  echo "skip: $CLANG not found; install it (Debian/Ubuntu: apt-get install clang) to fuzz formats.c"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_formats.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

# libFuzzer's runtime ships separately from clang on Debian/Ubuntu: probe it
# with an empty target, so a missing runtime is a skip and a compile error
# in our code is a failure.
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$work/probe.c"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" >"$work/probe.log" 2>&1; then
  echo "skip: $CLANG cannot link a libFuzzer target here:"
  sed 's/^/  /' "$work/probe.log" | head -5
  echo "  install libFuzzer's runtime (Debian/Ubuntu: apt-get install libclang-rt-14-dev, or the one matching 'clang --version')"
  exit 77
fi

# -fno-sanitize-recover: undefined behaviour stops the run (by default UBSan
# prints and carries on, and libFuzzer would call the run clean).
FLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I."
echo "$CLANG $FLAGS tests/fuzz_formats.c formats.c -o $work/fuzz_formats"
if ! "$CLANG" $FLAGS -Wall -Wextra tests/fuzz_formats.c formats.c -o "$work/fuzz_formats"; then
  echo "FAIL: the fuzz target does not build"
  exit 1
fi

# the seeds: valid safetensors files and meta.txt texts, from the same
# helpers the unit tests use, so they follow every change to the formats
corpus=${FUZZ_CORPUS:-$work/corpus}
mkdir -p "$corpus" "$work/seeds"
if ! "$CLANG" -O1 -std=c11 -I. tests/test_formats.c formats.c -o "$work/test_formats" || ! "$work/test_formats" --write-seeds "$work/seeds"; then
  echo "FAIL: could not write the seed corpus"
  exit 1
fi
# plus the reference library's file, and every input the fuzzer once
# crashed on (tests/fixtures/fuzz/), so an old bug cannot come back
[ -f tests/fixtures/reference.safetensors ] && cp tests/fixtures/reference.safetensors "$work/seeds/"
cp tests/fixtures/fuzz/* "$work/seeds/" 2>/dev/null
echo "seeds: $(ls "$work/seeds" | wc -l) files (valid ones and past crashes); fuzzing for ${SECONDS_TO_RUN}s"

# -error_exitcode=1: libFuzzer's default, 77, would read as "skipped".
# -timeout=10: an input that takes 10 s is a hang, and a failure.
# -max_len=65536: big enough for headers with many tensors.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$work/fuzz_formats" "$corpus" "$work/seeds" \
  -max_total_time="$SECONDS_TO_RUN" -error_exitcode=1 -timeout=10 -max_len=65536 \
  -dict=tests/fixtures/formats.dict -artifact_prefix="$work/" -print_final_stats=1 \
  >"$work/fuzz.log" 2>&1
rc=$?

# the summary: executions, coverage, corpus
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)' "$work/fuzz.log" | sed 's/^/  /'
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$work/fuzz.log" | sed 's/^/  /'
if [ $rc -ne 0 ]; then
  echo "FAIL: the fuzzer found a problem (exit $rc):"
  grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$work/fuzz.log" | tail -60 | sed 's/^/  /'
  mkdir -p out/fuzz-crashes
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -f "$f" ] || continue
    cp "$f" out/fuzz-crashes/ # add it to tests/fixtures/fuzz/ once fixed
    echo "  saved out/fuzz-crashes/$(basename "$f"); replay: $CLANG $FLAGS tests/fuzz_formats.c formats.c -o fuzz_formats && ./fuzz_formats out/fuzz-crashes/$(basename "$f")"
  done
  exit 1
fi
echo "ok: ${SECONDS_TO_RUN}s of fuzzing found no crash, leak, undefined behaviour or broken promise"

# Differential: every safetensors input of the corpus that st_parse_header
# accepted must load in Hugging Face's library too (formats.h promises
# that we are the stricter one).
if python3 -c 'import safetensors' >/dev/null 2>&1; then
  find "$corpus" "$work/seeds" -type f -print0 | xargs -0 "$work/test_formats" --accepted >"$work/accepted.txt"
  if ! xargs python3 tests/fixtures/st_check.py accepts <"$work/accepted.txt" >"$work/diff.log" 2>&1; then
    echo "FAIL: formats.c accepts files the reference library refuses:"
    sed 's/^/  /' "$work/diff.log" | tail -20
    exit 1
  fi
  echo "ok: $(tail -1 "$work/diff.log")"
else
  echo "not run: the check against the reference library (pip install safetensors numpy)"
fi
exit 0
