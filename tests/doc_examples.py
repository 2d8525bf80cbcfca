"""The documentation's examples as the tests read them: which blocks run, their commands, and
whether an answer is the one a page shows.

The convention (docs/design.md, "Examples that run"): an HTML comment on the line before a
fenced block says what the tests do with it.

- `<!-- example: run -->`: every command of the block runs against the tests' server, in a
  scratch directory. In a `console` block, a `$ ` line starts a command (a line ending in `\\`
  continues it) and the lines after it, up to the next `$ `, are its answer as shown. Options
  follow after `;`: `illustrative: key, key` (those keys' values vary from run to run and are
  compared by type only), `poll` (a command whose answer is not yet the one shown is asked
  again, as a client polls a job).
- `<!-- example: output -->`: the block is the answer of the last command of the run block
  before it (a `bash` block followed by a `json` or `text` block).
- `<!-- example: not run: REASON -->`: a block the tests cannot run (training for hours, a
  cluster, docker), with the reason where a reader of the page's source sees it.

A shown answer is a pattern: `...` (or the string `"..."`, or a `"...": "..."` entry) stands
for what the page leaves out (list items, object entries, events, lines; `...a remark...`
too), `<id>` for an id the server makes (bound on first sight, the same ever after, and put
into the later commands), every number is compared to the precision shown, and everything
else exactly (an object without `...` has exactly the keys shown). A shown answer that begins
with `...` is a fragment: some object in the answer has those entries.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

MARK = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w-]*)")
SHELL_LANGUAGES = {"bash", "console", "sh", "shell"}
# A command word: at a line's start or after `$ `, `|`, `&&`, `;`, `(`, `"` or an assignment's space.
COMMAND_WORD = re.compile(r"(?:^|[\s|;&(\"])(?:\.venv/bin/)?(curl|crossalign)(?=\s|$)", re.M)
PLACEHOLDERS = {"<id>": "id"}  # what a page writes for a value the server makes, and its name
ELLIPSIS = "..."


@dataclass
class Command:
    """One command of a run block, as written, and the answer the page shows (None: none)."""

    text: str
    shown: str | None = None


@dataclass
class Block:
    """A fenced block of a page, with the marker before it (None: unmarked)."""

    page: str
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    mark: str | None
    output: Block | None = None  # the `output` block that follows a run block

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.mark is not None and self.mark.split(";")[0].strip() == "run"

    def option(self, name: str) -> str | None:
        """The value of `; name: value` in the marker ("" for a bare `; name`), None if absent."""
        for part in (self.mark or "").split(";")[1:]:
            key, _, value = part.strip().partition(":")
            if key.strip() == name:
                return value.strip()
        return None

    @property
    def illustrative(self) -> set[str]:
        return {k.strip() for k in (self.option("illustrative") or "").split(",") if k.strip()}

    @property
    def has_commands(self) -> bool:
        """A shell block that runs `curl` or `crossalign`: the tests run it or it says why not."""
        return self.language in SHELL_LANGUAGES and bool(COMMAND_WORD.search(self.text))

    def commands(self) -> list[Command]:
        """The block's commands with their shown answers (see the module's docstring)."""
        commands: list[Command] = []
        console = self.language == "console"
        lines = self.text.splitlines()
        index = 0
        while index < len(lines):
            line = lines[index]
            index += 1
            if console and not line.startswith("$ "):
                if commands and (line.strip() or commands[-1].shown):
                    commands[-1].shown = (commands[-1].shown or "") + line + "\n"
                continue
            if not console and (not line.strip() or line.lstrip().startswith("#")):
                continue
            text = line[2:] if console else line
            while text.rstrip().endswith("\\") and index < len(lines):
                text = text.rstrip()[:-1] + " " + lines[index].strip()
                index += 1
            commands.append(Command(text.strip()))
        if self.output is not None and commands:
            commands[-1].shown = self.output.text
        return commands


def read_blocks(path: Path, root: Path) -> list[Block]:
    """The fenced blocks of a markdown page, each with its marker; `output` blocks attached to
    the run block before them."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        start, fence = index, opening.group(1)
        index += 1
        body = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1
        marker = MARK.match(lines[start - 1]) if start else None
        indent = len(lines[start]) - len(lines[start].lstrip())
        text = "\n".join(line[indent:] for line in body)
        mark = marker.group(1) if marker else None
        block = Block(str(path.relative_to(root)), start + 1, opening.group(2), text, mark)
        if block.mark == "output":
            if not blocks or not blocks[-1].runs:
                raise ValueError(f"{block.name}: an output block must follow a run block")
            blocks[-1].output = block
        else:
            blocks.append(block)
    return blocks


