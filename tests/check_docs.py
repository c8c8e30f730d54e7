#!/usr/bin/env python3
"""tests/check_docs.py -- run the commands a Markdown file shows, compare what they print.

    python3 tests/check_docs.py README.md docs/*.md lectures/*.md    # run and compare
    python3 tests/check_docs.py --list README.md           # print the commands only

The convention (console blocks, `$ ` lines, expected output, `...`, `<any>`,
`<!-- check: ... -->` options) is written down in docs/testing.md. In short:

    <!-- check: rel=1e-3 -->           (optional; also abs=, exit=, timeout=,
    ```console                           gpu, no-run REASON, continued)
    $ mpirun -np 4 ./fsdp
    step   200/200 | loss 0.7074 | ...
    ```

Each file runs in its own copy of the repository (tracked files and build
outputs, not .git or out/), in a fresh temporary directory, with the
environment `make` exports for mpirun; its commands run in order with bash,
and the working directory, shell variables and functions carry over from one
command to the next. One line per command: PASS, FAIL (with what differs and
the output's tail) or SKIP (with the reason); last line "N passed, N failed,
N skipped". Exit 1 on any failure, 77 if nothing ran because everything was
skipped, 0 otherwise, 2 on bad usage. TIMEOUT_SCALE=K multiplies every
command's timeout (make sanitize: 4). Python 3 standard library only.
"""
import argparse
import concurrent.futures
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpi_env():
    """What sim/mpi-env.sh sets (the Makefile exports the same), so that
    `mpirun -np 4 ./fsdp` works as root and with more ranks than cores,
    exactly as under `make test`; values already set are kept."""
    script = os.path.join(REPO, "sim", "mpi-env.sh")
    out = subprocess.run(["bash", "-c", '. "$1" && env -0', "mpi-env", script],
                         capture_output=True, check=True).stdout.decode()
    pairs = (kv.split("=", 1) for kv in out.split("\0") if "=" in kv)
    return {k: v for k, v in pairs if k.startswith(("OMPI_", "PRTE_")) or k == "MPIRUN"}


DEFAULT_TIMEOUT = 120.0


def timeout_scale():
    """TIMEOUT_SCALE, the factor on every block's timeout: make sanitize
    sets it, whose instrumented builds run the same commands slower."""
    text = os.environ.get("TIMEOUT_SCALE") or "1"
    if not text.isdigit() or int(text) < 1:
        print(f"error: TIMEOUT_SCALE={text}: give a whole number from 1 (the factor on "
              "every command's timeout), or unset it", file=sys.stderr)
        sys.exit(2)
    return int(text)


TIMEOUT_SCALE = timeout_scale()
TAIL = 15  # lines of output shown under a FAIL

# ---------------------------------------------------------------------------
# Parsing the Markdown
# ---------------------------------------------------------------------------
FENCE = re.compile(r"^( *)(`{3,}|~{3,})(.*)$")  # indented too: a block in a list item
CHECK = re.compile(r"^\s*<!--\s*check:(.*?)-->\s*$")
GAP = None  # an expected line of its own `...`: any number of output lines


class Command:
    def __init__(self, path, line, text, block):
        self.path, self.line, self.text, self.block = path, line, text, block
        self.expected = []  # (markdown line number, text) or (n, GAP)

    def comment_only(self):
        """`$ # a remark`: nothing to run, not counted."""
        return self.text.strip().startswith("#") and "\n" not in self.text.strip()

    def shown(self):
        """The command on one line, as the reports print it."""
        return re.sub(r"\\\n\s*", "", self.text).replace("\n", "; ")


class Block:
    def __init__(self, path, line):
        self.path, self.line = path, line
        self.gpu = False
        self.norun = None  # the reason, when the block is shown only
        self.exit = 0
        self.timeout = DEFAULT_TIMEOUT
        self.rel = 0.0
        self.abs = 0.0
        self.continued = False
        self.needs = None  # a program the block needs (needs=nvcc): skipped, with why, without it
        self.commands = []


KNOWN = "known: gpu, no-run REASON, exit=N, timeout=S, rel=X, abs=X, continued, needs=PROGRAM"


