"""Every `curl` and `crossalign` example of the README and the docs pages runs as the page shows it.

The blocks marked `<!-- example: run -->` (tests/doc_examples.py has the convention) are run by
bash, each in a fresh directory holding the inputs the examples name (`in.de`, `pairs.tsv`,
`report.docx`, ...), and `models/` (the checkout's) only where a block names it (`--model
models/de-en` is run from the checkout; the rest, as the README says, from anywhere). They ask
one server of the shipped models, started as documented (`crossalign serve`: real uvicorn on
loopback, real onnxruntime): `curl` as written, the documented host:port pointed at the
server's, and `crossalign` as `python -m seq2seq.cli`; HOME is a scratch one, whose `~/bundles`
holds the en-de bundle. Each answer is checked against the one the page shows, numbers at the
precision shown; where none is shown, its HTTP status (2xx), its JSON, and every file the
command wrote (a PNG is a PNG, a DOCX a DOCX, JSONL lines JSON). The same `crossalign` command
on several pages runs once (its answer and files are reused): the module's time goes to the
model loads."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from doc_examples import Block, Matcher, read_blocks

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCKS = [block for page in PAGES for block in read_blocks(page, REPO)]
DOCUMENTED_PORT = 5000
SERVER_START_S = 240  # loading both shipped bundles; minutes on a machine busy with training
POLL_S = 60  # how long a `poll` block's command is asked again before its answer counts as wrong

# bash runs every command with these two functions: the CLI from this checkout, and curl with the
# status and content type of each answer written to stderr after it.
PRELUDE = r"""
crossalign() { "$CROSSALIGN_PYTHON" -m seq2seq.cli "$@"; }
curl() { command curl --show-error --max-time 120 --create-dirs "$@" \
    --write-out '%{stderr}\n@@ %{http_code} %{content_type}\n'; }
"""
CURL_STATUS = re.compile(r"^@@ (\d{3}) (.*)$", re.M)

XLIFF = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file original="app" source-language="de" target-language="en" datatype="plaintext">
    <body><trans-unit id="1"><source>Das Haus ist <g id="1">klein</g>.</source></trans-unit></body>
  </file>
</xliff>
"""


def docx(*paragraphs: tuple[str, ...]) -> bytes:
    """A DOCX of paragraphs, each given as runs; the odd runs bold."""
    import io

    import docx as python_docx

    document = python_docx.Document()
    for runs in paragraphs:
        paragraph = document.add_paragraph()
        for index, text in enumerate(runs):
            paragraph.add_run(text).bold = index % 2 == 1
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def write_inputs(inputs: Path, home: Path) -> None:
    """The files the examples name, small (the tests translate little); in `home`, `~/bundles`
    (the en-de bundle)."""
    (inputs / "in.de").write_text("Das Haus ist klein.\n")
    (inputs / "in.txt").write_text("The house is small.\n")
    (inputs / "pairs.tsv").write_text("Das Haus ist klein.\tThe house is small.\n")
    (inputs / "export.xml").write_text(XLIFF)
    (inputs / "report.docx").write_bytes(docx(("Das Haus ist ", "klein", ".")))
    (inputs / "thesis.docx").write_bytes(docx(("Das Haus ist klein.",), ("Wo ist der Bahnhof?",)))
    (home / "bundles").mkdir(parents=True)
    (home / "bundles" / "en-de").symlink_to(REPO / "models" / "en-de")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    files: dict[str, bytes] = field(default_factory=dict)  # what a crossalign command wrote, by relative path


