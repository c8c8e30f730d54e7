#!/usr/bin/env bash
# tests/test_files.sh SECTION — every file fsdp.c reads or writes is handled
# safely. One section per promise (run.sh runs each as its own test):
#
#   outputs      an output never replaces what is not a regular file of ours
#                (a device, a named pipe, a symbolic link, a directory, a
#                checkpoint directory that is a link), two outputs (or an
#                output and an input) never share a path; the config.json a
#                GPT-2's --export writes is checked as such an output before
#                step 1; --export DIR writes DIR/model.safetensors (and
#                config.json), as save_pretrained(DIR)
#   failures     a failed write, fsync or close (injected by tests/failio.so)
#                is a message and a non-zero exit on every rank, and leaves
#                no partial file under the final name; a GPT-2's weights and
#                config.json are replaced both or neither (a failed rename
#                of the second puts the first back)
#   inputs       a reader never blocks or reads without bound: a named pipe,
#                a link to /dev/zero or /dev/urandom, a directory, for every
#                file fsdp.c reads, is refused by name within seconds; a
#                --data file truncated while training is a message, exit 2,
#                and so is a --data or --val-data file rewritten in place;
#                --init-from DIR reads DIR/model.safetensors, and a
#                directory without it is refused naming what it holds
#   checkpoints  an edited checkpoint is refused: meta.txt's own checksum,
#                its step against the directory and the shard headers,
#                adam_step <= step, adam_step and the loss scale against the
#                shard headers, a denormal scale, swapped offsets, swapped
#                shard files, a shard from another checkpoint; --resume with
#                other data, batch, context, optimizer settings or formats;
#                a .tmp-step-N or step-N a save needs, refused before step 1
#   numbers      NaN or Inf in --init-from is refused by name (at the file's
#                index: a Hugging Face Conv1D weight's is (in, out)), and so
#                is a value beyond fp16 under --param-dtype fp16; a loss
#                that stops being a number ends the run with exit 5, and at
#                a run's first step its hint names the checkpoint or
#                --init-from file the parameters came from, not --lr
#   messages     sizes in units that show them, once; 1P; the value as typed;
#                meta.txt that is a directory; --resume of a file; a trace
#                of a run with nothing to train; a 1-D shape as (N); output
#                to a full disk or a closed stdout; --plan of a huge shape
#                in seconds with flat memory
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
  mkdir "$d/dir/model.safetensors" # --export DIR means DIR/model.safetensors, here a directory
  refused "--export to a directory" "model.safetensors: is a directory" 2 --steps 2 --export "$d/dir"
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
  mkdir -p "$d/out2/step-00000002"
  refused "--export into a step-N of the --save-dir" "name the same place" 2 --steps 2 --save-dir "$d/out2" \
    --export "$d/out2/step-00000002/model.st"
  # a save writes only step-N and .tmp-step-N: a file beside them is not in its way
  mkdir -p "$d/sd"; cp "$d/data.txt" "$d/sd/data.txt"
  runs_ok "--data inside the --save-dir (a save replaces nothing there)" 2 --steps 2 --data "$d/sd/data.txt" --save-dir "$d/sd"
  grep -q "some text" "$d/sd/data.txt" && [ -d "$d/sd/step-00000002" ] && ok "... the data is untouched and the checkpoint saved" \
    || bad "data or checkpoint missing: $(ls "$d/sd")"

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
  export_config
}

