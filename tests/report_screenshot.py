#!/usr/bin/env python3
"""tests/report_screenshot.py -- checks on what headless Chromium made of a
report page (tests/test_report.sh). Python standard library only.

  report_screenshot.py png FILE.png       a real picture, not a blank page
  report_screenshot.py dom FILE.html      the page's own "every chart drew" marker

png: decodes the PNG (zlib + the five PNG row filters) and requires several
distinct colours and a fair share of pixels that differ from the background:
a page whose scripts or styles failed is one flat colour, or nearly.
dom: the report's script appends <div id="render-ok" data-charts="N"> only
when every chart drew without an exception; any failure writes
<div id="render-error"> instead. Exit 0 when the check passes, 1 otherwise;
one line says what was seen.
"""
import collections
import re
import struct
import sys
import zlib


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(path):
    """(width, height, bytes per pixel, rows as bytes objects)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif typ == b"IDAT":
            idat.append(body)
        elif typ == b"IEND":
            break
        pos += 12 + n
    if not ihdr:
        raise ValueError("no IHDR chunk")
    w, h, depth, ctype, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace:
        raise ValueError("unsupported PNG (bit depth %d, colour type %d, interlace %d)" % (depth, ctype, interlace))
    raw = zlib.decompress(b"".join(idat))
    bpp, stride = channels, w * channels
    if len(raw) < h * (stride + 1):
        raise ValueError("truncated image data")
    rows, prev = [], bytes(stride)
    mask7 = int.from_bytes(b"\x7f" * stride, "big")
    mask8 = int.from_bytes(b"\x80" * stride, "big")
    for y in range(h):
        start = y * (stride + 1)
        ftype, line = raw[start], raw[start + 1:start + 1 + stride]
        if ftype == 0:
            cur = line
        elif ftype == 2:  # up: bytewise (line + prev) mod 256, all bytes at once
            a, b = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            cur = (((a & mask7) + (b & mask7)) ^ ((a ^ b) & mask8)).to_bytes(stride, "big")
        elif ftype == 1:  # sub: a running sum per channel
            out = bytearray(line)
            for i in range(bpp, stride):
                out[i] = (out[i] + out[i - bpp]) & 255
            cur = bytes(out)
        elif ftype == 3:  # average
            out = bytearray(line)
            for i in range(stride):
                left = out[i - bpp] if i >= bpp else 0
                out[i] = (out[i] + ((left + prev[i]) >> 1)) & 255
            cur = bytes(out)
        elif ftype == 4:  # paeth
            out = bytearray(line)
            for i in range(stride):
                if i >= bpp:
                    out[i] = (out[i] + paeth(out[i - bpp], prev[i], prev[i - bpp])) & 255
                else:
                    out[i] = (out[i] + prev[i]) & 255
            cur = bytes(out)
        else:
            raise ValueError("bad filter type %d in row %d" % (ftype, y))
        rows.append(cur)
        prev = cur
    return w, h, bpp, rows


def check_png(path):
    try:
        w, h, bpp, rows = decode_png(path)
    except (OSError, ValueError, zlib.error) as e:
        print("screenshot %s: cannot decode it: %s" % (path, e))
        return 1
    colours = collections.Counter()
    for y in range(0, h, 3):
        row = rows[y]
        for x in range(0, w, 3):
            colours[row[x * bpp:x * bpp + 3]] += 1
    total = sum(colours.values())
    bg, bg_n = colours.most_common(1)[0]
    other = 1.0 - bg_n / total
    print("screenshot %s: %dx%d, %d distinct colours, %.1f%% of pixels differ from the background #%s"
          % (path, w, h, len(colours), 100 * other, bg.hex()))
    if len(colours) < 16 or other < 0.03:
        print("  looks blank: a rendered report has charts in many colours")
        return 1
    return 0


def check_dom(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            dom = f.read()
    except OSError as e:
        print("dom %s: cannot read it: %s" % (path, e))
        return 1
    dom = re.sub(r"(?is)<script\b.*?</script>", "", dom)  # the page, not its source
    err = re.search(r'<div id="render-error"[^>]*>([^<]*)', dom)
    ok = re.search(r'<div id="render-ok"[^>]*data-charts="(\d+)"', dom)
    svgs, tips = dom.count("<svg"), dom.count("data-tip=")
    if err:
        print("dom %s: the page reported an error: %s" % (path, err.group(1)[:300]))
        return 1
    if not ok:
        print("dom %s: no render-ok marker: the page's script did not finish (%d svg)" % (path, svgs))
        return 1
    n = int(ok.group(1))
    print("dom %s: render-ok, %d charts drawn, %d svg elements, %d with hover details, no error marker"
          % (path, n, svgs, tips))
    if n < 1 or svgs < n:
        print("  fewer drawings than charts")
        return 1
    if tips < 1:
        print("  no element has hover details (data-tip)")
        return 1
    return 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("png", "dom"):
        print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
        return 2
    return check_png(argv[2]) if argv[1] == "png" else check_dom(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
