#!/usr/bin/env python3
"""tests/test_code_names.py: the code the course names is where it says.

The lectures and the README send readers to functions by name and section:
"`trainer_create` (section 11)", "`adamw_one` in section 9". When code moves
(fsdp.c keeps the algorithm; main.c and run/*.h the program around it), such
a pointer can go stale without any command failing. This checks every one:
each name before "(section N)", "in section N" or "(end of section N)" must
be a function, macro or type defined in section N of fsdp.c, and every
"section N" must be one of fsdp.c's sections. A name that now lives in
main.c or run/ is reported with its file. It also checks the docs' other
promise about fsdp.c: no line of it tests for __CUDACC__ (the CPU and GPU
builds differ only behind the seam, kernels/backend.h and comm/device.h).

  python3 tests/test_code_names.py             the docs of the repository
  python3 tests/test_code_names.py --self-test proves it reports a wrong
                                               section, a moved name and a
                                               missing one
Prints one line per pointer checked; exits 1 if any is wrong.
"""
import glob
import re
import sys

DOCS = sorted(glob.glob("lectures/*.md")) + ["README.md", "exercises/README.md"]
PROGRAM = ["main.c"] + sorted(glob.glob("run/*.h"))
BANNER = re.compile(r"^ \* (\d+)\. (.+)$")
# a definition at column 0: "static int name(", "FSDP_HD static inline float name(",
# "#define NAME(", "} Name;" (a typedef's end)
DEFINITION = re.compile(r"^(?:#define\s+([A-Za-z_]\w*)\(|(?!return\b)[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\(|\}\s*([A-Za-z_]\w*);)")
POINTER = re.compile(r"((?:`\w+`(?:,\s*|\s+and\s+|\s+or\s+)?)+)\s*(?:\(end of |\(|in )section (\d+)")


INCLUDE = re.compile(r'^#include "((?:kernels|comm|data|model|io)/[^"]+)"')


def definitions(path, section=None):
    """{name: section} for fsdp.c (section 0 before the first banner; a
    header it includes in place, kernels/ comm/ data/ model/ io/, counts as
    the section that includes it), {name:
    path} otherwise."""
    found, in_fsdp = {}, path == "fsdp.c" or section is not None
    section = section or 0
    with open(path) as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        m = BANNER.match(line)
        if path == "fsdp.c" and m and i > 0 and lines[i - 1].startswith("/* ====="):
            section = int(m.group(1))
            continue
        m = INCLUDE.match(line)
        if m and in_fsdp:
            for name, where in definitions(m.group(1), section).items():
                found.setdefault(name, where)
            continue
        m = DEFINITION.match(line)
        if not m or line.rstrip().endswith(";") and not m.group(3):
            continue
        name = m.group(1) or m.group(2) or m.group(3)
        found.setdefault(name, section if in_fsdp else path)
    return found


def check(docs_text, algorithm, program):
    """[(ok, where, message)] for every pointer in docs_text ({path: text})."""
    sections = set(algorithm.values())
    results = []
    for path, text in docs_text.items():
        for no, line in enumerate(text.split("\n"), 1):
            for m in POINTER.finditer(line):
                n, where = int(m.group(2)), f"{path}:{no}"
                if n not in sections:
                    results.append((False, where, f"section {n}: fsdp.c has sections 1..{max(sections)}"))
                    continue
                for name in re.findall(r"`(\w+)`", m.group(1)):
                    if algorithm.get(name) == n:
                        results.append((True, where, f"{name} is in section {n}"))
                    elif name in algorithm:
                        results.append((False, where, f"{name} is in section {algorithm[name]} of fsdp.c, not {n}"))
                    elif name in program:
                        results.append((False, where, f"{name} is in {program[name]} now, not fsdp.c section {n}"))
                    else:
                        results.append((False, where, f"{name}: no such function, macro or type in fsdp.c"))
    return results


def seam_results(fsdp_text):
    """The docs say the backend seam is all that differs between the CPU and
    GPU builds: no line of fsdp.c itself may test for CUDA."""
    lines = [no for no, line in enumerate(fsdp_text.split("\n"), 1)
             if re.match(r"\s*#\s*if.*__CUDACC__", line)]
    if lines:
        return [(False, f"fsdp.c:{no}", "#if on __CUDACC__: move it behind the seam "
                 "(kernels/backend.h, comm/device.h)") for no in lines]
    return [(True, "fsdp.c", "no #if on __CUDACC__: the seam holds them all")]


def main():
    algorithm = definitions("fsdp.c")
    program = {}
    for p in PROGRAM:
        program.update(definitions(p))
    if sys.argv[1:] == ["--self-test"]:
        fake = {"fake.md": "`trainer_step` (section 3) and `run_training` in section 11, "
                           "`no_such_function` (section 8), `adamw_one` (section 99), "
                           "`adamw_one` in section 9"}
        got = [ok for ok, _, _ in check(fake, algorithm, program)]
        got += [ok for ok, _, _ in seam_results("int a;\n#ifdef __CUDACC__\n#endif\n")]
        got += [ok for ok, _, _ in seam_results("int a;\n")]
        want = [False, False, False, False, True, False, True]
        print("self-test:", "reports a wrong section, a moved name, a missing name, a wrong "
              "section number and an #ifdef __CUDACC__ in fsdp.c, and passes the right ones" if got == want else f"got {got}, want {want}")
        return 0 if got == want else 1
    texts = {p: open(p).read() for p in DOCS}
    results = check(texts, algorithm, program) + seam_results(open("fsdp.c").read())
    for ok, where, message in results:
        print(f"{'ok  ' if ok else 'FAIL'} {where}: {message}")
    bad = sum(not ok for ok, _, _ in results)
    print(f"{len(results) - bad} pointers right, {bad} wrong")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