# A GPT-2's --export writes config.json beside the weights, as
# save_pretrained does: an output no option names, checked as --export's
# own path is, and against every other file, before step 1 (--steps
# 1000000: found after training, it would be a timeout here); the pair's
# commit is in `failures`. --export DIR (or DIR/) writes DIR/model.safetensors
# and DIR/config.json, as save_pretrained(DIR).
export_config() {
  local G="--model gpt2-tiny --steps 1000000" h="$d/hf"
  mkdir -p "$h"
  refused "--json over the config.json a GPT-2's --export writes" \
    "--export $h/x.safetensors writes config.json beside it, as save_pretrained does, to $h/config.json, which --json $h/config.json also names" \
    2 $G --export "$h/x.safetensors" --json "$h/config.json"
  cp "$d/data.txt" "$h/config.json"
  refused "--data that is the config.json --export writes" "writes config.json beside it, as save_pretrained does, over --data $h/config.json, which this run reads" \
    2 $G --export "$h/x.safetensors" --data "$h/config.json"
  grep -q "some text" "$h/config.json" && ok "... and the data is untouched" || bad "the --data file was replaced"
  python3 -c "import struct, sys
open(sys.argv[1], 'wb').write(struct.pack('<256I', 20240328, 1, 256, *[0] * 253) + b''.join(bytes([1, i]) for i in range(256)))" "$h/config.json"
  refused "--tokenizer that is the config.json --export writes" "over --tokenizer $h/config.json, which this run reads" \
    2 $G --export "$h/x.safetensors" --sample 4 --tokenizer "$h/config.json"
  [ "$(head -c 4 "$h/config.json" | od -An -tu4 | tr -d ' ')" = 20240328 ] && ok "... and the tokenizer is untouched" || bad "the tokenizer was replaced"
  rm "$h/config.json"
  refused "--export named config.json (the weights would be replaced by it)" "the weights cannot be named config.json" 2 $G --export "$h/config.json"
  mkdir "$h/config.json"
  refused "a directory named config.json where --export writes it" "but $h/config.json is a directory: fsdp.c replaces only regular files" \
    2 $G --export "$h/x.safetensors"
  rmdir "$h/config.json"; ln -s "$d/target" "$h/config.json"
  refused "a symbolic link named config.json there" "but $h/config.json is a symbolic link" 2 $G --export "$h/x.safetensors"
  [ -L "$h/config.json" ] && [ "$(cat "$d/target")" = precious ] && ok "... and the link and its target are untouched" || bad "the link or its target changed"
  rm "$h/config.json"; mkfifo "$h/config.json"
  refused "a named pipe named config.json there" "but $h/config.json is a named pipe (FIFO)" 2 $G --export "$h/x.safetensors"
  [ -p "$h/config.json" ] && ok "... and it is still a named pipe" || bad "the named pipe was replaced"
  rm "$h/config.json"
  [ -z "$(ls -A "$h")" ] && ok "no refused export left a file" || bad "left: $(ls -A "$h")"
  runs_ok "--export DIR, an existing directory, as save_pretrained(DIR)" 2 --model gpt2-tiny --steps 2 --export "$h"
  python3 - "$h" <<'PY' && ok "... wrote DIR/model.safetensors and DIR/config.json, whose bos and eos are tokens of the vocabulary" || bad "--export DIR: $(ls -A "$h")"
import json, os, sys
c = json.load(open(os.path.join(sys.argv[1], "config.json")))
assert os.path.getsize(os.path.join(sys.argv[1], "model.safetensors")) > 1000
assert 0 <= c["bos_token_id"] < c["vocab_size"] and 0 <= c["eos_token_id"] < c["vocab_size"], c
PY
  refused "--export beside the config.json --init-from reads" \
    "over --init-from's config.json $h/config.json, which this run reads. Export into another directory" \
    2 $G --init-from "$h/model.safetensors" --export "$h/y.safetensors"
  mkdir "$d/hf2"
  runs_ok "--export DIR/ (a trailing slash)" 2 --model gpt2-tiny --steps 2 --export "$d/hf2/"
  [ -f "$d/hf2/model.safetensors" ] && [ -f "$d/hf2/config.json" ] && ok "... wrote DIR/model.safetensors and DIR/config.json" || bad "--export DIR/: $(ls -A "$d/hf2")"
  refused "--export NEW/, a directory that does not exist" "the directory $d/new does not exist. Create it first (mkdir -p $d/new)" \
    2 $G --export "$d/new/"
  mkdir "$d/mlp"
  runs_ok "the byte MLP's --export DIR" 2 --steps 2 --export "$d/mlp"
  [ "$(ls -A "$d/mlp")" = model.safetensors ] && ok "... wrote DIR/model.safetensors and no config.json (it is not Hugging Face's)" \
    || bad "the MLP's --export DIR: $(ls -A "$d/mlp")"
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
  # A GPT-2's model.safetensors and config.json are committed as a pair: a
  # write, fsync or close of either that fails leaves neither (the old pair
  # as it was, or nothing in a fresh directory), and so does a rename of
  # config.json that fails after the weights' (the weights are put back).
  # What the message says is what is left.
  local fresh left says
  for op in write:config.json:ENOSPC fsync:model.safetensors:EIO close:config.json:EIO rename:config.json:EIO; do
    for fresh in 0 1; do
      rm -rf "$d/pair"; mkdir "$d/pair"
      [ $fresh = 1 ] || { echo old >"$d/pair/model.safetensors"; echo old >"$d/pair/config.json"; }
      out=$(timeout 60 $MPIRUN -np 3 -x LD_PRELOAD="$FAILIO" -x FAILIO="$op" ./fsdp $T --model gpt2-tiny --steps 2 \
        --export "$d/pair/model.safetensors" 2>&1); rc=$?
      left=$(ls -A "$d/pair" | tr '\n' ' ')
      case $op:$fresh in
        rename*:0) says="model.safetensors, written with it, was put back as it was, so neither file changed" ;;
        rename*:1) says="model.safetensors, written with it, was removed again, so neither file changed" ;;
        *) says="so neither was written: no partial file was left under either name" ;;
      esac
      if [ $rc -eq 1 ] && grep -qF "$says" <<<"$out" && grep -q "^error: --export $d/pair/[a-z.]*: writing failed (${op%%:*}" <<<"$out" &&
         if [ $fresh = 1 ]; then [ -z "$left" ]; else [ "$(cat "$d/pair/model.safetensors" "$d/pair/config.json")" = "$(printf 'old\nold')" ] &&
         [ "$left" = "config.json model.safetensors " ]; fi; then
        ok "$op, $([ $fresh = 1 ] && echo "a fresh directory: nothing left" || echo "over an old pair: both kept"): exit 1, '$(grep '^error:' <<<"$out" | cut -c8-200)...'"
      else
        bad "$op (fresh $fresh): exit $rc, left: $left, not saying '$says'"; tail -3 <<<"$out"
      fi
    done
  done
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
  refused "--tokenizer a named pipe" "--tokenizer $d/fifo: is a named pipe (FIFO)" 2 --model gpt2-tiny --steps 2 --sample 4 --tokenizer "$d/fifo"
  # --data is mapped, not copied: checked in tests/test_units (data_is_mapped).
  # So a file cut short while training faults (SIGBUS) on its vanished pages:
  # a message and exit 2, not a crash with a backtrace; also with --val-data
  # mapped beside it (a second watch once left the first's fault unhandled,
  # and the rank spun on it for ever)
  head -c 100000 /dev/urandom >"$d/val.txt"
  shrinks "" --model tiny
  shrinks " beside --val-data" --model gpt2-tiny --val-data "$d/val.txt" --val-every 100000000
  # ... and one rewritten in place at the same size faults nothing: its
  # tokens past the vocabulary once crashed the ranks (SIGSEGV) in the
  # embedding; every batch's tokens are checked as they are drawn
  python3 -c "import struct, sys
