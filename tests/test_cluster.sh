#!/usr/bin/env bash
# The multi-node launch files in cluster/: the Slurm batch script, the
# Kubeflow MPIJob manifest and the Open MPI hostfile. Nothing here runs on a
# cluster; the checks are that each file parses as what it claims to be, that
# all three describe the same job (2 nodes x 8 GPUs = 16 ranks, one per GPU),
# and that every flag they pass to ./fsdp-gpu is one the program has.
# Exits 77 (skipped) only when no YAML parser can be had, and then only if
# every other check passed.
set -u
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
SBATCH=cluster/fsdp.sbatch MPIJOB=cluster/mpijob.yaml HOSTFILE=cluster/hostfile.example

# ---- the flags ./fsdp --help lists -------------------------------------------------
[ -x ./fsdp ] || make -s fsdp >/dev/null || { echo "FAIL: cannot build ./fsdp"; exit 1; }
help=$(./fsdp --help 2>&1)
# A help line that starts a flag: "  --steps N   optimizer steps"; the part
# before the first run of two spaces names it ("--beta1 X --beta2 X" two).
known_flags=$(echo "$help" | awk '/^  +--/ {sub(/^ +/, ""); split($0, p, /   */); print p[1]}' |
  grep -oE -- '--[a-z0-9-]+' | sort -u)
# The GPU build's own options, which the CPU build's help does not list (yet):
# --collectives nccl (NCCL on the GPUs) and --tf32. Accepted here by name;
# drop them from these two lines once `./fsdp --help` lists them.
gpu_only_flags="--tf32"
gpu_only_values="--collectives=nccl"

