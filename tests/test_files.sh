#!/usr/bin/env bash
# tests/test_files.sh SECTION — every file fsdp.c reads or writes is handled
# safely. One section per promise (run.sh runs each as its own test):
#
#   outputs      an output never replaces what is not a regular file of ours
#                (a device, a named pipe, a symbolic link, a directory, a
#                checkpoint directory that is a link), two outputs (or an
#                output and an input) never share a path
#   failures     a failed write, fsync or close (injected by tests/failio.so)
#                is a message and a non-zero exit on every rank, and leaves
#                no partial file under the final name
#   inputs       a reader never blocks or reads without bound: a named pipe,
#                a link to /dev/zero or /dev/urandom, a directory, for every
#                file fsdp.c reads, is refused by name within seconds
#   checkpoints  an edited checkpoint is refused: meta.txt's own checksum,
#                its step against the directory and the shard headers,
#                adam_step <= step, swapped offsets, swapped shard files, a
#                shard from another checkpoint; --resume with other data,
#                batch or context
#   numbers      NaN or Inf in --init-from is refused by name; a loss that
#                stops being a number ends the run with exit 5
#   messages     sizes in units that show them, once; 1P; the value as typed;
#                meta.txt that is a directory; --resume of a file; a trace
#                of a run with nothing to train
#
# Each case runs under `timeout`, so a hang is a FAIL (exit 124), never a
# stuck suite. Device nodes are made with mknod in a temporary directory (the
# system's /dev is never a target); without the right to mknod that case is
# skipped and says so.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
SECTION=${1:?usage: tests/test_files.sh outputs|failures|inputs|checkpoints|numbers|messages}
T="--model tiny --batch 12 --log-every 100"
d=$(mktemp -d)
cleanup() { # a rank stuck opening a named pipe (a failing build) is released by opening it here
  for p in "$d"/*fifo* "$d"/*/*fifo* "$d"/*/*/*; do [ -p "$p" ] && { exec 9<>"$p"; exec 9>&-; }; done 2>/dev/null
  rm -rf "$d"
}
trap cleanup EXIT
FAILIO="$PWD/tests/failio.so"
# under make sanitize, AddressSanitizer must let the shim be preloaded first
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

