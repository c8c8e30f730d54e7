#!/usr/bin/env python3
"""tests/test_code_names.py: the code the course names is where it says.

The lectures, the README and docs/ send readers to functions by name and section:
"`trainer_create` (section 11)", "`adamw_one` in section 9". When code moves
(fsdp.c keeps the algorithm; main.c and run/*.h the program around it), such
a pointer can go stale without any command failing. This checks every one:
each name before "(section N)", "in section N" or "(end of section N)" must
be a function, macro or type defined in section N of fsdp.c, and every
"section N" must be one of fsdp.c's sections. A name that now lives in
main.c or run/ is reported with its file. It also checks the docs' other
promise about fsdp.c: no line of it tests for __CUDACC__ (the CPU and GPU
builds differ only behind the seam: kernels/ and comm/device.h).
And every other name in backquotes that looks like one of ours (snake_case,
`name` or `name()`) must still be defined or used somewhere in the sources,
unless it is one of the PyTorch or Hugging Face names listed in ELSEWHERE:
a renamed or deleted function leaves no stale pointer behind. A "`meta.txt`
version N" must be the version fsdp.c writes (formats.h's META_VERSION).
A pointer to a file, "`bf16_from_float` (core.h)" or "`ring_bytes` in
`comm/comm.h`", must name something that file defines. fsdp.c stays the
file a student reads top to bottom: at most MAX_LINES lines, and every
header it includes at the top, under a "/* defines:" comment. And the
dependencies point one way: no test includes fsdp.c (tests include headers,
or main.c for a whole trainer), and no header below fsdp.c (core.h,
kernels/, comm/, sim/, data/, optim/, io/) calls a function fsdp.c defines.

  python3 tests/test_code_names.py             the docs of the repository
  python3 tests/test_code_names.py --self-test proves it reports a wrong
                                               section, a moved name, a
                                               missing one, a stale version, an
                                               include after a function and a
                                               call up into fsdp.c
Prints one line per pointer checked; exits 1 if any is wrong.
"""
import glob
import re
import sys

DOCS = sorted(glob.glob("lectures/*.md")) + ["README.md"] + sorted(glob.glob("docs/*.md")) + ["exercises/README.md"]
PROGRAM = ["main.c"] + sorted(glob.glob("run/*.h"))
BANNER = re.compile(r"^ \* (\d+)\. (.+)$")
# a definition at column 0: "static int name(", "FSDP_HD static inline float name(",
# "#define NAME(", "} Name;" (a typedef's end)
DEFINITION = re.compile(r"^(?:#define\s+([A-Za-z_]\w*)\(|(?!return\b)[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\(|\}\s*([A-Za-z_]\w*);)")
POINTER = re.compile(r"((?:`\w+`(?:,\s*|\s+and\s+|\s+or\s+)?)+)\s*(?:\(end of |\(|in )section (\d+)")
# "`name` (core.h)", "`name` in `comm/ring.h`": a pointer to a file, checked against its definitions
FILE_POINTER = re.compile(r"((?:`\w+`(?:,\s*|\s+and\s+|\s+or\s+)?)+)\s*(?:\(|in )`?"
                          r"((?:(?:kernels|comm|data|model|io|optim|sim|run)/)?[a-z_0-9]+\.[ch])\b")


INCLUDE = re.compile(r'^#include "((?:kernels|comm|data|model|io|optim|sim)/[^"]+\.h|core\.h|trainer\.h)"')
SOURCES = ["fsdp.c", "main.c", "files.c", "formats.c"] + sorted(glob.glob("*.h")) + sorted(
    p for d in ("run", "kernels", "comm", "io", "model", "data", "optim", "sim", "exercises",
                "tests", "bridge")
    for p in glob.glob(f"{d}/*.[chp]*") if p != "tests/test_code_names.py") + sorted(
    glob.glob("dev/**/*.[chp]*", recursive=True))  # the workshop: emulator, benchmarks, profiler
MAX_LINES = 3000  # the algorithm alone; the program and plumbing live beside it
SNAKE = re.compile(r"`([a-z][a-z0-9]*_[a-z0-9_]+)(?:\(\))?`")
# snake_case names the docs cite that are not ours: PyTorch's, Hugging Face's,
# and a shell function lecture 7 defines in its own commands
ELSEWHERE = {"device_mesh", "export_chrome_trace", "fully_shard", "nonwrapped_numel",
             "param_init_fn", "process_group", "save_pretrained", "set_state_dict",
             "wait_stream", "zero_grad", "loss_of", "scaled_dot_product_attention",
             "log_softmax", "set_force_sum_reduction_for_comms", "set_gradient_divide_factor",
             "requires_grad", "state_dict_type",
             "shakespeare_char", "estimate_loss"}  # nanoGPT's (lecture 20)