n = 200000
open(sys.argv[1], 'wb').write(struct.pack('<256i', 20240520, 1, n, *[0] * 253)
                              + struct.pack('<%dH' % n, *[i * 7 % 256 for i in range(n)]))" "$d/tok.bin"
  head -c 200000 /dev/zero | tr '\0' '0' >"$d/low.txt" # bytes below 64
  rewrites --data tok.bin --model gpt2-tiny
  rewrites --val-data tok.bin --model gpt2-tiny --data "$d/tok.bin" --val-every 1
  rewrites --data low.txt --model gpt2-tiny --vocab 64
  init_dir
}
rewrites() { # rewrites FLAG FILE FLAGS...: FILE's tokens become 0xffff mid-run, same size: exit 2
  local flag=$1 f=$d/rw-$2 out rc pid i; shift
  cp "$d/$1" "$f"; shift
  timeout 60 $MPIRUN -np 2 ./fsdp "$@" --batch 4 --steps 50000000 --log-every 1000 "$flag" "$f" \
    >"$d/rw.log" 2>&1 &
  pid=$!
  for i in $(seq 1 100); do grep -q '^step' "$d/rw.log" && break; sleep 0.2; done
  local keep=0 # a token file's 1024-byte header stays; a text file's every byte changes
  [ "${f%.bin}" != "$f" ] && keep=1024
  head -c $(($(stat -c %s "$f") - keep)) /dev/zero | tr '\0' '\377' |
    dd of="$f" bs=1024 seek=$((keep / 1024)) conv=notrunc status=none
  cmp -s <(stat -c %s "$f") <(stat -c %s "$d/${f#"$d/rw-"}") || bad "the rewrite changed $f's size"
  wait $pid; rc=$?
  out=$(cat "$d/rw.log")
  local what="$flag $(basename "$f") rewritten in place while training ($*)"
  if [ $rc -eq 2 ] && grep -q "^error: $flag $f: the file changed while this run was reading it (token" <<<"$out" \
     && grep -q "^HINT:" <<<"$out" && ! grep -qiE "backtrace|signal|core dumped" <<<"$out"; then
    ok "$what: exit 2, $(grep -m1 '^error:' <<<"$out" | cut -c1-150)"
  else
    bad "$what: exit $rc (124 = hang), wanted 2 and a message"; tail -6 <<<"$out"
  fi
}