def parse_options(body, block, errors, where):
    """`gpu no-run exit= timeout= rel= abs= continued` from a check comment."""
    for w in body.split():
        if w == "gpu":
            block.gpu = True
        elif w == "continued":
            block.continued = True
        elif w.startswith("needs="):
            block.needs = w.split("=", 1)[1]
        elif w == "no-run":  # the rest of the comment is the reason
            block.norun = body.split("no-run", 1)[1].strip()
            if not block.norun:
                errors.append((where, "`no-run` needs a reason: <!-- check: no-run why it is not run -->"))
                block.norun = "(no reason given)"
            break
        elif w.split("=", 1)[0] in ("exit", "timeout", "rel", "abs"):
            key, value = w.split("=", 1)
            try:
                v = int(value) if key == "exit" else float(value)
            except ValueError:
                v = -1
            if not (0 <= v <= 255 if key == "exit" else v > 0 if key == "timeout" else v >= 0):
                errors.append((where, f"bad value in `{w}`"))
            else:
                setattr(block, key, v)
        else:
            errors.append((where, f"unknown check option `{w}` ({KNOWN})"))


def parse(path):
    """Console blocks of one Markdown file, and the mistakes in their markup."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, errors = [], []
    pending = None  # (line number, body) of a check comment waiting for its block
    i = 0
    while i < len(lines):
        n, line = i + 1, lines[i]
        m = FENCE.match(line)
        if not m:
            c = CHECK.match(line)
            if c:
                if pending:
                    errors.append((f"{path}:{pending[0]}", "a check comment not followed by a ```console block"))
                pending = (n, c.group(1))
            elif re.match(r"\s*<!--\s*check\b", line):
                errors.append((f"{path}:{n}", f"a check comment is one line: <!-- check: OPTIONS --> ({KNOWN})"))
            elif line.strip() and pending:
                errors.append((f"{path}:{pending[0]}", "a check comment not followed by a ```console block"))
                pending = None
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        body, j = [], i + 1
        while j < len(lines):
            close = re.match(r"^ *(`{3,}|~{3,})\s*$", lines[j])
            if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                break
            text = lines[j]
            body.append((j + 1, text[min(indent, len(text) - len(text.lstrip(" "))):]))
            j += 1
        i = j + 1
        lang = info.split()[0] if info else ""
        if lang != "console":
            if pending:
                errors.append((f"{path}:{pending[0]}", f"a check comment before a ```{lang} block: "
                                                       "only ```console blocks are run"))
            pending = None
            continue
        block = Block(path, n)
        if pending:
            parse_options(pending[1], block, errors, f"{path}:{pending[0]}")
            pending = None
        parse_body(block, body, blocks, errors)
        blocks.append(block)
    if pending:
        errors.append((f"{path}:{pending[0]}", "a check comment not followed by a ```console block"))
    return blocks, errors


def parse_body(block, body, blocks, errors):
    """`$ ` lines are commands (a trailing backslash continues one); the lines
    after a command, up to the next `$ ` line, are its expected output."""
    where = f"{block.path}:{block.line}"
    k = 0
    while k < len(body) and not body[k][1].strip():
        k += 1
    if block.continued:
        if any(t.startswith("$ ") for _, t in body):
            errors.append((where, "a `continued` block holds output only, no `$ ` line"))
            return
        if block.gpu or block.norun or block.exit or block.rel or block.abs or block.timeout != DEFAULT_TIMEOUT:
            errors.append((where, "a `continued` block takes the options of the block it continues"))
        prev = [c for b in blocks for c in b.commands]
        if not prev:
            errors.append((where, "a `continued` block with no command before it"))
            return
        cmd = prev[-1]
        cmd.expected.append((block.line, GAP))
        cmd.expected.extend(expected_lines(body[k:]))
        trim(cmd.expected)
        return
    if k < len(body) and not body[k][1].startswith("$ "):
        errors.append((f"{block.path}:{body[k][0]}", "a ```console block starts with a `$ ` command line "
                                                      "(or is marked <!-- check: continued -->)"))
        return
    cmd = None
    while k < len(body):
        n, text = body[k]
        if text.startswith("$ "):
            cmd_text = text[2:]
            while cmd_text.endswith("\\") and k + 1 < len(body):
                k += 1
                cmd_text += "\n" + body[k][1]
            cmd = Command(block.path, n, cmd_text, block)
            block.commands.append(cmd)
        else:
            cmd.expected.extend(expected_lines([body[k]]))
        k += 1
    for c in block.commands:
        trim(c.expected)
        if c.comment_only() and c.expected:
            errors.append((f"{block.path}:{c.line}", "a `$ #` remark runs nothing, so it has no output to show"))
    if not block.commands:
        errors.append((where, "an empty ```console block"))


def expected_lines(body):
    return [(n, GAP if t.strip() == "..." else t.rstrip()) for n, t in body]


def trim(expected):
    """Blank lines at either end of a command's expected output are layout."""
    while expected and expected[-1][1] is not GAP and not expected[-1][1].strip():
        expected.pop()
    while expected and expected[0][1] is not GAP and not expected[0][1].strip():
        expected.pop(0)


