#!/usr/bin/env bash
# tests/test_flag_table.sh: lecture 17's table names every option ./fsdp --help
# lists beside its PyTorch counterpart (or says there is none), so a new
# flag cannot go unmapped. First the check is shown to catch a flag the
# table lacks.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
LECTURE=lectures/17-the-pytorch-lab.md
table=$(grep '^| ' "$LECTURE")
# unmapped FLAGS...: prints the flags no row of the table names
unmapped() { for f in "$@"; do grep -qF -- "\`$f" <<<"$table" || echo "$f"; done; }
flags=$(./fsdp --help | grep -oE '^  --[a-z0-9-]+|[ ]--[a-z0-9-]+ X' | grep -oE -- '--[a-z0-9-]+' | sort -u | grep -vx -- --help)
[ "$(unmapped --no-such-flag)" = --no-such-flag ] && ok "a flag missing from the table is reported (--no-such-flag)" ||
  bad "the check did not report --no-such-flag"
missing=$(unmapped $flags)
n=$(wc -w <<<"$flags")
[ -z "$missing" ] && ok "$LECTURE maps all $n options of ./fsdp --help to PyTorch" ||
  bad "$LECTURE's table lacks: $missing"
exit $fail