# --init-from DIR reads DIR/model.safetensors and its config.json, as
# from_pretrained(DIR) does; a directory without one is refused naming the
# file it lacks, and what it holds instead.
init_dir() {
  local out rc
  mkdir -p "$d/hfd" "$d/other"
  timeout 60 $MPIRUN -np 2 ./fsdp $T --model gpt2-tiny --steps 0 --export "$d/hfd" >/dev/null 2>&1 || bad "could not export GPT-2"
  out=$(timeout 60 $MPIRUN -np 2 ./fsdp $T --model gpt2-tiny --steps 2 --init-from "$d/hfd" 2>&1); rc=$?
  [ $rc -eq 0 ] && grep -q "^initialised from $d/hfd/model.safetensors$" <<<"$out" \
    && ok "--init-from DIR: exit 0, initialised from DIR/model.safetensors" || { bad "--init-from DIR: exit $rc"; tail -3 <<<"$out"; }
  refused "--init-from DIR reads DIR/config.json too" "--init-from $d/hfd/model.safetensors: its config.json says n_head 2, but this run has --n-head 4" \
    2 --model gpt2-tiny --steps 2 --n-head 4 --init-from "$d/hfd/"
  refused "--init-from a directory without model.safetensors" \
    "--init-from $d/other: is a directory without $d/other/model.safetensors, the file from_pretrained($d/other) reads" \
    2 --steps 2 --init-from "$d/other"
  cp "$d/hfd/model.safetensors" "$d/other/weights.safetensors"
  refused "... holding a safetensors file of another name" "Give the file it holds instead: --init-from $d/other/weights.safetensors" \
    2 --model gpt2-tiny --steps 2 --init-from "$d/other"
  echo '{}' >"$d/other/model.safetensors.index.json"
  refused "... holding a sharded checkpoint" "is a directory holding a sharded checkpoint ($d/other/model.safetensors.index.json)" \
    2 --model gpt2-tiny --steps 2 --init-from "$d/other"
}
shrinks() { # shrinks WHAT FLAGS...: --data cut short mid-run, exit 2 with the message
  local what=$1 out rc pid i; shift
  head -c 16000000 /dev/urandom >"$d/big.dat"
  timeout 120 $MPIRUN -np 2 ./fsdp "$@" --batch 4 --steps 50000000 --log-every 1000 --data "$d/big.dat" >"$d/trunc.log" 2>&1 &
  pid=$!
  for i in $(seq 1 100); do grep -q '^step' "$d/trunc.log" && break; sleep 0.2; done
  truncate -s 100 "$d/big.dat"
  wait $pid; rc=$?
  out=$(cat "$d/trunc.log")
  if [ $rc -eq 2 ] && grep -q "^error: --data $d/big.dat: the file changed while this run was reading it (it shrank" <<<"$out" \
     && grep -q "^HINT:" <<<"$out" && ! grep -qiE "backtrace|signal|core dumped" <<<"$out"; then
    ok "--data truncated while training$what: exit 2, $(grep -m1 '^error:' <<<"$out" | cut -c1-120)"
  else
    bad "--data truncated while training$what: exit $rc (124 = hang), wanted 2 and a message"; tail -6 <<<"$out"
  fi
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
  # a plausible adam_step (bias correction off by one step), checksum recomputed
  cp -r "$ck" "$d/e3b"; sed -i 's/^adam_step 4$/adam_step 3/' "$d/e3b/meta.txt"; resum "$d/e3b/meta.txt"
  refused "a lower adam_step, checksum recomputed: the shard headers say 4" \
    "was written with adam_step 4 and loss scale 00000000 (growth 0), but meta.txt says adam_step 3" 3 --steps 6 --resume "$d/e3b"
  timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 2 --grad-scaler --save-dir "$d/cks" >/dev/null 2>&1 || bad "could not save with --grad-scaler"
  cp -r "$d/cks/step-00000002" "$d/e3c"; sed -i 's/^grad_scaler scale [0-9a-f]* /grad_scaler scale 00000001 /' "$d/e3c/meta.txt"
  resum "$d/e3c/meta.txt"
  refused "a denormal loss scale, checksum recomputed" "grad_scaler scale 00000001 is not a positive normal float" 2 \
    --steps 4 --grad-scaler --resume "$d/e3c"
  cp -r "$d/cks/step-00000002" "$d/e3d"; sed -i 's/^grad_scaler scale 47800000 /grad_scaler scale 47000000 /' "$d/e3d/meta.txt"
  resum "$d/e3d/meta.txt"
  refused "a halved loss scale, checksum recomputed: the shard headers say 47800000" "loss scale 47800000 (growth 2)" 2 \
    --steps 4 --grad-scaler --resume "$d/e3d"
  # the optimizer's settings and formats: the state belongs to the ones it was trained with
  local flags
  while IFS='|' read -r flags frag; do
    # shellcheck disable=SC2086  # flags is a list
    refused "--resume with $flags" "$frag" 3 --steps 6 --resume "$ck" $flags </dev/null # mpirun reads stdin
  done <<'CASES'
--optimizer adam|trained with --optimizer adamw, this run has --optimizer adam
--weight-decay 0.1|trained with --weight-decay 0.01, this run has --weight-decay 0.1: the optimizer's state belongs to the first setting. Give --weight-decay 0.01 to continue
--beta1 0.8|trained with --beta1 0.9, this run has --beta1 0.8
--beta2 0.99|trained with --beta2 0.999, this run has --beta2 0.99
--eps 1e-6|trained with --eps 1e-08, this run has --eps 1e-06
--clip-grad-norm 1|trained with --clip-grad-norm off, this run has --clip-grad-norm 1: the optimizer's state belongs to the first setting. Leave out --clip-grad-norm
--param-dtype bf16|trained with --param-dtype fp32, this run has --param-dtype bf16
--reduce-dtype bf16|trained with --reduce-dtype fp32, this run has --reduce-dtype bf16
CASES
  runs_ok "--resume with the same settings given explicitly" 3 --steps 6 --resume "$ck" --weight-decay 0.01 --beta1 0.9 --eps 1e-8
  # the names a save needs, checked before step 1 rather than after training
  mkdir -p "$d/tk/.tmp-step-00000002"; echo "my notes" >"$d/tk/.tmp-step-00000002/notes.txt"
  local t0=$SECONDS
  refused "a .tmp-step-N of someone else's files where a save will go" \
    ".tmp-step-00000002 is in the way of the checkpoint saved after step 2: it is a directory of files fsdp.c did not write" \
    2 --steps 1000000 --save-every 2 --save-dir "$d/tk"
  [ $((SECONDS - t0)) -lt 20 ] && grep -q "my notes" "$d/tk/.tmp-step-00000002/notes.txt" \
    && ok "... refused in $((SECONDS - t0)) s, before training, and the notes are kept" || bad "the .tmp-step-N case took $((SECONDS - t0)) s or lost the notes"
  mkdir -p "$d/tf"; echo x >"$d/tf/.tmp-step-00000004"
  refused "a file named .tmp-step-N where the last save goes" "it is a file or link fsdp.c did not write" 2 --steps 4 --save-dir "$d/tf"
  mkdir -p "$d/tn/step-00000003"; echo x >"$d/tn/step-00000003/README"
  refused "a step-N directory without meta.txt where a save goes" "step-00000003 is in the way" 2 --steps 6 --save-every 3 --save-dir "$d/tn"
  mkdir -p "$d/tc/.tmp-step-00000002" "$d/tc/.tmp-step-00000009"; echo x >"$d/tc/.tmp-step-00000002/shard-00000.bin"
  echo x >"$d/tc/.tmp-step-00000009/notes"
  runs_ok "a crashed save's .tmp-step-N (its own files) and one no save needs are no obstacle" 2 --steps 2 --save-dir "$d/tc"
  [ -d "$d/tc/step-00000002" ] && [ -f "$d/tc/.tmp-step-00000009/notes" ] && ok "... saved, and the other one kept" || bad "tc: $(ls -a "$d/tc")"
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
  python3 - "$d/good.st" "$d/nan.st" "$d/inf.st" "$d/big.st" "$d/huge.st" <<'PY'
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
poison(sys.argv[4], "blocks.0.norm.weight", 3, 1e5)
poison(sys.argv[5], "blocks.0.norm.weight", 3, 3e38)
PY
  refused "--init-from a file holding NaN (3 ranks)" "blocks.1.fc1.weight[2, 5] is nan" 3 --steps 2 --init-from "$d/nan.st"
  refused "--init-from a file holding Inf (1 rank)" "head.bias[7] is inf" 1 --steps 2 --init-from "$d/inf.st"
  # fp16 ends at 65504: 1e5 is a number, but inf in every forward pass
  refused "--init-from a value beyond fp16 under --param-dtype fp16" \
    "blocks.0.norm.weight[3] is 100000, beyond the largest fp16 (65504): --param-dtype fp16 would compute with inf. Use --param-dtype bf16" \
    2 --steps 2 --param-dtype fp16 --grad-scaler --init-from "$d/big.st"
  runs_ok "... the same file under --param-dtype bf16" 2 --steps 2 --param-dtype bf16 --init-from "$d/big.st"
  # A diverged run: in fp32 the loss, lse less the target's logit (as
  # PyTorch's log_softmax computes it), stays a number however far --lr 10
  # throws the logits (thousands); fp16's logits overflow 65504 at once.
  local out rc
  out=$(timeout 60 $MPIRUN -np 2 ./fsdp --model tiny --batch 12 --steps 100 --lr 10 --param-dtype fp16 --grad-scaler \
    --save-dir "$d/ck" --save-every 1 2>&1); rc=$?
  if [ $rc -eq 5 ] && grep -q "^error: the loss is [-a-z]* at step [0-9]*: training diverged" <<<"$out" && grep -q "lower --lr" <<<"$out" \
     && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ]; then
    ok "--lr 10 in fp16: exit 5 at the first non-finite loss: $(grep '^error:' <<<"$out" | cut -c1-80)"
  else
    bad "--lr 10 in fp16: exit $rc"; tail -4 <<<"$out"
  fi
  local step; step=$(grep -o 'at step [0-9]*' <<<"$out" | grep -o '[0-9]*')
  [ -n "$step" ] && [ ! -d "$d/ck/$(printf 'step-%08d' "$step")" ] && ok "... and no checkpoint of the diverged step $step was saved" \
    || bad "a checkpoint of the diverged step exists: $(ls "$d/ck" 2>&1)"
  # At a run's first step no optimizer step has run: a loss that is not a
  # number comes from the parameters the run starts from, not from --lr
  # (the hint once said "lower --lr"). It names them: the checkpoint saved
  # the step before the divergence, and an --init-from file with 3e38 in it.
  local ck; ck="$d/ck/$(printf 'step-%08d' $((step - 1)))"
  starts_nan "--resume from the step before it" "the parameters checkpoint $ck holds overflow" \
    --lr 10 --param-dtype fp16 --grad-scaler --resume "$ck"
  starts_nan "--init-from a finite 3e38" "the weights --init-from $d/huge.st loaded overflow" \
    --init-from "$d/huge.st"
  # A Hugging Face file holds GPT-2's Conv1D weights (in, out), fsdp.c
  # (out, in): a bad value is named at the file's index, where the user
  # will look for it. c_attn is (32, 96) in the file, so its [20, 90] is
  # (96, 32)'s [90, 20] in fsdp.c, a row the file does not have.
  mkdir -p "$d/g"
  timeout 60 $MPIRUN -np 2 ./fsdp $T --model gpt2-tiny --steps 0 --export "$d/g/model.safetensors" >/dev/null 2>&1 \
    || bad "could not export GPT-2"
  python3 - "$d/g/model.safetensors" "$d/g/nan.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])["transformer.h.0.attn.c_attn.weight"]
