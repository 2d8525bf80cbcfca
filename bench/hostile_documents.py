"""Hostile files through the library's readers (issue 41: #1 zip bombs, #6 parsing within
limits): each read in a fresh interpreter, its time and how much its peak RSS grew.

    python bench/hostile_documents.py                                  # this checkout
    python bench/hostile_documents.py --code /tmp/base --cases odt_bomb   # another revision's code

`--code DIR` measures the `seq2seq` package under DIR (an older revision unpacked with
`git archive REV | tar -x -C DIR`), so a fix's before and after come from one command. Each
case reads one file with `read_document` and the default `Limits` (what `crossalign serve`
uses, `file_char_limit` aside) and prints its outcome (the error's first words, or the
segments read), seconds, and the peak RSS over the RSS before the read (VmHWM reset through
/proc/self/clear_refs, so building the file does not count).

Cases (the files come from tests/hostile_documents.py):

- odt_bomb, docx_bomb: a 1 MB deflate stream of spaces (about 1 GiB inflated) behind an entry
  that says it holds a few hundred bytes; odt_bomb_plausible: one that says it holds as many
  bytes as it has compressed (with their CRC), so only inflating can tell. Aim: refused, peak
  growth <= 100 MB.
- docx_xml_150mib: an honest 1 MB DOCX (true sizes and CRCs, within the per-entry ratio and the
  unzipped limit) whose document.xml is 150 MiB of tiny paragraphs. Aim: refused by its tags
  while it is inflated, not parsed into GBs.
- entries_400k: a central directory of 400,000 entries (20 MB, ZIP64 end records);
  entries_400k_liar: the same behind an end record that says 10. Aim: refused before zipfile reads the directory.
- html_paragraphs, html_tags: 2 MiB of `<p>.</p>` and of `<b>`; txt_lines: 2 MiB of blank
  lines; md_marks: 2 MiB of `*a* `; xliff_codes: 2 MiB of `<x/>` in one source. Aim: refused
  at a limit within a second or two, no growth of hundreds of MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "odt_bomb": ("odt", "odt_bomb(1)"),
    "odt_bomb_plausible": ("odt", "odt_bomb(1, plausible=True)"),
    "docx_bomb": ("docx", "docx_bomb(1)"),
    "docx_xml_150mib": ("docx", "docx_xml_bomb(150)"),
    "entries_400k": ("docx", "many_entries(400_000)"),
    "entries_400k_liar": ("docx", "many_entries(400_000, said=10)"),
    "html_paragraphs": ("html", "empty_paragraphs(2)"),
    "html_tags": ("html", "open_tags(2)"),
    "txt_lines": ("txt", "blank_lines(2)"),
    "md_marks": ("md", "markdown_marks(2)"),
    "xliff_codes": ("xliff", "xliff_codes(2)"),
}
# Run in the child: build the file, reset the peak, read it, report.
CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import hostile_documents as hostile
from seq2seq.documents.files import FORMATS, read_document

def rss(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024

data = eval("hostile." + {build!r})
before = rss("VmRSS")
Path("/proc/self/clear_refs").write_text("5")
start = time.perf_counter()
try:
    outcome = f"read {{len(read_document(data, FORMATS[{kind!r}]).segments)}} segments"
except Exception as error:
    outcome = f"{{type(error).__name__}}: {{str(error)[:90]}}"
seconds = time.perf_counter() - start
print(json.dumps({{"bytes": len(data), "outcome": outcome, "seconds": round(seconds, 2),
                  "peak_growth_mb": round(rss("VmHWM") - before, 1)}}))
"""


def measure(case: str, code: Path, timeout: float) -> dict:
    kind, build = CASES[case]
    script = CHILD.format(tests=str(REPO / "tests"), build=build, kind=kind)
    env = {**os.environ, "PYTHONPATH": str(code)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            cwd=code,  # `-c` puts the working directory first on sys.path
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"case": case, "outcome": f"still reading after {timeout:g} s (killed)"}
    if done.returncode != 0:
        return {"case": case, "outcome": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return {"case": case, **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--code", type=Path, default=REPO, help="directory holding the seq2seq to measure (default: here)"
    )
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="default: all")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a case may take (default 180)")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    args = parser.parse_args()
    for case in args.cases:
        row = measure(case, args.code.resolve(), args.timeout)
        print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