# ---------------------------------------------------------------------------
# Comparing one line
# ---------------------------------------------------------------------------
NUM = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
TOKEN = re.compile(r"(\.\.\.)|(<any>)|((?:(?<![\w.])-)?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(\s+)|(.)")
# A number followed by one of these is a timing or a rate: never compared.
TIME_UNIT = re.compile(r"\s*(?:tok/s|GB/s|MB/s|GiB/s|MiB/s|GFLOP/s|TFLOP/s|ms|us|µs|ns|s)(?!\w)")
_compiled = {}


def compile_line(text):
    """An expected line as a regular expression over an output line, and the
    numbers it states (compared separately, within the block's tolerance)."""
    if text in _compiled:
        return _compiled[text]
    s = text.strip()
    parts, numbers, literal = [], [], ""
    for m in TOKEN.finditer(s):
        wild, anynum, num, space, char = m.groups()
        if char is not None:
            literal += char
            continue
        if literal:
            parts.append(re.escape(literal))
            literal = ""
        if wild:
            parts.append(".*?")
        elif anynum:
            parts.append(f"(?:{NUM})")
        elif num is not None:
            if TIME_UNIT.match(s, m.end()):
                parts.append(f"(?:{NUM})")
            else:
                parts.append(f"({NUM})")
                numbers.append(num)
        else:
            parts.append(r"\s+")
    if literal:
        parts.append(re.escape(literal))
    result = (re.compile("".join(parts)), numbers)
    _compiled[text] = result
    return result


def line_matches(expected, actual, rel, abs_):
    """None when the output line matches the expected one; else why not."""
    regex, numbers = compile_line(expected)
    m = regex.fullmatch(actual.strip())
    if not m:
        return "text differs"
    for e, a in zip(numbers, m.groups()):
        ev, av = float(e), float(a)
        if abs(av - ev) > max(abs_, rel * abs(ev)):
            tol = f"rel={rel:g} abs={abs_:g}" if (rel or abs_) else "exact"
            return f"number {a} where the block shows {e} (tolerance: {tol})"
    return None


def compare(cmd, output):
    """Every expected line in order; consecutive unless a `...` line is between."""
    actual = output.split("\n")
    if actual and actual[-1] == "":
        actual.pop()
    chunks, cur = [], []
    for item in cmd.expected:
        if item[1] is GAP:
            if cur:
                chunks.append(cur)
            cur = []
        else:
            cur.append(item)
    if cur:
        chunks.append(cur)
    b = cmd.block
    pos = 0
    for chunk in chunks:
        found = None
        for start in range(pos, len(actual) - len(chunk) + 1):
            if all(line_matches(t, actual[start + k], b.rel, b.abs) is None for k, (_, t) in enumerate(chunk)):
                found = start
                break
        if found is None:
            return explain(cmd, chunk, actual, pos)
        pos = found + len(chunk)
    return None


def explain(cmd, chunk, actual, pos):
    """A unified-diff-like account of the first expected line not found."""
    b = cmd.block
    best_start, best_k = None, 0
    for start in range(pos, len(actual)):
        k = 0
        while k < len(chunk) and start + k < len(actual) and \
                line_matches(chunk[k][1], actual[start + k], b.rel, b.abs) is None:
            k += 1
        if k > best_k:
            best_start, best_k = start, k
    out = [f"--- expected ({cmd.path}:{chunk[0][0]})", "+++ output"]
    if best_start is not None:
        for n, t in chunk[:best_k][-3:]:
            out.append(f"  {t}")
        n, want = chunk[best_k]
        if best_start + best_k < len(actual):
            got = actual[best_start + best_k]
            out += [f"- {want}", f"+ {got}",
                    f"line {n} of {cmd.path}: {line_matches(want, got, b.rel, b.abs)} "
                    f"(output line {best_start + best_k + 1}; the lines before it matched)"]
        else:
            out += [f"- {want}", f"line {n} of {cmd.path}: the output ended before it"]
    else:
        n, want = chunk[0]
        rest = actual[pos:]
        close = difflib.get_close_matches(want.strip(), [a.strip() for a in rest], n=1, cutoff=0.5)
        out.append(f"- {want}")
        if close:
            i = [a.strip() for a in rest].index(close[0])
            out += [f"+ {rest[i]}", f"line {n} of {cmd.path} is not in the output; the closest line "
                                    f"(output line {pos + i + 1}, shown) differs: "
                                    f"{line_matches(want, rest[i], b.rel, b.abs)}"]
        else:
            out.append(f"line {n} of {cmd.path} is not in the output"
                       + (f" after output line {pos}" if pos else "") + ", nor anything close to it")
    return out


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------
# PyTorch lives in a virtual environment of the repository's (make torch-deps),
# never copied into a sandbox: its torchrun is put first on the commands' PATH
# alone (not its python3, which would change every other command's), and the
# sandbox's .venv-torch is a link to it (make shakespeare-gpt2 runs its
# Python by that path). First:
# a torchrun already on PATH is not the project's. Debian's python3-torch puts
# PyTorch 1.13's there, which has no --nproc-per-node (exit 2, nothing
# printed), and whose FSDP does not import on Python 3.11.
TORCH_VENV = ".venv-torch"
TORCH_BIN = os.path.join(REPO, TORCH_VENV, "bin")