def definitions(path, section=None):
    """{name: section} for fsdp.c (section 0 before the first banner; a
    header it includes in place, kernels/ comm/ data/ model/ io/ optim/, counts as
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


def file_results(docs_text):
    """[(ok, where, message)] for every pointer to a file: "`name` (core.h)"."""
    results, defined = [], {}
    for path, text in docs_text.items():
        for no, line in enumerate(text.split("\n"), 1):
            for m in FILE_POINTER.finditer(line):
                file, where = m.group(2), f"{path}:{no}"
                if file not in defined:
                    try:
                        defined[file] = (definitions(file), open(file).read())
                    except OSError:
                        defined[file] = None
                if defined[file] is None:
                    results.append((False, where, f"{file}: no such file"))
                    continue
                for name in re.findall(r"`(\w+)`", m.group(1)):
                    names, text_of = defined[file]
                    # a function, macro or type; or a table, a constant, an enum's member
                    if name in names or re.search(rf"^(?:static\s+)?(?:const\s+)?[\w \*]*\b{name}\s*"
                                                  rf"(?:\[|=)|^#define\s+{name}\b|^\s+{name}\s*[,=]",
                                                  text_of, re.M):
                        results.append((True, where, f"{name} is in {file}"))
                    else:
                        results.append((False, where, f"{name} is not defined in {file}"))
    return results


def name_results(docs_text, words):
    """Every snake_case name in backquotes is a word of the sources (words)
    or a name of PyTorch's listed in ELSEWHERE."""
    results = []
    for path, text in docs_text.items():
        for no, line in enumerate(text.split("\n"), 1):
            for name in SNAKE.findall(line):
                if name in ELSEWHERE:
                    continue
                if name in words:
                    results.append((True, f"{path}:{no}", f"{name} exists"))
                else:
                    results.append((False, f"{path}:{no}", f"{name}: in no source file (renamed? "
                                    "if it is PyTorch's, add it to ELSEWHERE)"))
    return results


def size_results(fsdp_text):
    n = fsdp_text.count("\n")
    if n <= MAX_LINES:
        return [(True, "fsdp.c", f"{n} lines, at most {MAX_LINES}")]
    return [(False, "fsdp.c", f"{n} lines, over {MAX_LINES}: move plumbing into a header "
             "included in place, or into main.c and run/")]


def source_words():
    words = set()
    for p in SOURCES:
        with open(p, errors="replace") as f:
            words |= set(re.findall(r"\b[A-Za-z_]\w*\b", f.read()))
    return words


def seam_results(fsdp_text):
    """The docs say the backend seam is all that differs between the CPU and
    GPU builds: no line of fsdp.c itself may test for CUDA."""
    lines = [no for no, line in enumerate(fsdp_text.split("\n"), 1)
             if re.match(r"\s*#\s*if.*__CUDACC__", line)]
    if lines:
        return [(False, f"fsdp.c:{no}", "#if on __CUDACC__: move it behind the seam "
                 "(kernels/backend.h, comm/device.h)") for no in lines]
    return [(True, "fsdp.c", "no #if on __CUDACC__: the seam holds them all")]


def include_results(fsdp_text):
    """(a) Every header fsdp.c includes comes before its first function, under a
    "/* defines:" comment that says what it brings: the file reads as the
    algorithm, its floor listed at the top."""
    lines = fsdp_text.split("\n")
    first = next((i for i, line in enumerate(lines)
                  if DEFINITION.match(line) and not line.startswith("#")
                  and not line.rstrip().endswith(";") and "(" in line), len(lines))
    results = []
    for i, line in enumerate(lines):
        if not line.startswith('#include "'):
            continue
        j = i - 1
        while j >= 0 and (lines[j].startswith('#include "') or lines[j].startswith(" *")):
            j -= 1
        if i > first:
            results.append((False, f"fsdp.c:{i + 1}", f"{line}: after the first function "
                            f"(line {first + 1}); move it to the top"))
        elif j < 0 or not lines[j].startswith("/* defines:"):
            results.append((False, f"fsdp.c:{i + 1}", f"{line}: no /* defines: ... */ comment"))
        else:
            results.append((True, f"fsdp.c:{i + 1}", f"{line[9:]} at the top, with its defines"))
    return results


def tests_results(paths):
    """(b) Tests include headers, or main.c for a whole trainer; never fsdp.c."""
    bad = [(p, no) for p in paths for no, line in enumerate(open(p, errors="replace"), 1)
           if re.match(r'\s*#\s*include\s+"(?:\.\./)?fsdp\.c"', line)]
    if bad:
        return [(False, f"{p}:{no}", "includes fsdp.c: include the headers it needs") for p, no in bad]
    return [(True, "tests/", "no test includes fsdp.c")]


