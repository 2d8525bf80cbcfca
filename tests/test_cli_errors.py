"""Every documented CLI error, run as written: one line naming the fix, exit status 2.

docs/cli.md ("When a command goes wrong") holds a table of commands and the line each ends
with. Each is run here as a user would, `crossalign` being `python -m seq2seq.cli`, in a
directory prepared as the page says; the command must end with exactly that line on stderr,
exit status 2, nothing on stdout, no traceback, and nothing else on stderr but log lines
(INFO) before it. A command that stops failing so, or a message that changes, fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECTION = "## When a command goes wrong"


def documented_cases() -> list[tuple[str, str]]:
    """(command, the line it ends with) of every row of the page's table."""
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split(SECTION, 1)[1].split("\n## ", 1)[0]
    cases = []
    for row in section.splitlines():
        cells = re.fullmatch(r"\| (`+)(.+?)\1 \| (`+)(.+?)\3 \|", row)
        if cells:
            cases.append((cells.group(2).strip(), cells.group(4).strip()))
    return cases


CASES = documented_cases()


@pytest.fixture(scope="module")
def workdir(tiny_bundle: Path, tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the page describes."""
    work = tmp_path_factory.mktemp("errors")
    shutil.copytree(tiny_bundle, work / "models" / "de-en")
    shutil.copytree(tiny_checkpoint, work / "run" / "final")
    (work / "small.tsv").write_text(
        "".join(f"Satz Nummer {i} ist hier.\tSentence number {i} is here.\n" for i in range(150)), encoding="utf-8"
    )
    (work / "bad.tsv").write_text("Bahnhof station\n", encoding="utf-8")
    (work / "pairs.tsv").write_text("Hallo\tHello\n", encoding="utf-8")
    (work / "empty").mkdir()
    return work


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    assert words[0] == "crossalign"
    env = {k: v for k, v in os.environ.items() if k != "CROSSALIGN_MODELS"} | {
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *words[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_page_documents_the_cases() -> None:
    commands = {command.split()[1] for command, _ in CASES}
    assert len(CASES) >= 12 and {"translate", "align", "eval", "data", "export"} <= commands


def test_every_documented_error_is_one_line_with_status_2(workdir: Path) -> None:
    with ThreadPoolExecutor(2) as pool:  # two at a time: most of a run is an interpreter starting
        finished = list(pool.map(lambda case: run(case[0], workdir), CASES))
    for (command, line), result in zip(CASES, finished):
        lines = result.stderr.splitlines()
        assert result.returncode == 2, (command, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == "", (command, result.stderr)
        assert lines and lines[-1] == line, (command, result.stderr)
        assert all(" INFO " in earlier for earlier in lines[:-1]), (command, result.stderr)
    assert not (workdir / "data").exists()  # data prepare refused before writing anything