# ------------------------------------------------------------------ shown answers as patterns


class Gap:
    """`...` in a list (or a stream of events, or lines): any number of items."""


GAP = Gap()


@dataclass
class Obj:
    entries: dict[str, object]
    open: bool  # `...` among the entries: others may be there too


@dataclass
class Num:
    text: str  # as shown: its decimals are the precision compared


@dataclass
class Fragment:
    """Entries some object of the answer has (a shown answer that begins with `...`)."""

    obj: Obj


TOKEN = re.compile(
    r"\s*(?:(?P<gap>\.\.\.(?:[^.{}\[\]\",:]+\.\.\.)?)|(?P<string>\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<word>true|false|null)|(?P<punct>[{}\[\]:,]))"
)


def tokens(text: str) -> list[tuple[str, str]]:
    found, position = [], 0
    text = text.strip()
    while position < len(text):
        match = TOKEN.match(text, position)
        if not match:
            raise ValueError(f"not a shown JSON answer at {text[position : position + 30]!r}")
        found.append((match.lastgroup or "", match.group(match.lastgroup or 0)))
        position = match.end()
    return found


def parse_pattern(text: str) -> object:
    """A shown JSON answer as a pattern (ValueError if it is not one)."""
    items = tokens(text)
    if items and items[0][0] == "gap" and len(items) > 2 and items[1][0] == "string" and items[2] == ("punct", ":"):
        items = [("punct", "{"), *items, ("punct", "}")]
        value, rest = _value(items, 0)
        if rest != len(items):
            raise ValueError("text after the shown answer")
        return Fragment(value)
    value, rest = _value(items, 0)
    if rest != len(items):
        raise ValueError("text after the shown answer")
    return value


def _value(items: list[tuple[str, str]], at: int) -> tuple[object, int]:
    kind, text = items[at]
    if kind == "gap" or (kind == "string" and json.loads(text) == ELLIPSIS):
        return GAP, at + 1
    if kind == "string":
        return json.loads(text), at + 1
    if kind == "number":
        return Num(text), at + 1
    if kind == "word":
        return json.loads(text), at + 1
    if text == "[":
        values, at = [], at + 1
        while items[at] != ("punct", "]"):
            if items[at] == ("punct", ","):
                at += 1
                continue
            value, at = _value(items, at)
            values.append(value)
        return values, at + 1
    if text == "{":
        entries, is_open, at = {}, False, at + 1
        while items[at] != ("punct", "}"):
            if items[at] == ("punct", ","):
                at += 1
            elif items[at][0] == "gap":
                is_open, at = True, at + 1
            else:
                key = json.loads(items[at][1])
                if items[at + 1] != ("punct", ":"):
                    raise ValueError(f"no ':' after {key!r}")
                value, at = _value(items, at + 2)
                if key == ELLIPSIS:
                    is_open = True
                else:
                    entries[key] = value
        return Obj(entries, is_open), at + 1
    raise ValueError(f"unexpected {text!r}")