assert t["shape"] == [32, 96], t["shape"]
at = 8 + n + t["data_offsets"][0] + 4 * (20 * 96 + 90)
raw[at:at + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(raw)
PY
  refused "--init-from a Hugging Face file with NaN in a Conv1D weight: the file's (in, out) index" \
    "transformer.h.0.attn.c_attn.weight[20, 90] is nan" 3 --model gpt2-tiny --steps 2 --init-from "$d/g/nan.safetensors"
}
starts_nan() { # starts_nan WHAT HINT FLAGS...: exit 5 at the run's first step, the hint naming HINT
  local what=$1 hint=$2 out rc; shift 2
  out=$(timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 100 "$@" 2>&1); rc=$?
  if [ $rc -eq 5 ] && grep -q "^error: the loss is [-a-z]* at step [0-9]*, this run's first" <<<"$out" \
     && grep -q "^HINT: .*$hint" <<<"$out" && ! grep -q "^HINT: lower --lr" <<<"$out"; then
    ok "$what: exit 5, $(grep '^HINT:' <<<"$out" | cut -c1-130)"
  else
    bad "$what: exit $rc, wanted 5 and a hint naming '$hint'"; tail -3 <<<"$out"
  fi
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
  shapes
  stdout_failures
  plan_is_flat
}

