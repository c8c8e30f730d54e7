#!/usr/bin/env python3
"""tests/test_glossary.py: one glossary for the course, and every lecture
points to it.

Each lecture ends with a glossary of its own terms (English, 한국어,
meaning). lectures/glossary.md gathers them all. This checks that every
term a lecture defines is in lectures/glossary.md with the same Korean word,
that no English term has two Korean words, that no Korean word is one the
course decided against (그래디언트 for gradient, 행 for hang: it reads as
"row"), and that every lecture links to glossary.md.

  python3 tests/test_glossary.py               check the lectures
  python3 tests/test_glossary.py --self-test   prove each check can fail
Exits 1 if any check fails.
"""
import glob
import re
import sys

AVOID = {"그래디언트": "gradient is 기울기 everywhere", "행 (": "hang | 행 reads as 'row'"}


def rows(text):
    """[(english, korean)] of the glossary tables under '## Glossary' (or the
    whole text for glossary.md, whose tables have a fourth column)."""
    out, inside = [], False
    for line in text.split("\n"):
        if line.startswith("## "):
            inside = line.startswith("## Glossary") or line.startswith("## Terms")
            continue
        if inside and line.startswith("|") and not re.match(r"\|\s*(---|English)", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out.append((cells[0], cells[1]))
    return out


def check(lectures, glossary):
    """[(ok, message)] for {path: text} lectures and the glossary's text."""
    results, known = [], {}
    for english, korean in rows(glossary):
        if english.lower() in known and known[english.lower()] != korean:
            results.append((False, f"glossary.md: {english} has two Korean words"))
        known[english.lower()] = korean
    for path, text in lectures.items():
        results.append(("(glossary.md)" in text,
                        f"{path}: links to the course glossary (glossary.md)"))
        for english, korean in rows(text):
            for word, why in AVOID.items():
                if word in korean:
                    results.append((False, f"{path}: {english} | {korean}: {why}"))
            got = known.get(english.lower())
            results.append((got == korean, f"{path}: {english} | {korean} is in glossary.md"
                            + ("" if got in (None, korean) else f" (there: {got})")))
    return results


def main():
    if sys.argv[1:] == ["--self-test"]:
        gl = "## Terms\n| English | 한국어 | meaning | lectures |\n| --- |\n| unit | 유닛 | x | 2 |\n"
        lec = {"a.md": "[glossary](glossary.md)\n## Glossary\n| unit | 유닛 | x |\n",
               "b.md": "## Glossary\n| unit | 단위 | x |\n| hang | 행 (멈춤) | x |\n"}
        got = [ok for ok, _ in check(lec, gl)]
        want = [True, True, False, False, False, False]
        print("self-test:", "reports a missing link, another Korean word, an avoided word and a "
              "term missing from glossary.md" if got == want else f"got {got}, want {want}")
        return 0 if got == want else 1
    lectures = {p: open(p).read() for p in sorted(glob.glob("lectures/[0-9]*.md"))}
    results = check(lectures, open("lectures/glossary.md").read())
    for ok, message in results:
        if not ok:
            print("FAIL", message)
    bad = sum(not ok for ok, _ in results)
    print(f"{len(results) - bad} glossary checks right, {bad} wrong")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
