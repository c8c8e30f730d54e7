#!/usr/bin/env python3
"""tests/run_notebooks.py — executes the course's notebooks top to bottom.

    python3 tests/run_notebooks.py notebooks/*.ipynb      (make test runs this
                                                          through tests/test_notebooks.sh)
    python3 tests/run_notebooks.py --strip notebooks/NN-name.ipynb

Each notebook runs in a fresh python3 kernel (nbclient), in memory, with the
repository root as its working directory, so `./fsdp` and `tests/lib.sh`
resolve as they do in the shell tests. mpirun gets the environment of
tests/lib.sh (root allowed, oversubscribed, quiet), and MPLBACKEND=Agg, so
nothing needs a display (a notebook that starts with `%matplotlib inline`
still gets its plots into the executed copy: that backend renders with Agg
too). A cell that raises, a failed assert included, fails its notebook; a
cell may run 300 s at most (--timeout), times TIMEOUT_SCALE where it is set
(make sanitize sets 4: its instrumented builds run the same cells slower).

Per notebook one line, PASS or FAIL with its time, in the order given
(--jobs N runs N notebooks at once, each in a process of its own); a
failure adds the cell's number, its first line, the error and the cell's
own time. The executed copy,
outputs and plots included, is written to out/notebooks/ (--out) for a
student to open. The exit status is 0 only when every notebook passed.

Notebooks are kept in git WITHOUT outputs (small diffs, no stale numbers): a
notebook saved with outputs fails here; `--strip FILE...` removes them.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from check_docs import timeout_scale  # TIMEOUT_SCALE, read and checked as for the lectures

ROOT = Path(__file__).resolve().parent.parent
DEPS = "nbclient nbformat ipykernel matplotlib numpy"


def environment():
    """The environment every kernel (and so every mpirun) inherits."""
    os.environ.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
        "MPLBACKEND": "Agg",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",  # quiets a debugger warning at kernel start
    })


def has_outputs(nb):
    return [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]


def strip(nb):
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs = []
            c.execution_count = None
            c.metadata.pop("execution", None)
    return nb


def cell_seconds(cell):
    """The cell's run time from the timestamps nbclient records."""
    from datetime import datetime
    t = cell.get("metadata", {}).get("execution", {})
    a, b = t.get("iopub.execute_input"), t.get("shell.execute_reply")
    if not a or not b:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(b) - parse(a)).total_seconds()


