#!/usr/bin/env python3
"""tests/check_links.py: every relative link in the pages leads somewhere.

When a section moves (the README's went to docs/), a link to it can break
without any command failing. This checks every Markdown link and image,
`[text](target)`, in README.md, docs/*.md, lectures/*.md and
exercises/README.md (or the files given): a relative target must be a file
or directory that exists, relative to the page; a `#anchor`, alone or after
a Markdown file, must be a heading of that page, spelled as GitHub spells it
(lower case, punctuation dropped, spaces as hyphens, -1, -2 ... for
repeats). Links to http(s):, mailto: and file: are not followed; nothing in
a fenced block or in `backquotes` is a link.

  python3 tests/check_links.py               the pages of the repository
  python3 tests/check_links.py FILE.md ...   those files
  python3 tests/check_links.py --self-test   proves a missing file, a
                                             missing anchor and a missing
                                             heading in another page fail
Prints one line per broken link, then a count; exits 1 if any is broken.
Python 3 standard library only.
"""
import glob
import os
import re
import sys
import tempfile

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"(`+).+?\1")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, file:


def lines(path):
    """(line number, text, inside a fenced block) of every line but the fences' own."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f.read().split("\n"), 1):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)[0] * len(m.group(1))
                elif m.group(1).startswith(fence):
                    fence = None
                continue
            yield n, line, fence is not None


def prose_lines(path):
    """(line number, text) of the lines outside fenced blocks, inline code removed."""
    return [(n, CODE.sub("", line)) for n, line, fenced in lines(path) if not fenced]


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading)                    # HTML tags
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)      # a link: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                      # punctuation, backquotes included
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line, fenced in lines(path):
            h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not fenced and h:
                s = slug(h.group(1))
                k = seen.get(s, 0)
                seen[s] = k + 1
                out.add(s if k == 0 else f"{s}-{k}")
            for a in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                out.add(a)
        cache[path] = out
    return cache[path]


def check(paths):
    """[(path, line, target, why)] for every broken link in paths."""
    broken = []
    for path in paths:
        for n, line in prose_lines(path):
            for target in LINK.findall(line):
                if EXTERNAL.match(target):
                    continue
                file, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
                if not os.path.exists(dest):
                    broken.append((path, n, target, f"{dest} does not exist"))
                elif anchor and dest.endswith(".md") and os.path.isfile(dest) \
                        and anchor.lower() not in anchors(dest):
                    broken.append((path, n, target, f"no heading #{anchor} in {dest}"))
    return broken


def pages():
    return (["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("lectures/*.md"))
            + (["exercises/README.md"] if os.path.exists("exercises/README.md") else []))


def self_test():
    """The check fails where it must, and passes a good page."""
    ok = True
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        files = {
            "README.md": "# Top\n\n## The `--json` schema: v1\n\nsee [a](docs/a.md), [b](docs/b.md#second-part)\n"
                         "and [gone](docs/gone.md), [self](#the---json-schema-v1), [bad](#nowhere),\n"
                         "`[not a link](nowhere.md)`, [web](https://example.com/x.md)\n"
                         "```\n[in a block](nowhere.md)\n```\n",
            "docs/a.md": "# A\n\n[up](../README.md#top) [missing](b.md#no-such-heading) [img](../pic.png)\n",
            "docs/b.md": "# B\n\n## Second part\n",
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        got = {(os.path.relpath(p, d), t) for p, _, t, _ in
               check([os.path.join(d, n) for n in files])}
        want = {("README.md", "docs/gone.md"), ("README.md", "#nowhere"),
                ("docs/a.md", "b.md#no-such-heading"), ("docs/a.md", "../pic.png")}
        for item in sorted(want):
            print(("ok" if item in got else "FAIL") + f": self-test: {item[0]} -> {item[1]} is reported broken")
            ok &= item in got
        for item in sorted(got - want):
            print(f"FAIL: self-test: {item[0]} -> {item[1]} reported, but it is good")
            ok = False
    return ok


def main(argv):
    if argv[1:] == ["--self-test"]:
        return 0 if self_test() else 1
    if any(a.startswith("-") for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) if not argv[1:] else None
    paths = argv[1:] or pages()
    broken = check(paths)
    for path, n, target, why in broken:
        print(f"FAIL: {path}:{n}: ({target}): {why}")
    links = sum(len(LINK.findall(l)) for p in paths for _, l in prose_lines(p))
    print(f"{len(paths)} pages, {links} links, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
