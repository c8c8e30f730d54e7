#!/usr/bin/env bash
# Bad checkpoints and bad safetensors files: each is refused with a message
# that names the file and what is wrong, with exit 2 on every rank, within
# the timeout (no rank hangs), and the files are left exactly as they were.
source "$(dirname "$0")/lib.sh"
ARGS="--model tiny --batch 12 --log-every 100"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
timeout 120 $MPIRUN -np 3 ./fsdp $ARGS --steps 4 --save-dir "$d/good" --export "$d/good.st" >/dev/null 2>&1 || { echo "FAIL: could not make the good checkpoint"; exit 1; }
ck="$d/good/step-00000004"

refused() { # WHAT FRAGMENT NP ARGS...
  local what=$1 frag=$2 np=$3; shift 3
  local before after out rc
  before=$(cat "$d"/good/*/* "$d"/*.st 2>/dev/null | md5sum)
  out=$(timeout 60 $MPIRUN -np "$np" ./fsdp $ARGS --steps 6 "$@" 2>&1); rc=$?
  after=$(cat "$d"/good/*/* "$d"/*.st 2>/dev/null | md5sum)
  if [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$frag" && [ "$before" = "$after" ] && [ "$(echo "$out" | grep -c '^error:')" -eq 1 ]; then
    ok "$what: exit 2, $(echo "$out" | grep '^error:' | cut -c1-150)"
  else
    bad "$what: exit $rc (124 = hang), files unchanged: $([ "$before" = "$after" ] && echo yes || echo NO)"; echo "$out" | tail -4
  fi
}
copy() { rm -rf "$d/$1"; cp -r "$ck" "$d/$1"; }

refused "missing directory" "no such directory" 2 --resume "$d/nope"
mkdir "$d/empty"; refused "directory without a checkpoint" "no complete checkpoint" 2 --resume "$d/empty"
copy flip; printf '\x55' | dd of="$d/flip/shard-00001.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
refused "a corrupted shard" "flip/shard-00001.bin: checksum mismatch" 3 --resume "$d/flip"
copy trunc; truncate -s 1000 "$d/trunc/shard-00002.bin"
refused "a truncated shard" "trunc/shard-00002.bin: 1000 bytes, but meta.txt says" 2 --resume "$d/trunc"
copy meta; head -c 300 "$ck/meta.txt" >"$d/meta/meta.txt"
refused "a truncated meta.txt" "meta/meta.txt:" 2 --resume "$d/meta"
refused "a checkpoint of another model" "the checkpoint is of a different model" 3 --resume "$ck" --width 32
refused "missing safetensors file" "cannot open it" 2 --init-from "$d/none.st"
head -c 100 "$d/good.st" >"$d/cut.st"
refused "a truncated safetensors file" "cut.st" 2 --init-from "$d/cut.st"
printf 'not a safetensors file at all, just text\n' >"$d/text.st"
refused "a text file as safetensors" "text.st" 2 --init-from "$d/text.st"
refused "safetensors of another shape (--width 17)" "proj_in.weight has shape (16, 32), but this model's is (17, 32)" 2 --init-from "$d/good.st" --width 17
refused "safetensors without a parameter of the model (--depth 3)" "no tensor named blocks.2." 2 --init-from "$d/good.st" --depth 3
refused "safetensors with a tensor the model lacks (--depth 1)" "it holds blocks.1." 2 --init-from "$d/good.st" --depth 1
if command -v python3 >/dev/null; then
  python3 - "$d/good.st" "$d/lie.st" "$d/f16.st" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def write(path, h):
    b = json.dumps(h).encode()
    b += b" " * (-len(b) % 8)
    open(path, "wb").write(struct.pack("<Q", len(b)) + b + data)
lie = json.loads(json.dumps(head)); lie["head.bias"]["data_offsets"][1] += 4096   # points past the end
write(sys.argv[2], lie)
f16 = json.loads(json.dumps(head)); f16["head.bias"]["dtype"] = "F16"
write(sys.argv[3], f16)
PY
  refused "a header that lies about its offsets" "lie.st" 2 --init-from "$d/lie.st"
  refused "a tensor of another dtype" "f16.st" 2 --init-from "$d/f16.st"
fi
refused "a checkpoint of another seed" "trained with --seed 1337, this run has --seed 5" 2 --resume "$ck" --seed 5
cp -r "$d/good" "$d/later"
refused "--save-dir holding a later checkpoint (another run)" "already holds a checkpoint at step 4, beyond this run's start (step 0)" 2 --save-dir "$d/later"
[ -f "$d/later/step-00000004/meta.txt" ] && ok "... and it deleted nothing there" || bad "the other run's checkpoint was touched"
echo save >"$d/afile"; refused "--save-dir that is a file" "exists and is not a directory" 2 --save-dir "$d/afile"
refused "--resume and --init-from together" "give one" 2 --resume "$ck" --init-from "$d/good.st"
exit $fail