def direction_results(fsdp_text, headers):
    """(c) Dependencies point one way: no header below fsdp.c calls a function
    fsdp.c defines (model/ may: the hooks are the design's one loop)."""
    ours = {m.group(2) for line in fsdp_text.split("\n") for m in [DEFINITION.match(line)]
            if m and m.group(2) and not line.startswith("#") and not line.rstrip().endswith(";")}
    results = []
    for p in headers:
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", open(p).read(), flags=re.S)
        called = sorted(n for n in ours if re.search(rf"\b{n}\s*\(", code))
        results.append((not called, p, f"calls fsdp.c's {', '.join(called)}" if called
                        else "calls nothing of fsdp.c"))
    return results


def version_results(docs_text, formats_h):
    """Every "`meta.txt` version N" of the docs is the version fsdp.c writes."""
    m = re.search(r"^#define META_VERSION (\d+)", formats_h, re.M)
    results = []
    for path, text in docs_text.items():
        for no, line in enumerate(text.split("\n"), 1):
            for v in re.findall(r"`meta\.txt` version (\d+)", line):
                if m and v == m.group(1):
                    results.append((True, f"{path}:{no}", f"meta.txt version {v}, as formats.h"))
                else:
                    results.append((False, f"{path}:{no}", f"meta.txt version {v}, where formats.h's "
                                    f"META_VERSION is {m.group(1) if m else 'missing'}"))
    return results


def main():
    algorithm = definitions("fsdp.c")
    program = {}
    for p in PROGRAM:
        program.update(definitions(p))
    if sys.argv[1:] == ["--self-test"]:
        fake = {"fake.md": "`trainer_step` (section 3) and `run_training` in section 11, "
                           "`no_such_function` (section 8), `adamw_one` (section 99), "
                           "`adamw_step` in section 4"}
        got = [ok for ok, _, _ in check(fake, algorithm, program)]
        got += [ok for ok, _, _ in seam_results("int a;\n#ifdef __CUDACC__\n#endif\n")]
        got += [ok for ok, _, _ in seam_results("int a;\n")]
        got += [ok for ok, _, _ in name_results({"fake.md": "`unit_gone()` and `zero_grad` "
                                                              "and `unit_gather`"}, source_words())]
        got += [ok for ok, _, _ in size_results("x\n" * (MAX_LINES + 1))]
        got += [ok for ok, _, _ in file_results({"fake.md": "`ceil_div` (core.h), "
                                                            "`trainer_step` in `main.c`"})]
        got += [ok for ok, _, _ in version_results({"fake.md": "`meta.txt` version 5, and "
                                                                "`meta.txt` version 6"},
                                                   "#define META_VERSION 6\n")]
        got += [ok for ok, _, _ in include_results('/* defines: a */\n#include "a.h"\n'
                                                   'static int f(int x) {\n}\n#include "b.h"\n')]
        got += [ok for ok, _, _ in direction_results(open("fsdp.c").read(),
                                                     ["model/mlp.h", "comm/ring.h"])]
        want = [False, False, False, False, True, False, True, False, True, False, True, False, False, True,
                True, False, False, True]
        print("self-test:", "reports a wrong section, a moved name, a missing name, a wrong "
              "section number, an #ifdef __CUDACC__ in fsdp.c, a name no source has, a "
              "fsdp.c too long, a name not in the file named, an include after a function, "
              "a call up into fsdp.c and a stale meta.txt version, and "
              "passes the right ones" if got == want else f"got {got}, want {want}")
        return 0 if got == want else 1
    texts = {p: open(p).read() for p in DOCS}
    results = check(texts, algorithm, program) + file_results(texts) + seam_results(open("fsdp.c").read())
    results += name_results(texts, source_words()) + size_results(open("fsdp.c").read())
    results += version_results(texts, open("formats.h").read())
    results += include_results(open("fsdp.c").read())
    results += tests_results(sorted(glob.glob("tests/*.c") + glob.glob("tests/*.cu")
                                    + glob.glob("tests/*.cpp") + glob.glob("dev/**/*.[ch]*",
                                                                           recursive=True)))
    results += direction_results(open("fsdp.c").read(), ["core.h"] + sorted(
        p for d in ("kernels", "comm", "sim", "data", "optim", "io") for p in glob.glob(f"{d}/*.h")))
    for ok, where, message in results:
        print(f"{'ok  ' if ok else 'FAIL'} {where}: {message}")
    bad = sum(not ok for ok, _, _ in results)
    print(f"{len(results) - bad} pointers right, {bad} wrong")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