def error_text(cell):
    """The error a cell's outputs show: its type, message and the traceback's last lines."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            import re
            tb = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.get("traceback", [])]
            lines = "\n".join(tb).splitlines()
            return "\n".join(lines[-12:]) or f"{out.get('ename')}: {out.get('evalue')}"
    return None


def run_one(path, timeout, out_dir):
    """Executes one notebook; returns whether it passed and its report lines."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    saved = has_outputs(nb)
    running = {}  # the cell being executed: its index and when it started

    def on_cell_start(cell, cell_index, **_):
        running.update(index=cell_index, since=time.monotonic())

    def client():
        return NotebookClient(nb, timeout=timeout, kernel_name="python3",
                              resources={"metadata": {"path": str(ROOT)}}, record_timing=True,
                              on_cell_start=on_cell_start)
    start = time.monotonic()
    problem, cell_took = None, None
    # The kernel's own stderr (ipykernel's start-up notices) goes to a file,
    # shown only if the kernel dies.
    # The notebook's own Open MPI session directory: Open MPI 4's mpiruns
    # share /tmp/ompi.HOST.UID, which one removes as it ends, perhaps while
    # another notebook's is starting in it (tests/test_cli.sh, whose cases
    # run at once too). The kernel inherits it with the environment.
    with tempfile.TemporaryFile(mode="w+") as kernel_log, \
            tempfile.TemporaryDirectory(prefix="ompi-session.") as session:
        os.environ["OMPI_MCA_orte_tmpdir_base"] = session
        # A kernel that dies before its first reply ran no cell: two kernels
        # starting at once can pick the same free port (jupyter_client
        # chooses them before binding), and the second dies. Started again
        # once; a notebook's own failure is never retried.
        for _ in range(2):
            try:
                client().execute(stderr=kernel_log)
                problem = None
                break
            except (CellExecutionError, CellTimeoutError, DeadKernelError, RuntimeError) as e:
                problem = e
                if "index" in running or "before replying to kernel_info" not in str(e):
                    break
        if problem is not None:
            e = problem
            if "since" in running:
                cell_took = time.monotonic() - running["since"]
            if isinstance(e, DeadKernelError):
                kernel_log.seek(0)
                problem = DeadKernelError(f"{e}\n{kernel_log.read()[-2000:]}")
    seconds = time.monotonic() - start
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(out_dir / Path(path).name))

    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if problem is None and not saved:
        slow = max(((cell_seconds(c) or 0.0, i) for i, c in code), default=(0.0, 0))
        return True, [f"PASS  {path} ({seconds:.1f} s; {len(code)} code cells, "
                      f"slowest cell {slow[1]}: {slow[0]:.1f} s)"]
    lines = [f"FAIL  {path} ({seconds:.1f} s)"]
    if saved:
        lines += [f"      saved with outputs in cell(s) {saved}: keep notebooks in git without them;",
                  f"      run: python3 tests/run_notebooks.py --strip {path}"]
    if problem is not None:
        text = None
        if "index" in running:
            i = running["index"]
            c = nb.cells[i]
            first = (c.source.strip().splitlines() or [""])[0][:100]
            took = f", {cell_took:.1f} s" if cell_took is not None else ""
            lines.append(f"      cell {i} ({first!r}{took}):")
            text = error_text(c)
        if isinstance(problem, CellTimeoutError):
            text = f"the cell ran past the {timeout} s limit per cell"
        elif isinstance(problem, DeadKernelError):
            text = f"the kernel died: {problem}"
        lines += [f"      {line}" for line in (text or str(problem)).splitlines()[-12:]]
    return False, lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="+", help=".ipynb files")
    scale = timeout_scale()
    p.add_argument("--timeout", type=int, default=300 * scale,
                   help="seconds per cell (default 300 x TIMEOUT_SCALE: %d)" % (300 * scale))
    p.add_argument("--out", default=str(ROOT / "out" / "notebooks"),
                   help="where the executed copies go (default out/notebooks; '' for none)")
    p.add_argument("--jobs", type=int, default=1,
                   help="notebooks run at once, each in its own process (default 1); "
                        "reports still in the order given")
    p.add_argument("--strip", action="store_true", help="remove the outputs in place, run nothing")
    a = p.parse_args()
    try:
        import nbformat  # noqa: F401
        import nbclient  # noqa: F401
    except ImportError as e:
        print(f"cannot run notebooks: {e}. Install them: make notebook-deps "
              f"(or python3 -m pip install {DEPS})")
        return 77
    if a.strip:
        for path in a.notebooks:
            nb = nbformat.read(path, as_version=4)
            nbformat.write(strip(nb), path)
            print(f"stripped {path}")
        return 0
    missing = [n for n in a.notebooks if not Path(n).is_file()]
    if missing:
        print(f"FAIL  no such notebook: {' '.join(missing)}")
        return 1
    environment()
    out_dir = Path(a.out) if a.out else None
    # A notebook's kernel waits on its mpirun most of the time, so two at
    # once use a second core that one leaves idle (the nine of make test:
    # 144 s one at a time, 83 s two at once, 89 s three, on 2 cores). Each
    # has its own kernel and temporary directory.
    # Each notebook's first cells run `make -s fsdp` (notebook 5 also
    # dev/bench/bench_collectives): built here first, so no two notebooks write
    # ./fsdp at once while another starts it.
    if a.jobs > 1 and subprocess.run(["make", "-s", "fsdp", "dev/bench/bench_collectives"], cwd=ROOT).returncode:
        print("FAIL  make -s fsdp dev/bench/bench_collectives (above), which the notebooks run")
        return 1
    with concurrent.futures.ProcessPoolExecutor(max(1, a.jobs)) as pool:
        futures = [pool.submit(run_one, path, a.timeout, out_dir) for path in a.notebooks]
        results = []
        for f in futures:
            passed, lines = f.result()
            print("\n".join(lines), flush=True)
            results.append(passed)
    failed = results.count(False)
    if out_dir:
        print(f"executed copies (outputs, plots): {out_dir}/")
    print(f"{len(results) - failed} of {len(results)} notebooks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