def objects(value: object):
    """Every object in a JSON value, outermost first."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from objects(item)


def same_kind(pattern: object, actual: object, where: str) -> list[str]:
    """An illustrative value: only its kind is compared."""
    kinds = {Num: (int, float), str: (str,), list: (list,), Obj: (dict,)}
    for kind, accepted in kinds.items():
        if isinstance(pattern, kind) and (isinstance(actual, bool) or not isinstance(actual, accepted)):
            return [f"{where}: shown a {kind.__name__}, got {short(actual)}"]
    return []


def short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class Matcher:
    """Compares answers to shown patterns; `bindings` holds the placeholders seen so far."""

    illustrative: set[str] = field(default_factory=set)
    bindings: dict[str, str] = field(default_factory=dict)

    def json(self, pattern: object, actual: object, where: str = "answer") -> list[str]:
        if isinstance(pattern, Fragment):
            tries = [self.json(pattern.obj, o, f"{where} (nearest object)") for o in objects(actual)]
            if any(not problems for problems in tries):
                return []
            # the nearest: the object with the most of the keys shown, then the fewest differences
            nearest = min(tries, key=lambda problems: (sum(": no '" in p for p in problems), len(problems)), default=[])
            return [f"{where}: no object has the entries shown: {sorted(pattern.obj.entries)}", *nearest[:3]]
        if isinstance(pattern, Obj):
            if not isinstance(actual, dict):
                return [f"{where}: shown an object, got {short(actual)}"]
            problems = [f"{where}: no {k!r}" for k in pattern.entries if k not in actual]
            if not pattern.open and set(actual) - set(pattern.entries):
                problems.append(f"{where}: keys not shown: {sorted(set(actual) - set(pattern.entries))}")
            for key, value in pattern.entries.items():
                if key in actual:
                    if key in self.illustrative:
                        problems += same_kind(value, actual[key], f"{where}.{key}")
                    else:
                        problems += self.json(value, actual[key], f"{where}.{key}")
            return problems
        if isinstance(pattern, list):
            if not isinstance(actual, list):
                return [f"{where}: shown a list, got {short(actual)}"]
            return self.sequence(pattern, actual, where, self.json)
        if isinstance(pattern, Num):
            shown = float(pattern.text)
            decimals = len(pattern.text.partition(".")[2].lower().partition("e")[0])
            if isinstance(actual, bool) or not isinstance(actual, int | float):
                return [f"{where}: shown {pattern.text}, got {short(actual)}"]
            if not math.isclose(actual, shown, abs_tol=0.5 * 10**-decimals + 1e-9):
                return [f"{where}: shown {pattern.text}, got {actual}"]
            return []
        if isinstance(pattern, str):
            return self.string(pattern, actual, where)
        if pattern is not actual:
            return [f"{where}: shown {json.dumps(pattern)}, got {short(actual)}"]
        return []

    def string(self, pattern: str, actual: object, where: str) -> list[str]:
        if not isinstance(actual, str):
            return [f"{where}: shown {pattern!r}, got {short(actual)}"]
        regex = re.escape(pattern)
        for placeholder, name in PLACEHOLDERS.items():
            bound = self.bindings.get(name)
            first = re.escape(bound) if bound else f"(?P<{name}>[A-Za-z0-9_-]+)"
            again = re.escape(bound) if bound else f"(?P={name})"
            head, *rest = regex.split(re.escape(placeholder))
            regex = head + "".join((again if i else first) + part for i, part in enumerate(rest))
        match = re.fullmatch(regex, actual)
        if not match:
            return [f"{where}: shown {pattern!r}, got {actual!r}"]
        self.bindings.update({k: v for k, v in match.groupdict().items() if v})
        return []

    def sequence(self, pattern: list, actual: list, where: str, compare) -> list[str]:
        """Items in order; a GAP stands for any number of them."""
        if GAP not in pattern:
            if len(pattern) != len(actual):
                return [f"{where}: {len(pattern)} items shown, {len(actual)} answered"]
            return [p for index, (s, a) in enumerate(zip(pattern, actual)) for p in compare(s, a, f"{where}[{index}]")]

        def fits(i: int, j: int) -> bool:
            if i == len(pattern):
                return j == len(actual)
            if pattern[i] is GAP:
                return any(fits(i + 1, k) for k in range(j, len(actual) + 1))
            return j < len(actual) and not compare(pattern[i], actual[j], where) and fits(i + 1, j + 1)

        if fits(0, 0):
            return []
        why = self.first_miss(pattern, actual, where, compare)
        return [f"{where}: the items shown are not in the answer's {len(actual)}, in order", *why]

    def first_miss(self, pattern: list, actual: list, where: str, compare) -> list[str]:
        """Why the first shown item that cannot be placed (in order, greedily) is not there: its
        differences from the answer's item at that place, or the nearest one after a gap."""
        j, after_gap = 0, False
        for i, item in enumerate(pattern):
            if item is GAP:
                after_gap = True
                continue
            candidates = range(j, len(actual)) if after_gap else range(j, min(j + 1, len(actual)))
            tries = [(compare(item, actual[k], f"{where}[{k}]"), k) for k in candidates]
            fitting = [k for problems, k in tries if not problems]
            if not fitting:
                if not tries:
                    return [f"{where}: nothing left for shown item {i}"]
                return min(tries, key=lambda t: len(t[0]))[0][:5]
            j, after_gap = fitting[0] + 1, False
        return [f"{where}: {len(actual) - j} items after the last one shown"] if j < len(actual) else []

    def answer(self, shown: str, actual: str) -> list[str]:
        """Problems of an answer (a command's standard output) against the one shown."""
        shown = shown.strip("\n")
        if shown.startswith("HTTP/"):
            return self.http(shown, actual)
        if shown.startswith("event:"):
            return self.events(shown, actual)
        try:
            pattern = parse_pattern(shown)
        except ValueError:
            return self.lines(shown, actual)
        try:
            value = json.loads(actual)
        except ValueError:
            return [f"shown a JSON answer, got {actual[:80]!r}"]
        return self.json(pattern, value)

    def http(self, shown: str, actual: str) -> list[str]:
        """`curl -i`: the status line, the headers shown (others may be there), the body."""
        shown_head, _, shown_body = shown.partition("\n\n")
        head, _, body = actual.replace("\r\n", "\n").partition("\n\n")
        status, *header_lines = head.split("\n")
        shown_status, *shown_headers = shown_head.split("\n")
        problems = [] if status == shown_status else [f"status line: shown {shown_status!r}, got {status!r}"]
        headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
        for line in shown_headers:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name not in headers:
                problems.append(f"no header {name!r}")
            elif name not in self.illustrative:
                problems += self.string(value.strip(), headers[name], name)
        return problems + (self.answer(shown_body, body) if shown_body.strip() else [])

    def events(self, shown: str, actual: str) -> list[str]:
        """Server-Sent Events: each shown event's name and data, in order; `...` any events."""
        pattern: list = []
        for line in shown.splitlines():
            if line.strip() == ELLIPSIS:
                pattern.append(GAP)
            elif line.startswith("event:"):
                pattern.append([line[6:].strip(), None])
            elif line.startswith("data:"):
                pattern[-1][1] = parse_pattern(line[5:])
        answered = []
        for chunk in actual.replace("\r\n", "\n").split("\n\n"):
            fields = dict(line.partition(":")[::2] for line in chunk.splitlines() if not line.startswith(":"))
            if "event" in fields:
                answered.append([fields["event"].strip(), json.loads(fields.get("data", "null"))])

        def compare(event: list, got: list, where: str) -> list[str]:
            if event[0] != got[0]:
                return [f"{where}: shown event {event[0]!r}, got {got[0]!r}"]
            return self.json(event[1], got[1], f"{where} ({got[0]})") if event[1] is not None else []

        return self.sequence(pattern, answered, "events", compare)

    def lines(self, shown: str, actual: str) -> list[str]:
        """Plain text, line by line; a `...` line stands for any lines."""
        pattern = [GAP if line.strip() == ELLIPSIS else line.rstrip() for line in shown.splitlines()]
        got = [line.rstrip() for line in actual.strip("\n").splitlines()]
        return self.sequence(pattern, got, "lines", self.string)