# --init-from a file whose 1-D proj_in.bias has 2 values more than the
# model's D: the shapes as PyTorch prints them, (D + 2) and (D)
shapes() {
  timeout 60 $MPIRUN -np 2 ./fsdp $T --steps 0 --export "$d/s.st" >/dev/null 2>&1 || bad "could not export"
  local D
  D=$(python3 - "$d/s.st" "$d/s130.st" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blob = {}, b""
for name, t in sorted(((k, v) for k, v in head.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0]):
    b = data[t["data_offsets"][0]:t["data_offsets"][1]]
    if name == "proj_in.bias":
        b += bytes(8); t["shape"] = [t["shape"][0] + 2]; print(t["shape"][0] - 2)
    out[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
j = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + blob)
PY
)
  refused "--init-from with a 1-D shape mismatch" "proj_in.bias has shape ($((D + 2))), but this model's is ($D)" 2 --steps 2 --init-from "$d/s130.st"
}

# What a run prints is its result (--plan's only one): output that cannot
# be written fails the run. Run as one process (MPI's singleton), since
# under mpirun a rank's stdout is a pipe to mpirun, which writes the file.
stdout_failures() {
  local out rc
  if [ -c /dev/full ]; then
    out=$(timeout 60 ./fsdp --plan --model tiny 2>&1 >/dev/full); rc=$?
    [ $rc -eq 1 ] && grep -q "^error: cannot write the standard output (No space left on device)" <<<"$out" \
      && ok "--plan > /dev/full: exit 1, $(grep '^error:' <<<"$out" | cut -c1-90)" || { bad "--plan > /dev/full: exit $rc"; tail -3 <<<"$out"; }
    out=$(timeout 60 ./fsdp --help 2>&1 >/dev/full); rc=$?
    [ $rc -eq 1 ] && grep -q "^error: cannot write the standard output" <<<"$out" && ok "--help > /dev/full: exit 1" \
      || { bad "--help > /dev/full: exit $rc"; tail -3 <<<"$out"; }
  else
    echo "skip: /dev/full is missing here (Linux has it); the closed-stdout case still runs"
  fi
  out=$(timeout 60 ./fsdp --plan --model tiny 2>&1 >&-); rc=$?
  [ $rc -eq 2 ] && grep -q "^error: the standard output is closed" <<<"$out" && ok "--plan with stdout closed: exit 2, $(grep '^error:' <<<"$out" | cut -c1-70)" \
    || { bad "--plan >&-: exit $rc"; tail -3 <<<"$out"; }
}

# --plan allocates, computes and sends nothing, whatever the shape: a batch
# of 2^20 sequences of 4096 in 1024 micro-batches is planned in seconds, in
# the memory of a small run (it once drew every micro-batch: a minute, 1 GB).
plan_is_flat() {
  local got
  got=$(python3 - <<'PY'
import resource, subprocess, time
t = time.time()
try:
    rc = subprocess.run(["./fsdp", "--plan", "--model", "tiny", "--context", "4096", "--batch", "1048576",
                         "--grad-accum", "1024"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        timeout=120).returncode
except subprocess.TimeoutExpired:
    rc = "timeout"
print(rc, round(time.time() - t, 1), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)
  local rc secs mib
  read -r rc secs mib <<<"$got"
  [ "$rc" = 0 ] && awk -v s="$secs" -v m="$mib" 'BEGIN { exit !(s < 20 && m < 200) }' \
    && ok "--plan of a 2^20 x 4096 batch in 1024 micro-batches: ${secs} s, peak RSS ${mib} MiB (< 20 s, < 200 MiB)" \
    || bad "--plan of a huge batch: exit $rc, ${secs} s, ${mib} MiB (wanted < 20 s, < 200 MiB)"
}

"$SECTION"
exit $fail