class Examples:
    """Runs each block's commands in a fresh copy of `inputs` against the server on `port`."""

    def __init__(self, inputs: Path, scratch: Path, port: int, env: dict[str, str]) -> None:
        self.inputs, self.scratch, self.port, self.env = inputs, scratch, port, env
        self.cli_results: dict[tuple[str, ...], Result] = {}  # the same crossalign command, on several pages

    def served_here(self, text: str) -> str:
        """`text` with the documented host:port pointed at the tests' server."""
        for host in ("localhost", "127.0.0.1"):
            text = text.replace(f"{host}:{DOCUMENTED_PORT}", f"{host}:{self.port}")
        return text

    def command_line(self, text: str, matcher: Matcher) -> str | None:
        """The command as bash runs it here; None if it needs an id no answer has shown yet."""
        text = self.served_here(re.sub(r"(?<![\w/])\.venv/bin/crossalign\b", "crossalign", text))
        if "<id>" in text:
            if "id" not in matcher.bindings:
                return None
            text = text.replace("<id>", matcher.bindings["id"])
        return text

    def shell(self, command: str, work: Path) -> Result:
        """The command's result; a crossalign command run before (on another page) is not run
        again: its answer and the files it wrote are given back."""
        key = tuple(shlex.split(command, comments=True))  # the same command, whatever its comment says
        cached = self.cli_results.get(key)
        if cached:
            for name, data in cached.files.items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_bytes(data)
            return cached
        before = snapshot(work)
        done = subprocess.run(
            ["bash", "-c", PRELUDE + command], cwd=work, env=self.env, capture_output=True, text=True, timeout=300
        )
        written = {str(path.relative_to(work)): path.read_bytes() for path in changed(before, snapshot(work))}
        result = Result(done.returncode, done.stdout, done.stderr, written)
        if "crossalign" in command and "curl" not in command:
            self.cli_results[key] = result
        return result

    def run(self, block: Block) -> list[str]:
        """What is wrong with the block's commands' answers (nothing: they are as shown)."""
        work = self.scratch / re.sub(r"\W+", "-", block.name)
        shutil.copytree(self.inputs, work, symlinks=True)
        if "models/" in block.text:  # run from the checkout; the others run where no models/ is
            (work / "models").symlink_to(REPO / "models")
        matcher = Matcher(illustrative=block.illustrative)
        problems: list[str] = []
        for command in block.commands():
            line = self.command_line(command.text, matcher)
            if line is None:
                problems.append(f"$ {command.text}\n    uses <id> before an answer shown has one")
                break
            polls = block.option("poll") is not None and "<id>" in command.text  # a job's status, asked again
            deadline = time.monotonic() + (POLL_S if polls else 0)
            shown = None if command.shown is None else self.served_here(command.shown)
            while True:
                result = self.shell(line, work)
                found = self.check(shown, result, matcher)
                if not found or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            found += [problem for name in result.files for problem in file_problems(work / name)]
            if found:
                problems.append(f"$ {command.text}\n" + "\n".join(f"    {p}" for p in found))
        return problems

    def check(self, shown: str | None, result: Result, matcher: Matcher) -> list[str]:
        if result.returncode != 0:
            return [f"exit status {result.returncode}: {result.stderr.strip()[-600:]}"]
        answers = CURL_STATUS.findall(result.stderr)
        problems = [f"HTTP {status}: {result.stdout[:300]}" for status, _ in answers if not 200 <= int(status) < 300]
        if shown is not None:  # its status too, unless the page shows it (curl -i)
            return (problems if not shown.startswith("HTTP/") else []) + matcher.answer(shown, result.stdout)
        for _, content_type in answers:
            if "json" in content_type and result.stdout.strip():
                problems += json_problems(result.stdout, jsonl="ndjson" in content_type or "jsonl" in content_type)
        return problems


NOT_WRITTEN_BY_EXAMPLES = {"models"}  # the checkout's, linked


def snapshot(work: Path) -> dict[Path, tuple[int, int]]:
    """(mtime, size) of every file the examples may have written (hidden folders: HOME's caches)."""
    stamps = {}
    for folder, folders, files in os.walk(work):
        at_top = Path(folder) == work
        folders[:] = [f for f in folders if not f.startswith(".") and not (at_top and f in NOT_WRITTEN_BY_EXAMPLES)]
        for name in files:
            stat = (Path(folder) / name).stat()
            stamps[Path(folder) / name] = (stat.st_mtime_ns, stat.st_size)
    return stamps


def changed(before: dict, after: dict) -> list[Path]:
    return sorted(path for path, stamp in after.items() if before.get(path) != stamp)


def json_problems(text: str, jsonl: bool) -> list[str]:
    try:
        for line in text.splitlines() if jsonl else [text]:
            if line.strip():
                json.loads(line)
    except ValueError as error:
        return [f"not JSON{'L' if jsonl else ''}: {error}: {text[:200]!r}"]
    return []