# refused WHAT FRAGMENT NP ARGS...: exit 2, the fragment in the one "error:"
# line, within 30 s.
refused() {
  local what=$1 frag=$2 np=$3; shift 3
  local out rc
  out=$(timeout 30 $MPIRUN -np "$np" ./fsdp $T "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] && grep -qF -- "$frag" <<<"$out"; then
    ok "$what: exit 2, $(grep '^error:' <<<"$out" | cut -c1-160)"
  else
    bad "$what: exit $rc (124 = hang), wanted 2 and '$frag'"; tail -4 <<<"$out"
  fi
}
# runs_ok WHAT NP ARGS...: exit 0
runs_ok() {
  local what=$1 np=$2; shift 2
  local out rc
  out=$(timeout 120 $MPIRUN -np "$np" ./fsdp $T "$@" 2>&1); rc=$?
  [ $rc -eq 0 ] && ok "$what: exit 0" || { bad "$what: exit $rc"; tail -4 <<<"$out"; }
}
can_mknod() { mknod "$d/.probe" c 1 3 2>/dev/null && rm -f "$d/.probe"; }
is_char() { [ -c "$1" ] && ok "... and $1 is still a character device" || bad "$1 is no longer a device"; }

outputs() {
  mkfifo "$d/fifo"; mkdir "$d/dir"; echo precious >"$d/target"; ln -s "$d/target" "$d/link"
  if can_mknod; then
    mknod "$d/null" c 1 3; mknod "$d/full" c 1 7
    refused "--export to a device node (like /dev/null)" "is a character device" 2 --steps 2 --export "$d/null"
    is_char "$d/null"
    refused "--trace to a device that is always full (like /dev/full)" "is a character device" 2 --steps 2 --trace "$d/full"
    is_char "$d/full"
  else
    echo "skip: mknod is not permitted here (run as root to check device nodes); the FIFO and link cases still run"
  fi
  refused "--export to a named pipe" "is a named pipe (FIFO)" 2 --steps 2 --export "$d/fifo"
  [ -p "$d/fifo" ] && ok "... and it is still a named pipe" || bad "the named pipe was replaced"
  refused "--trace to a symbolic link" "is a symbolic link" 2 --steps 2 --trace "$d/link"
  [ -L "$d/link" ] && [ "$(cat "$d/target")" = precious ] && ok "... and the link and its target are untouched" \
    || bad "the link or its target changed"
  refused "--export to a directory" "is a directory" 2 --steps 2 --export "$d/dir"
  refused "--export X --trace X" "name the same file" 2 --steps 2 --export "$d/same" --trace "$d/same"
  refused "--export X --trace ./X (one file, two spellings)" "name the same file" 2 --steps 2 --export "$d/same" --trace "$d/dir/../same"
  printf 'some text to train on, long enough for a context of 8\n' >"$d/data.txt"
  refused "--trace over the --data file" "which this run reads" 2 --steps 2 --data "$d/data.txt" --trace "$d/data.txt"
  grep -q "some text" "$d/data.txt" && ok "... and the data file is untouched" || bad "the data file was replaced"
  cp "$d/data.txt" "$d/t.no_shard.json"
  refused "--compare --trace whose derived name is the --data file" "which this run reads" 2 --steps 2 --compare \
    --data "$d/t.no_shard.json" --trace "$d/t.json"
  [ -e "$d/same" ] && bad "a refused output was created" || ok "no refused output was created"
  refused "--export into the --save-dir's own path" "name the same place" 2 --steps 2 --save-dir "$d/out" --export "$d/out"
  [ -e "$d/out" ] && bad "the refused --save-dir was created" || ok "... and neither was created"

  # Checkpoint directories: rotation and crash sweeping delete only what
  # fsdp.c wrote. A step-N or .tmp-step-N that is a symbolic link to a
  # directory of someone else's files must not be emptied through the link.
  mkdir -p "$d/keep1" "$d/keep2" "$d/ck"
  for k in keep1 keep2; do echo mine >"$d/$k/meta.txt"; echo mine >"$d/$k/shard-00000.bin"; echo mine >"$d/$k/notes"; done
  runs_ok "a run that saves at step 2" 2 --steps 2 --save-dir "$d/ck"
  ln -s "$d/keep1" "$d/ck/step-00000001"
  ln -s "$d/keep2" "$d/ck/.tmp-step-00000009"
  runs_ok "resume it and save at steps 3 and 4 (rotation removes step 1, sweeps .tmp)" 2 --steps 4 --save-every 1 \
    --resume "$d/ck/step-00000002" --save-dir "$d/ck"
  [ "$(cat "$d"/keep1/* "$d"/keep2/* | grep -c mine)" -eq 6 ] && ok "... files behind linked step-N and .tmp-step-N untouched" \
    || bad "rotation deleted files through a symbolic link: $(ls "$d/keep1" "$d/keep2")"
  [ -d "$d/ck/step-00000004" ] && [ -d "$d/ck/step-00000003" ] && [ ! -d "$d/ck/step-00000002" ] \
    && ok "... and rotation still keeps the two newest of its own" || bad "rotation: $(ls "$d/ck")"
  local before; before=$(md5sum <"$d/ck/step-00000004/meta.txt")
  refused "--export over a file of the checkpoint being resumed" "which this run reads" 2 --steps 5 \
    --resume "$d/ck" --export "$d/ck/step-00000004/meta.txt"
  [ "$(md5sum <"$d/ck/step-00000004/meta.txt")" = "$before" ] && ok "... and that meta.txt is untouched" || bad "meta.txt changed"
  mkdir "$d/ck5"; echo "not a checkpoint" >"$d/ck5/step-00000002"
  refused "--save-dir holding a step-N that is a file" "step-00000002 is a regular file, where checkpoints are directories" \
    2 --steps 2 --save-dir "$d/ck5"
}

failures() {
  # trace, export and checkpoint, each with a failing write, fsync or close
  local what op file syscall out rc
  for what in "write:t.json:ENOSPC --trace" "short:t.json:ENOSPC --trace" "fsync:t.json:EIO --trace" \
              "close:t.json:EIO --trace" "write:e.st:ENOSPC --export" "fsync:e.st:EIO --export" \
              "short:e.st:ENOSPC --export"; do
    op=${what% *}; file=${op#*:}; file=${file%%:*}
    syscall=${op%%:*}; [ "$syscall" = short ] && syscall=write   # half a write, then ENOSPC
    echo old >"$d/$file"
    out=$(timeout 60 $MPIRUN -np 3 -x LD_PRELOAD="$FAILIO" -x FAILIO="$op" ./fsdp $T --steps 2 "${what#* }" "$d/$file" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: ${what#* } .*writing failed ($syscall" <<<"$out" \
       && [ "$(cat "$d/$file")" = old ] && [ -z "$(ls "$d" | grep tmp)" ]; then
      ok "$op ${what#* }: exit $rc, the old file kept, no temporary left: $(grep '^error:' <<<"$out" | cut -c1-120)"
    else
      bad "$op ${what#* }: exit $rc, file now '$(head -c 20 "$d/$file")', left: $(ls "$d")"; tail -3 <<<"$out"
    fi
  done
  out=$(timeout 60 $MPIRUN -np 3 -x LD_PRELOAD="$FAILIO" -x FAILIO=write:shard-00001:ENOSPC ./fsdp $T --steps 2 --save-dir "$d/ck" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "shard-00001.bin: writing failed (write" <<<"$out" && [ -z "$(ls -A "$d/ck")" ]; then
    ok "a shard file that cannot be written: exit $rc, no step-N and no .tmp-step-N left"
  else
    bad "failed checkpoint write: exit $rc, left: $(ls -A "$d/ck")"; tail -3 <<<"$out"
  fi
  out=$(timeout 60 $MPIRUN -np 2 -x LD_PRELOAD="$FAILIO" -x FAILIO=fsync:meta.txt:EIO ./fsdp $T --steps 2 --save-dir "$d/ck2" 2>&1); rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "meta.txt: writing failed (fsync" <<<"$out" && [ -z "$(ls -A "$d/ck2")" ] \
    && ok "meta.txt that cannot be flushed: exit $rc, no step-N and no .tmp-step-N left" \
    || { bad "meta.txt fsync: exit $rc, left: $(ls -A "$d/ck2")"; tail -3 <<<"$out"; }
}

inputs() {
  mkfifo "$d/fifo"; ln -s /dev/zero "$d/zero"; ln -s /dev/urandom "$d/urandom"; mkdir "$d/dir"
  refused "--init-from a named pipe" "is a named pipe (FIFO)" 2 --steps 2 --init-from "$d/fifo"
  refused "--init-from a link to /dev/zero" "a symbolic link to a character device" 2 --steps 2 --init-from "$d/zero"
  refused "--init-from a link to /dev/urandom" "a symbolic link to a character device" 2 --steps 2 --init-from "$d/urandom"
  refused "--init-from a directory" "is a directory" 2 --steps 2 --init-from "$d/dir"
  refused "--data a link to /dev/zero" "a symbolic link to a character device" 2 --steps 2 --data "$d/zero"
  timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 2 --save-dir "$d/ck" >/dev/null 2>&1 || bad "could not make a checkpoint"
  local ck="$d/ck/step-00000002" c kind why
  for c in fifo zero urandom; do
    case $c in
      fifo) kind="a named pipe" why="is a named pipe (FIFO)" ;;
      *) kind="a link to /dev/$c" why="a symbolic link to a character device" ;;
    esac
    rm -rf "$d/m$c"; cp -r "$ck" "$d/m$c"; rm "$d/m$c/meta.txt"
    if [ $c = fifo ]; then mkfifo "$d/m$c/meta.txt"; else ln -s /dev/$c "$d/m$c/meta.txt"; fi
    refused "meta.txt that is $kind" "meta.txt: $why" 2 --steps 4 --resume "$d/m$c"
    rm -rf "$d/s$c"; cp -r "$ck" "$d/s$c"; rm "$d/s$c/shard-00001.bin"
    if [ $c = fifo ]; then mkfifo "$d/s$c/shard-00001.bin"; else ln -s /dev/$c "$d/s$c/shard-00001.bin"; fi
    refused "a shard file that is $kind" "shard-00001.bin: $why" 2 --steps 4 --resume "$d/s$c"
  done
  # --data is mapped, not copied: checked in tests/test_units (data_is_mapped)
}

# meta.txt with its checksum recomputed, as a careful editor would: what is
# then left to catch an edit is the shard headers and the rules.
resum() {
  python3 - "$1" <<'PY'
import sys, zlib
p = sys.argv[1]
text = open(p, "rb").read()
body = text[:text.rindex(b"\nend ") + 1]
open(p, "wb").write(body + b"end crc32 %08x\n" % zlib.crc32(body))
PY
}
checkpoints() {
  command -v python3 >/dev/null || { echo "python3 is needed to edit checkpoints (apt-get install python3)"; exit 77; }
  timeout 60 $MPIRUN -np 3 ./fsdp $T --steps 4 --save-every 2 --save-dir "$d/ck" >/dev/null 2>&1 || bad "could not make the checkpoints"
  local ck="$d/ck/step-00000004"
  cp -r "$ck" "$d/e1"; sed -i 's/^step 4$/step 2/; s/^adam_step 4$/adam_step 2/' "$d/e1/meta.txt"
  refused "meta.txt with its step edited" "meta.txt was edited" 3 --steps 6 --resume "$d/e1"
  cp -r "$ck" "$d/step-00000004"; sed -i 's/^step 4$/step 2/; s/^adam_step 4$/adam_step 2/' "$d/step-00000004/meta.txt"; resum "$d/step-00000004/meta.txt"
  refused "... and its checksum recomputed: the directory says step 4" "says step 2, but its directory is step 4" 3 --steps 6 --resume "$d/step-00000004"
  cp -r "$ck" "$d/e2"; sed -i 's/^step 4$/step 2/; s/^adam_step 4$/adam_step 2/' "$d/e2/meta.txt"; resum "$d/e2/meta.txt"
  refused "... copied under another name: the shard headers say step 4" "was written at step 4" 3 --steps 6 --resume "$d/e2"
  cp -r "$ck" "$d/e3"; sed -i 's/^adam_step 4$/adam_step 9/' "$d/e3/meta.txt"; resum "$d/e3/meta.txt"
  refused "adam_step beyond step" "adam_step must be <= step" 3 --steps 6 --resume "$d/e3"
  # two tensors of the same size trade places: the weights would be scrambled
  cp -r "$ck" "$d/e4"
  python3 - "$d/e4/meta.txt" <<'PY'
import sys
p = sys.argv[1]; lines = open(p).read().split("\n")
w = [i for i, l in enumerate(lines) if l.startswith("param blocks.0.norm.weight ")][0]
b = [i for i, l in enumerate(lines) if l.startswith("param blocks.0.norm.bias ")][0]
fw, fb = lines[w].split(), lines[b].split()
fw[5], fb[5] = fb[5], fw[5]                     # swap the offsets
lines[w], lines[b] = " ".join(fw), " ".join(fb)
open(p, "w").write("\n".join(lines))
PY
  resum "$d/e4/meta.txt"
  refused "two same-size tensors' offsets swapped" "another layout than meta.txt describes" 3 --steps 6 --resume "$d/e4"
  # two shard files swapped together with their checksum lines
  cp -r "$ck" "$d/e5"; mv "$d/e5/shard-00000.bin" "$d/e5/x"; mv "$d/e5/shard-00001.bin" "$d/e5/shard-00000.bin"; mv "$d/e5/x" "$d/e5/shard-00001.bin"
  python3 - "$d/e5/meta.txt" <<'PY'
import sys
p = sys.argv[1]; lines = open(p).read().split("\n")
a = [i for i, l in enumerate(lines) if l.startswith("file shard-00000.bin ")][0]
b = [i for i, l in enumerate(lines) if l.startswith("file shard-00001.bin ")][0]
ca, cb = lines[a].split()[-1], lines[b].split()[-1]
lines[a] = lines[a].rsplit(" ", 1)[0] + " " + cb
lines[b] = lines[b].rsplit(" ", 1)[0] + " " + ca
open(p, "w").write("\n".join(lines))
PY
  resum "$d/e5/meta.txt"
  refused "two shard files swapped with their checksum lines" "holds rank 1 of 3's shard, but meta.txt lists it as rank 0" 3 --steps 6 --resume "$d/e5"
  # a shard file from the step-2 checkpoint of the same run, its checksum line updated
  cp -r "$ck" "$d/e6"; cp "$d/ck/step-00000002/shard-00002.bin" "$d/e6/"
  python3 - "$d/e6/meta.txt" "$d/e6/shard-00002.bin" <<'PY'
import sys, zlib
p, shard = sys.argv[1], sys.argv[2]; lines = open(p).read().split("\n")
i = [i for i, l in enumerate(lines) if l.startswith("file shard-00002.bin ")][0]
lines[i] = lines[i].rsplit(" ", 1)[0] + " %08x" % zlib.crc32(open(shard, "rb").read())
open(p, "w").write("\n".join(lines))
PY
  resum "$d/e6/meta.txt"
  refused "a shard file from another checkpoint" "was written at step 2" 3 --steps 6 --resume "$d/e6"
  refused "--resume with another --batch" "trained with --batch 12, this run has --batch 24" 3 --steps 6 --resume "$ck" --batch 24
  refused "--resume with another --context" "different model" 3 --steps 6 --resume "$ck" --context 9
  printf 'the quick brown fox jumps over the lazy dog, again and again\n' >"$d/a.txt"
  printf 'THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG, AGAIN AND AGAIN\n' >"$d/b.txt"
  refused "--resume with --data, trained on the embedded corpus" "trained on the embedded corpus, this run has --data" 3 --steps 6 --resume "$ck" --data "$d/a.txt"
  timeout 60 $MPIRUN -np 3 ./fsdp $T --steps 2 --data "$d/a.txt" --save-dir "$d/ckd" >/dev/null 2>&1 || bad "could not train on a.txt"
  refused "--resume on another --data file of the same size" "other data" 3 --steps 4 --resume "$d/ckd" --data "$d/b.txt"
  refused "--resume without the --data it was trained on" "this run on the embedded corpus" 3 --steps 4 --resume "$d/ckd"
  runs_ok "--resume with the same --data file, on 2 ranks" 2 --steps 4 --resume "$d/ckd" --data "$d/a.txt"
  runs_ok "--resume the untouched checkpoint on 1 rank (resharding 3 -> 1 still loads)" 1 --steps 6 --resume "$ck"
}

numbers() {
  command -v python3 >/dev/null || { echo "python3 is needed to write a file with NaN (apt-get install python3)"; exit 77; }
  timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 2 --export "$d/good.st" >/dev/null 2>&1 || bad "could not export"
  python3 - "$d/good.st" "$d/nan.st" "$d/inf.st" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def poison(path, name, index, value):
    b = bytearray(raw)
    at = 8 + n + head[name]["data_offsets"][0] + 4 * index
    b[at:at + 4] = struct.pack("<f", value)
    open(path, "wb").write(b)
cols = head["blocks.1.fc1.weight"]["shape"][1]
poison(sys.argv[2], "blocks.1.fc1.weight", 2 * cols + 5, float("nan"))
poison(sys.argv[3], "head.bias", 7, float("inf"))
PY
  refused "--init-from a file holding NaN (3 ranks)" "blocks.1.fc1.weight[2, 5] is nan" 3 --steps 2 --init-from "$d/nan.st"
  refused "--init-from a file holding Inf (1 rank)" "head.bias[7] is inf" 1 --steps 2 --init-from "$d/inf.st"
  local out rc
  out=$(timeout 60 $MPIRUN -np 2 ./fsdp --model tiny --batch 12 --steps 100 --lr 10 --save-dir "$d/ck" --save-every 1 2>&1); rc=$?
  if [ $rc -eq 5 ] && grep -q "^error: the loss is [-a-z]* at step [0-9]*: training diverged" <<<"$out" && grep -q "lower --lr" <<<"$out" \
     && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ]; then
    ok "--lr 10: exit 5 at the first non-finite loss: $(grep '^error:' <<<"$out" | cut -c1-80)"
  else
    bad "--lr 10: exit $rc"; tail -4 <<<"$out"
  fi
  local step; step=$(grep -o 'at step [0-9]*' <<<"$out" | grep -o '[0-9]*')
  [ -n "$step" ] && [ ! -d "$d/ck/$(printf 'step-%08d' "$step")" ] && ok "... and no checkpoint of the diverged step $step was saved" \
    || bad "a checkpoint of the diverged step exists: $(ls "$d/ck" 2>&1)"
}

messages() {
  local out rc
  out=$(timeout 60 $MPIRUN -np 4 ./fsdp $T --steps 2 --vram 1K 2>&1); rc=$?
  [ $rc -eq 3 ] && [ "$(grep -c 'simulated CUDA out of memory' <<<"$out")" -eq 1 ] && grep -q "budget 1.00 KiB per rank" <<<"$out" \
    && ! grep -q "0.00 MiB" <<<"$out" && ok "--vram 1K on 4 ranks: exit 3, one report, in KiB: $(grep -m1 'tried' <<<"$out" | cut -c1-100)" \
    || { bad "--vram 1K: exit $rc, $(grep -c 'simulated CUDA out of memory' <<<"$out") reports"; head -12 <<<"$out"; }
  runs_ok "--vram 1P, the top of the range the message names" 2 --steps 2 --vram 1P
  out=$(timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 1 --vram 200K 2>&1)
  grep -q "simulated VRAM: 200.00 KiB per rank" <<<"$out" && ok "--vram 200K is shown as 200.00 KiB" \
    || bad "--vram 200K shown as: $(grep 'simulated VRAM' <<<"$out")"
  refused "a path of 1001 characters" "the path is 1001 characters long" 2 --export "$(printf 'a%.0s' $(seq 1001))"
  refused "--beta1 0.99999999999" "0.99999999999 is out of range" 2 --beta1 0.99999999999
  timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 2 --save-dir "$d/ck" >/dev/null 2>&1 || bad "could not make a checkpoint"
  cp -r "$d/ck/step-00000002" "$d/mdir"; rm "$d/mdir/meta.txt"; mkdir "$d/mdir/meta.txt"
  refused "meta.txt that is a directory" "meta.txt: is a directory" 2 --steps 4 --resume "$d/mdir"
  echo x >"$d/afile"
  refused "--resume of a file" "is a regular file, not a directory" 2 --steps 4 --resume "$d/afile"
  cp -r "$d/ck/step-00000002" "$d/step-00000007"
  refused "a step-N/ (trailing slash) whose meta.txt says another step" "says step 2, but its directory is step 7" 2 \
    --steps 9 --resume "$d/step-00000007/"
  out=$(timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 1 --resume "$d/ck" --trace "$d/t.json" 2>&1); rc=$?
  if [ $rc -eq 0 ] && python3 -c 'import json,sys; h=json.load(open(sys.argv[1]))["otherData"]["fsdp"]; sys.exit(not(h["final_loss"] is None and h["steps"]==0))' "$d/t.json"; then
    ok "a resume with nothing left to train: the trace says final_loss null, steps 0"
  else
    bad "nothing-to-train trace: exit $rc, header $(head -c 300 "$d/t.json" 2>&1)"
  fi
}

"$SECTION"
exit $fail