def project_torchrun():
    """The repository's torchrun (.venv-torch/bin/torchrun), or None."""
    return shutil.which("torchrun", path=TORCH_BIN)


def program_here(name):
    """Whether `name` is on PATH or where the CUDA toolkit puts its tools;
    torchrun counts only as the repository's own (see TORCH_VENV)."""
    if name == "torchrun":
        return bool(project_torchrun())
    return bool(shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin"))


def missing_why(name):
    """Why a block that needs `name` is skipped here, and what to do."""
    if name != "torchrun":
        return (f"needs {name}, which is not installed here (nor in /usr/local/cuda/bin): "
                "install it to run this")
    other = shutil.which("torchrun")
    return (f"needs the project's torchrun, {TORCH_VENV}/bin/torchrun, which is not installed: "
            "make torch-deps installs PyTorch 2.x there"
            + (f" ({other} on PATH is not it, and is not used)" if other else ""))


def gpu_here(no_gpu):
    """(True, "") when an NVIDIA GPU is visible, else (False, why not);
    the same test as tests/test_gpu.sh."""
    if no_gpu:
        return False, "--no-gpu given"
    if not shutil.which("nvidia-smi"):
        return False, "nvidia-smi not found (no NVIDIA driver)"
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"nvidia-smi -L failed: {e}"
    if r.returncode != 0:
        return False, "nvidia-smi -L failed: " + (r.stdout + r.stderr).strip().split("\n")[0]
    gpus = sum(1 for l in r.stdout.split("\n") if l.startswith("GPU "))
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        gpus = min(gpus, len([v for v in vis.split(",") if v.strip() and v.strip() != "-1"]))
    return (True, "") if gpus > 0 else (False, "nvidia-smi -L lists no GPU visible here")


def repo_files():
    """What a lecture's commands see: the tracked files and the build outputs
    .gitignore names (./fsdp, tests' binaries), not .git, out/ or scratch."""
    try:
        git = ["git", "-C", REPO, "ls-files", "-z"]
        tracked = subprocess.run(git, capture_output=True, check=True).stdout
        built = subprocess.run(git + ["--others", "--ignored", "--exclude-standard"],
                               capture_output=True, check=True).stdout
        names = {p.decode() for p in (tracked + built).split(b"\0") if p}
    except (OSError, subprocess.CalledProcessError):
        names = set()
        for d, dirs, files in os.walk(REPO):
            dirs[:] = [x for x in dirs if not (d == REPO and x in (".git", "out"))]
            names |= {os.path.relpath(os.path.join(d, f), REPO) for f in files}
    return sorted(n for n in names if not n.startswith(("out/", ".git/", TORCH_VENV)))


SKIP_VARS = ("BASH*|EUID|PPID|UID|SHELLOPTS|SHLVL|PWD|OLDPWD|RANDOM|SRANDOM|SECONDS|LINENO|FUNCNAME|"
             "PIPESTATUS|DIRSTACK|GROUPS|HISTCMD|EPOCHREALTIME|EPOCHSECONDS|COLUMNS|LINES|_|OPTIND|"
             "OPTARG|IFS|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|__check*")
# Run before each command: restore the previous command's directory, variables
# and functions; save them again when the command ends, whatever its exit.
RUNNER = r"""
[ -f "$__CHECK_STATE/vars" ] && source "$__CHECK_STATE/vars" 2>/dev/null
cd "$(cat "$__CHECK_STATE/cwd")" 2>/dev/null || cd "$__CHECK_WORK"
__check_save() {
  pwd > "$__CHECK_STATE/cwd"
  { local __check_v
    for __check_v in $(compgen -v); do
      case $__check_v in (%s) ;; (*) declare -p "$__check_v" ;; esac
    done
    declare -f; } > "$__CHECK_STATE/vars" 2>/dev/null
}
trap '__check_rc=$?; __check_save; exit $__check_rc' EXIT
source "$__CHECK_STATE/cmd"
""" % SKIP_VARS


class Sandbox:
    """A fresh temporary directory holding a copy of the repository."""

    def __init__(self, files, keep):
        self.root = tempfile.mkdtemp(prefix="check_docs.")
        self.work = os.path.join(self.root, "repo")
        self.state = os.path.join(self.root, "state")
        self.keep = keep
        os.makedirs(self.state)
        for name in files:
            src, dst = os.path.join(REPO, name), os.path.join(self.work, name)
            if not os.path.lexists(src):
                continue
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.isfile(src):
                shutil.copy2(src, dst)  # keeps times, so make sees its outputs up to date
        os.makedirs(self.work, exist_ok=True)
        with open(os.path.join(self.state, "cwd"), "w") as f:
            f.write(self.work)
        with open(os.path.join(self.state, "run.sh"), "w") as f:
            f.write(RUNNER)
        self.env = dict(os.environ)
        for k, v in mpi_env().items():
            self.env.setdefault(k, v)
        self.env.update(__CHECK_STATE=self.state, __CHECK_WORK=self.work)
        torchrun = project_torchrun()
        if torchrun:  # first on PATH, before any other torchrun (see TORCH_VENV)
            os.symlink(os.path.join(REPO, TORCH_VENV), os.path.join(self.work, TORCH_VENV))
            os.makedirs(os.path.join(self.root, "bin"))
            os.symlink(torchrun, os.path.join(self.root, "bin", "torchrun"))
            self.env["PATH"] = os.path.join(self.root, "bin") + os.pathsep + self.env.get("PATH", "")

    def run(self, command, timeout):
        """(exit code or None on timeout, output: stdout and stderr together)."""
        with open(os.path.join(self.state, "cmd"), "w") as f:
            f.write(command + "\n")
        p = subprocess.Popen(["bash", "--noprofile", "--norc", os.path.join(self.state, "run.sh")],
                             cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
            return p.returncode, out.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            out = b""
            for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    out, _ = p.communicate(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return None, (out or b"").decode("utf-8", "replace")

    def close(self):
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def indent(lines, prefix="      "):
    return [prefix + l for l in lines]


def check_file(path, blocks, errors, files, gpu, args, emit):
    """Run one file's commands in order; returns (passed, failed, skipped, no-run, gpu skips)."""
    passed = failed = skipped = norun = nogpu = 0
    for where, msg in errors:
        emit(f"FAIL  {where}  {msg}")
        failed += 1
    if errors:
        emit(f"      (the markup of {path} is wrong: fix it; its commands are not run)")
        return passed, failed, skipped, norun, nogpu
    box = Sandbox(files, args.keep) if any(not b.norun and (gpu[0] or not b.gpu) for b in blocks) else None
    if box and args.keep:
        emit(f"      ({path}: commands run in {box.work})")
    try:
        for b in blocks:
            commands = [c for c in b.commands if not c.comment_only()]
            missing = b.needs and not program_here(b.needs)
            if commands and missing:
                emit(f"SKIP  {b.path}:{commands[0].line}  {commands[0].shown()}  ({missing_why(b.needs)})")
                skipped += len(commands)
                norun += len(commands)
                continue
            if commands and (b.norun or (b.gpu and not gpu[0])):
                # one line for the block; every command in it counts as skipped
                if b.norun:
                    why = f"not run: {b.norun}"
                    norun += len(commands)
                else:
                    why = (f"needs a GPU: {gpu[1]}; on a machine with an NVIDIA GPU this check runs it, "
                           "and `make test-gpu` runs the GPU suite")
                    nogpu += len(commands)
                more = f"  (and {len(commands) - 1} more)" if len(commands) > 1 else ""
                emit(f"SKIP  {b.path}:{commands[0].line}  {commands[0].shown()}{more}  ({why})")
                skipped += len(commands)
                continue
            for c in commands:
                p, f, out = run_one(box, c, args)
                passed, failed = passed + p, failed + f
                emit(out)
    finally:
        if box:
            box.close()
    return passed, failed, skipped, norun, nogpu


def run_one(box, c, args):
    """Run one command in the file's sandbox: (passed, failed, report)."""
    b = c.block
    t0 = time.time()
    rc, output = box.run(c.text, b.timeout * TIMEOUT_SCALE)
    took = time.time() - t0
    why = None
    if rc is None:
        why = [f"timed out after {b.timeout * TIMEOUT_SCALE:g} s (raise it with <!-- check: timeout=S -->)"]
    elif rc != b.exit:
        why = [f"exit {rc}, expected {b.exit}" + ("" if b.exit else
               " (if that is what it should do, mark the block <!-- check: exit=N -->)")]
    else:
        why = compare(c, output)
    lines = output.rstrip("\n").split("\n") if output.strip() else []
    if why is None:
        report = [f"PASS  {c.path}:{c.line}  {c.shown()}  ({took:.1f} s)"]
        if args.verbose:
            report += indent(lines, "      | ")
        return 1, 0, "\n".join(report)
    shown = lines if args.verbose else lines[-TAIL:]
    if not lines:
        head = "the output was empty"
    elif len(shown) < len(lines):
        head = f"the output's last {len(shown)} of {len(lines)} lines:"
    else:
        head = f"the output ({len(lines)} lines):"
    report = [f"FAIL  {c.path}:{c.line}  {c.shown()}  ({took:.1f} s)"] + indent(why) + indent(
        [head] + ["| " + l for l in shown])
    return 0, 1, "\n".join(report)


def list_file(path, blocks, errors):
    for where, msg in errors:
        print(f"ERROR {where}  {msg}")
    for b in blocks:
        tags = []
        if b.norun:
            tags.append(f"no-run: {b.norun}")
        if b.gpu:
            tags.append("gpu")
        if b.exit:
            tags.append(f"exit={b.exit}")
        if b.rel or b.abs:
            tags.append(f"rel={b.rel:g} abs={b.abs:g}")
        if b.timeout != DEFAULT_TIMEOUT:
            tags.append(f"timeout={b.timeout:g}")
        for c in b.commands:
            n = sum(1 for _, t in c.expected if t is not GAP)
            print(f"{c.path}:{c.line}  $ {c.shown()}" + (f"  [{'; '.join(tags)}]" if tags else "")
                  + (f"  ({n} expected lines)" if n else ""))


def main():
    ap = argparse.ArgumentParser(description="Run the ```console blocks of Markdown files and compare "
                                             "their output (convention: docs/testing.md).")
    ap.add_argument("files", nargs="+", metavar="FILE.md")
    ap.add_argument("--list", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--no-gpu", action="store_true", help="skip gpu blocks even where there is a GPU")
    ap.add_argument("--keep", action="store_true", help="keep each file's temporary directory")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command's whole output")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="files checked at once (default 1)")
    args = ap.parse_args()

    parsed = []
    for path in args.files:
        try:
            parsed.append((path,) + parse(path))
        except OSError as e:
            print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 2
    if args.list:
        for p in parsed:
            list_file(*p)
        return 1 if any(p[2] for p in parsed) else 0

    gpu = gpu_here(args.no_gpu)
    files = repo_files()
    start = time.time()
    totals = [0, 0, 0, 0, 0]

    def one(item):
        path, blocks, errors = item
        buf = []
        emit = (lambda s: print(s, flush=True)) if args.jobs <= 1 else buf.append
        t0 = time.time()
        if args.jobs <= 1:
            emit(f"== {path}")
        r = check_file(path, blocks, errors, files, gpu, args, emit)
        if args.jobs > 1:
            buf.insert(0, f"== {path}")
        emit(f"   {path}: {r[0]} passed, {r[1]} failed, {r[2]} skipped in {time.time() - t0:.0f} s")
        return r, buf

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for r, buf in pool.map(one, parsed):
            if buf:
                print("\n".join(buf), flush=True)
            totals = [a + b for a, b in zip(totals, r)]
    passed, failed, skipped, norun, nogpu = totals
    print()
    if skipped:
        print(f"skipped: {norun} shown only (no-run), {nogpu} need a GPU ({gpu[1] or 'none here'})")
    print(f"{len(parsed)} file(s) in {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed:
        return 1
    if skipped and not passed:
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