def file_problems(path: Path) -> list[str]:
    """A file an example wrote is what its name says."""
    data = path.read_bytes()
    name = path.name
    if not data:
        return [f"{name} is empty"]
    suffix = path.suffix
    if suffix == ".png" and not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return [f"{name} is not a PNG"]
    if suffix in (".docx", ".pptx", ".odt"):
        if not zipfile.is_zipfile(path):
            return [f"{name} is not a ZIP"]
        main = {".docx": "word/document.xml", ".pptx": "ppt/presentation.xml", ".odt": "content.xml"}[suffix]
        if main not in zipfile.ZipFile(path).namelist():
            return [f"{name} has no {main}"]
    if suffix in (".xlf", ".xliff", ".xml", ".svg"):
        try:
            ET.fromstring(data)
        except ET.ParseError as error:
            return [f"{name} is not XML: {error}"]
    if suffix in (".jsonl", ".json"):
        return json_problems(data.decode(), jsonl=suffix == ".jsonl")
    if suffix == ".pharaoh" and not all(re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", x) for x in data.decode().splitlines()):
        return [f"{name} is not Pharaoh links: {data[:100]!r}"]
    return []


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Examples]:
    """The inputs, a HOME, and the documented `crossalign serve` on a free port."""
    root = tmp_path_factory.mktemp("doc_examples")
    inputs, home, scratch = root / "inputs", root / "home", root / "blocks"
    inputs.mkdir()
    scratch.mkdir()
    write_inputs(inputs, home)
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        # matplotlib's font cache where it is (matplotlib.get_cachedir's rule), not rebuilt in the new HOME
        "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR")
        or str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "matplotlib"),
        "PYTHONPATH": str(REPO),
        "CROSSALIGN_PYTHON": sys.executable,
        "CROSSALIGN_THREADS": "1",  # the answers do not depend on it; the machine is shared
        "CROSSALIGN_FILES_DIR": str(root / "served-files"),
    }
    server = subprocess.Popen(
        # `crossalign serve`, as documented, on a free port
        [sys.executable, "-m", "seq2seq.cli", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=inputs,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert server.poll() is None, f"crossalign serve exited with {server.returncode}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"crossalign serve was not healthy within {SERVER_START_S} s"
            time.sleep(0.3)
        yield Examples(inputs, scratch, port, env)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_every_command_block_is_run_or_says_why_not() -> None:
    unmarked = [b.name for b in BLOCKS if b.has_commands and b.mark is None]
    assert not unmarked, f"blocks with curl or crossalign and no <!-- example: run|not run: why --> before: {unmarked}"
    for block in BLOCKS:
        if block.mark is None:
            continue
        kind, _, reason = block.mark.partition(":")
        if block.runs:
            assert block.commands(), f"{block.name}: a run block without commands"
        else:
            assert kind.strip() == "not run", f"{block.name}: {block.mark!r} is neither run nor not run"
            assert len(reason.strip()) >= 10, f"{block.name}: {block.mark!r} does not say why"
    ran = [b for b in BLOCKS if b.runs]
    assert len(ran) >= 20 and {b.page for b in ran} >= {"README.md", "docs/api.md", "docs/cli.md"}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=lambda b: b.name)
def test_documented_example_answers_as_shown(block: Block, examples: Examples) -> None:
    problems = examples.run(block)
    assert not problems, f"{block.name}:\n" + "\n".join(problems)


def test_a_shown_answer_is_compared_at_its_precision_and_keys() -> None:
    assert Matcher().answer('{"confidence": 0.5208, ...}', '{"confidence": 0.52084, "x": 1}') == []
    assert "shown 0.5231, got 0.5208" in Matcher().answer('{"confidence": 0.5231, ...}', '{"confidence": 0.5208}')[0]
    assert Matcher().answer('{"n": 1800}', '{"n": 1800.0}') == []
    assert "keys not shown" in Matcher().answer('{"a": 1}', '{"a": 1, "b": 2}')[0]
    assert "no 'b'" in Matcher().answer('{"a": 1, "b": 2, ...}', '{"a": 1}')[0]
    assert Matcher().answer('{"m": [[0.9995, "..."], ...]}', '{"m": [[0.99951, 0.1], [1.0]]}') == []
    assert Matcher().answer('{"m": [1, ...]}', '{"m": [2, 1]}') != []
    assert Matcher().answer('{"flag": true}', '{"flag": 1}') != []  # true is not 1
    assert Matcher(illustrative={"seconds"}).answer('{"seconds": 0.033}', '{"seconds": 1.5}') == []
    assert Matcher(illustrative={"seconds"}).answer('{"seconds": 0.033}', '{"seconds": "1.5"}') != []


def test_ids_fragments_events_headers_and_lines_are_matched() -> None:
    matcher = Matcher()
    assert matcher.answer('{"url": "h/f/<id>", "id": "<id>"}', '{"url": "h/f/a_b-1", "id": "a_b-1"}') == []
    assert matcher.bindings == {"id": "a_b-1"}
    assert matcher.answer('{"id": "<id>"}', '{"id": "other"}') != []  # once bound, the same id
    assert Matcher().answer('{"url": "x/<id>", "id": "<id>"}', '{"url": "x/a", "id": "b"}') != []
    fragment = '... "marked_text": "The <b>house</b>.", "plain_source": "Das Haus." ...'
    answer = {"translations": [{"text": "The house.", "marked_text": "The <b>house</b>.", "plain_source": "Das Haus."}]}
    assert Matcher().answer(fragment, json.dumps(answer)) == []
    assert Matcher().answer(fragment.replace("house", "home"), json.dumps(answer)) != []
    shown = 'event: start\ndata: {"n": 1, ...}\n\n...\nevent: done\ndata: {"steps": 2, "result": {...as /x...}}'
    stream = (
        'event: start\ndata: {"n": 1, "m": 0}\n\nevent: step\ndata: {}\n\n: waiting\n\n'
        'event: done\ndata: {"steps": 2, "result": {}}\n\n'
    )
    assert Matcher().answer(shown, stream) == []
    assert Matcher().answer(shown, stream.replace('"steps": 2', '"steps": 3')) != []
    assert Matcher().answer(shown, stream.replace("event: done", "event: error")) != []
    head = 'HTTP/1.1 202 Accepted\nlocation: http://h/j/<id>\n\n{"job_id": "<id>", ...}'
    got = 'HTTP/1.1 202 Accepted\r\nserver: uvicorn\r\nLocation: http://h/j/q1\r\n\r\n{"job_id": "q1", "x": 0}'
    assert Matcher().answer(head, got) == []
    assert Matcher().answer(head, got.replace("202 Accepted", "200 OK")) != []
    assert Matcher().answer("That is a <b>small</b> house.\n...\nend", "That is a <b>small</b> house.\nx\nend\n") == []
    assert Matcher().answer("That is a <b>small</b> house.", "That is a small <b>house</b>.") != []


def test_blocks_are_read_with_their_marks_commands_and_answers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '<!-- example: run; poll; illustrative: a, b -->\n```console\n$ curl -s x \\\n    -d 1\n{"a": 1}\n'
        "$ crossalign translate y   # a comment\n```\n\n<!-- example: run -->\n```bash\n# setup\ncurl z\n```\n\n"
        '<!-- example: output -->\n```json\n{"b": 2}\n```\n\n```bash\ncrossalign serve\n```\n'
        "<!-- example: not run: it trains for hours -->\n```bash\nX=1 crossalign train\n```\n"
    )
    first, second, unmarked, not_run = read_blocks(page, tmp_path)
    assert [(c.text, c.shown) for c in first.commands()] == [
        ("curl -s x  -d 1", '{"a": 1}\n'),
        ("crossalign translate y   # a comment", None),
    ]
    assert first.runs and first.option("poll") == "" and first.illustrative == {"a", "b"} and first.name == "page.md:2"
    assert [(c.text, c.shown) for c in second.commands()] == [("curl z", '{"b": 2}')]
    assert unmarked.mark is None and unmarked.has_commands
    assert not not_run.runs and not_run.has_commands and not_run.mark == "not run: it trains for hours"


def test_the_runner_reports_wrong_answers_failed_commands_and_bad_files(tmp_path: Path) -> None:
    inputs, scratch = tmp_path / "inputs", tmp_path / "blocks"
    inputs.mkdir()
    scratch.mkdir()
    text = "$ printf 'That is a house.\\n'\nThat is a house.\n$ printf 'This.'\nThat.\n$ printf x > map.png\n$ exit 3\n"
    block = Block("page.md", 1, "console", text, "run")
    problems = Examples(inputs, scratch, DOCUMENTED_PORT, dict(os.environ)).run(block)
    assert len(problems) == 3, problems
    assert problems[0].startswith("$ printf 'This.'") and "shown 'That.', got 'This.'" in problems[0]
    assert "map.png is not a PNG" in problems[1] and "exit status 3" in problems[2]