check_fsdp_args() { # check_fsdp_args WHERE ARG...: each flag known, each choice a listed one
  local where=$1; shift
  [ $# -gt 0 ] || { bad "$where: no arguments after ./fsdp-gpu found"; return; }
  local n=0 errors=0 arg flag value line
  while [ $# -gt 0 ]; do
    arg=$1; shift
    case $arg in
      --*) ;;
      *) bad "$where: '$arg' after ./fsdp-gpu is not a flag"; errors=$((errors + 1)); continue ;;
    esac
    flag=${arg%%=*} value=""
    if [ "$flag" != "$arg" ]; then value=${arg#*=}
    elif [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then value=$1; shift; fi
    n=$((n + 1))
    if [[ " $gpu_only_flags " == *" $flag "* ]] || [ "$flag=$value" = "$gpu_only_values" ]; then
      echo "note: $where: $flag${value:+ $value} is the GPU build's, accepted by name"
      continue
    fi
    if ! echo "$known_flags" | grep -qxF -- "$flag"; then
      bad "$where: $flag is not a flag ./fsdp --help lists"; errors=$((errors + 1)); continue
    fi
    # a flag whose help line offers choices (a | b | c): the value is one of them
    line=$(echo "$help" | grep -E -- "^ +$flag( |=|$)" | head -1)
    if [[ $line == *" | "* ]] && [ -n "$value" ]; then
      echo "$line" | grep -qwF -- "$value" ||
        { bad "$where: $flag $value: not a choice --help lists: $line"; errors=$((errors + 1)); }
    fi
  done
  [ $errors -eq 0 ] && ok "$where: all $n flags after ./fsdp-gpu are ./fsdp --help's"
}

# Lines with their backslash continuations joined; a comment's continuation
# lines lose their leading '#' too.
joined() { sed -e ':a' -e '/\\$/N; s/\\\n#\{0,1\} */ /; ta' "$1"; }
# The words after ./fsdp-gpu in a command line.
after_binary() { echo "$1" | sed -n 's|.*\./fsdp-gpu||p'; }

# ---- cluster/fsdp.sbatch ---------------------------------------------------------------
bash -n "$SBATCH" && ok "bash -n $SBATCH" || bad "bash -n $SBATCH: syntax error"

# Every #SBATCH line is "#SBATCH --name" or "#SBATCH --name=value" with a name
# sbatch knows (the ones a GPU job uses). A typo there is not an error to
# sbatch's reader of comments; it would be silently a different job.
known_sbatch="job-name nodes ntasks ntasks-per-node gpus gpus-per-node gpus-per-task gres
  cpus-per-task cpus-per-gpu mem mem-per-cpu mem-per-gpu time output error partition account
  qos constraint exclusive reservation mail-type mail-user signal requeue chdir array"
n_sbatch=0
while IFS= read -r line; do
  n_sbatch=$((n_sbatch + 1))
  if [[ $line =~ ^#SBATCH\ --([a-z-]+)(=[^[:space:]]+)?$ ]]; then
    echo "$known_sbatch" | tr -s ' ' '\n' | grep -qxF -- "${BASH_REMATCH[1]}" ||
      bad "$SBATCH: '$line': --${BASH_REMATCH[1]} is not an sbatch option this test knows"
  else
    bad "$SBATCH: '$line' is not '#SBATCH --name[=value]'"
  fi
done < <(grep -E '^#SBATCH' "$SBATCH")
[ $n_sbatch -gt 0 ] || bad "$SBATCH: no #SBATCH lines"
# sbatch reads #SBATCH lines only up to the first command: none may come after it.
first_cmd=$(grep -nvE '^[[:space:]]*(#|$)' "$SBATCH" | head -1 | cut -d: -f1)
last_sbatch=$(grep -nE '^#SBATCH' "$SBATCH" | tail -1 | cut -d: -f1)
[ -n "$first_cmd" ] && [ -n "$last_sbatch" ] && [ "$last_sbatch" -lt "$first_cmd" ] &&
  ok "$SBATCH: $n_sbatch #SBATCH lines, known options, all before the first command" ||
  bad "$SBATCH: #SBATCH on line $last_sbatch, after the first command (line $first_cmd): ignored"

sbatch_opt() { sed -n "s/^#SBATCH --$1=//p" "$SBATCH" | tail -1; }
nodes=$(sbatch_opt nodes) tasks=$(sbatch_opt ntasks-per-node) gpus=$(sbatch_opt gpus-per-node)
[[ $nodes =~ ^[0-9]+$ && $tasks =~ ^[0-9]+$ ]] &&
  ok "$SBATCH: --nodes=$nodes, --ntasks-per-node=$tasks" ||
  bad "$SBATCH: --nodes '$nodes' and --ntasks-per-node '$tasks' must both be numbers"
[ -n "$tasks" ] && [ "$tasks" = "$gpus" ] &&
  ok "$SBATCH: one rank per GPU (--ntasks-per-node = --gpus-per-node = $gpus)" ||
  bad "$SBATCH: --ntasks-per-node '$tasks' differs from --gpus-per-node '$gpus': one rank per GPU"

# The launch line, as the script would run it: FSDP_DRY_RUN prints it instead.
grep -qE '^[^#]*srun --mpi=pmix' "$SBATCH" && grep -qE '^[^#]*\./fsdp-gpu' "$SBATCH" &&
  ok "$SBATCH launches with srun --mpi=pmix ./fsdp-gpu" ||
  bad "$SBATCH: no 'srun --mpi=pmix' ... './fsdp-gpu' command"
srun_line=$(FSDP_DRY_RUN=1 bash "$SBATCH" 2>&1 | grep -E '^srun ')
[[ $srun_line == "srun --mpi=pmix "*" ./fsdp-gpu "* ]] && ok "dry run: $srun_line" ||
  bad "FSDP_DRY_RUN=1 bash $SBATCH printed no 'srun --mpi=pmix ... ./fsdp-gpu' line: '$srun_line'"
read -r -a args <<< "$(after_binary "$srun_line")"
check_fsdp_args "$SBATCH" "${args[@]}"
over=$(FSDP_DRY_RUN=1 FSDP_ARGS="--model tiny --steps 3" bash "$SBATCH" 2>&1 | grep -E '^srun ')
[[ $over == *"./fsdp-gpu --model tiny --steps 3" ]] &&
  ok "$SBATCH: FSDP_ARGS replaces the arguments" ||
  bad "$SBATCH: FSDP_ARGS='--model tiny --steps 3' gave '$over'"

if command -v shellcheck >/dev/null 2>&1; then
  shellcheck "$SBATCH" && ok "shellcheck $SBATCH: clean" || bad "shellcheck $SBATCH: see above"
else
  echo "note: shellcheck is not installed, so it was not run (informational;" \
       "apt-get install shellcheck)"
fi

# ---- cluster/hostfile.example -------------------------------------------------------------
slots=0 hosts=0
while read -r host rest; do
  [ -z "$host" ] && continue
  if [[ $rest =~ ^slots=([0-9]+)$ ]]; then
    hosts=$((hosts + 1)) slots=$((slots + BASH_REMATCH[1]))
  else
    bad "$HOSTFILE: '$host $rest' is not 'NAME slots=N'"
  fi
done < <(sed 's/#.*//' "$HOSTFILE")
[ $hosts -gt 0 ] && ok "$HOSTFILE: $hosts nodes, $slots slots" ||
  bad "$HOSTFILE: no 'NAME slots=N' lines"
host_cmd=$(joined "$HOSTFILE" | grep -E '^#.*mpirun .*\./fsdp-gpu' | head -1 | sed 's/^# *//')
host_np=$(echo "$host_cmd" | sed -n 's/.*mpirun -np \([0-9]*\) .*/\1/p')
[[ $host_cmd == *"--hostfile $HOSTFILE"* ]] && [ "$host_np" = "$slots" ] &&
  ok "$HOSTFILE: its mpirun line's -np $host_np is the sum of the slots" ||
  bad "$HOSTFILE: the mpirun line ('$host_cmd') must use --hostfile $HOSTFILE and -np $slots"
read -r -a args <<< "$(after_binary "$host_cmd")"
check_fsdp_args "$HOSTFILE" "${args[@]}"

# ---- cluster/Dockerfile (the image the MPIJob names) --------------------------------------
if grep -qE '^FROM nvidia/cuda:[0-9.]+-devel-' cluster/Dockerfile &&
   grep -qE '^RUN .*make gpu' cluster/Dockerfile; then
  ok "cluster/Dockerfile: FROM a CUDA devel image (nvcc, cuBLAS, NCCL), RUN make gpu"
else
  bad "cluster/Dockerfile: expected 'FROM nvidia/cuda:X-devel-...' and a 'RUN ... make gpu' line"
fi

# ---- cluster/mpijob.yaml -------------------------------------------------------------------
have_yaml() { python3 -c 'import yaml' 2>/dev/null; }
yaml_missing=""
if ! command -v python3 >/dev/null 2>&1; then
  yaml_missing="python3 not found (apt-get install python3)"
elif ! have_yaml; then
  echo "PyYAML is missing; installing it"
  python3 -m pip install --quiet pyyaml >/dev/null 2>&1 ||
    python3 -m pip install --quiet --break-system-packages pyyaml >/dev/null 2>&1 ||
    { command -v apt-get >/dev/null 2>&1 && SUDO="" && { [ "$(id -u)" = 0 ] || SUDO=sudo; } &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-yaml >/dev/null 2>&1; }
  have_yaml ||
    yaml_missing="PyYAML could not be installed (pip install pyyaml, or apt-get install python3-yaml)"
fi

if [ -z "$yaml_missing" ]; then
  # Python reads the manifest and prints ok:/FAIL: lines like ours, then
  # "ranks N" and "command ..." for the checks that follow.
  yaml_out=$(python3 - "$MPIJOB" <<'EOF'
import shlex, sys, yaml
path = sys.argv[1]
def ok(m): print("ok: %s: %s" % (path, m))
def bad(m): print("FAIL: %s: %s" % (path, m))
try:
    docs = list(yaml.safe_load_all(open(path)))
except yaml.YAMLError as e:
    bad("not YAML: %s" % e); sys.exit(0)
if len(docs) != 1 or not isinstance(docs[0], dict):
    bad("expected one YAML document, a mapping; found %d documents" % len(docs)); sys.exit(0)
ok("parses as YAML")
job = docs[0]
def get(d, *keys):  # get(job, "spec", "slotsPerWorker"), None where a key is missing
    for k in keys:
        if isinstance(d, dict) and k in d: d = d[k]
        elif isinstance(d, list) and isinstance(k, int) and k < len(d): d = d[k]
        else: return None
    return d
if job.get("apiVersion") == "kubeflow.org/v2beta1" and job.get("kind") == "MPIJob":
    ok("apiVersion kubeflow.org/v2beta1, kind MPIJob")
else:
    bad("apiVersion %r, kind %r: expected kubeflow.org/v2beta1, MPIJob"
        % (job.get("apiVersion"), job.get("kind")))
slots = get(job, "spec", "slotsPerWorker")
policy = get(job, "spec", "runPolicy", "cleanPodPolicy")
(ok if policy == "Running" else bad)("spec.runPolicy.cleanPodPolicy %r (expected Running)" % policy)
spec = get(job, "spec", "mpiReplicaSpecs") or {}
launchers, workers = get(spec, "Launcher", "replicas"), get(spec, "Worker", "replicas")
(ok if launchers == 1 else bad)("Launcher replicas %r (expected 1)" % launchers)
if not (isinstance(workers, int) and workers > 0 and isinstance(slots, int) and slots > 0):
    bad("Worker replicas %r and spec.slotsPerWorker %r must be positive integers"
        % (workers, slots))
    sys.exit(0)
ok("%d workers x slotsPerWorker %d" % (workers, slots))
wc = get(spec, "Worker", "template", "spec", "containers", 0) or {}
gpu = get(wc, "resources", "limits", "nvidia.com/gpu")
(ok if gpu == slots else bad)("worker limits nvidia.com/gpu %r, slotsPerWorker %d: one rank per GPU"
                              % (gpu, slots))
lc = get(spec, "Launcher", "template", "spec", "containers", 0) or {}
lgpu = (get(lc, "resources", "limits", "nvidia.com/gpu")
        or get(lc, "resources", "requests", "nvidia.com/gpu"))
(ok if not lgpu else bad)("the launcher asks for %s GPUs (it only runs mpirun)" % (lgpu or "no"))
vols = get(spec, "Worker", "template", "spec", "volumes") or []
mem = [v["name"] for v in vols if isinstance(v, dict) and get(v, "emptyDir", "medium") == "Memory"]
mounts = [m for m in (wc.get("volumeMounts") or [])
          if m.get("name") in mem and m.get("mountPath") == "/dev/shm"]
(ok if mounts else bad)("worker /dev/shm is %s" % ("an emptyDir in memory, for NCCL" if mounts else
                                                   "not an emptyDir with medium Memory"))
for name, c in (("Launcher", lc), ("Worker", wc)):
    if not c.get("image"): bad("%s container has no image" % name)
cmd = (lc.get("command") or []) + (lc.get("args") or [])
if len(cmd) >= 3 and cmd[0] in ("bash", "/bin/bash", "sh", "/bin/sh") and cmd[1] == "-c":
    cmd = shlex.split(cmd[2])  # a shell line instead of a list
cmd = [str(w) for w in cmd]
if not cmd or cmd[0] != "mpirun":
    bad("the launcher's command is %r, not mpirun" % " ".join(cmd)); sys.exit(0)
np_ = cmd[cmd.index("-np") + 1] if "-np" in cmd[:-1] else None
(ok if np_ == str(workers * slots) else bad)(
    "mpirun -np %s, workers x slotsPerWorker = %d x %d = %d" % (np_, workers, slots, workers * slots))
runs = "./fsdp-gpu" in cmd
(ok if runs else bad)("the launcher's mpirun %s ./fsdp-gpu" % ("runs" if runs else "does not run"))
print("ranks %d" % (workers * slots))
print("command " + " ".join(cmd))
EOF
)
  echo "$yaml_out" | grep -vE '^(ranks|command) '
  echo "$yaml_out" | grep -q '^FAIL' && fail=1
  job_ranks=$(echo "$yaml_out" | sed -n 's/^ranks //p')
  job_cmd=$(echo "$yaml_out" | sed -n 's/^command //p')
  if [ -n "$job_cmd" ]; then
    read -r -a args <<< "$(after_binary "$job_cmd")"
    check_fsdp_args "$MPIJOB" "${args[@]}"
  fi
else
  echo "note: $MPIJOB not checked: $yaml_missing"
fi

# ---- the three describe the same job ---------------------------------------------------------
sb_ranks=$(( ${nodes:-0} * ${tasks:-0} ))
if [ -n "$yaml_missing" ]; then
  [ "$sb_ranks" = "$slots" ] && ok "Slurm $nodes x $tasks = hostfile $slots slots (MPIJob not read)" ||
    bad "the files disagree: Slurm $nodes x $tasks = $sb_ranks ranks, hostfile $slots slots"
else
  [ "$sb_ranks" = "$slots" ] && [ "${job_ranks:-}" = "$slots" ] &&
    ok "the same job everywhere: Slurm $nodes x $tasks, hostfile $slots slots," \
       "MPIJob $job_ranks ranks" ||
    bad "the files disagree: Slurm $nodes x $tasks = $sb_ranks ranks, hostfile $slots slots," \
        "MPIJob ${job_ranks:-?} ranks"
fi

if [ -n "$yaml_missing" ]; then
  [ $fail -eq 0 ] || exit 1
  echo "skipped: $MPIJOB could not be parsed here: $yaml_missing"
  exit 77
fi
exit $fail
