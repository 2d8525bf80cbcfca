"""Where HTML's tokens begin and end, as the HTML standard's tokenizer has them (WHATWG HTML,
13.2.5), so that what a browser reads as text or as part of another token is never taken for
a tag that the placement could move.

`tokens(markup)` cuts `markup` into (kind, tag name, raw text) tokens that cover it exactly:

- `start`, `end`, `empty` (a start tag closed by `/>`): tags, their extent found by the
  standard's attribute states (a quoted value may hold `>`; an end tag may have attributes;
  `<a href=x/>` is not self-closing);
- `text`: the text between tags, character references included;
- `other`: a comment (`-->`, `--!>`, and `<!-->` end one), a doctype, a bogus comment (`<?...>`,
  `<!...>`, `</ ...>`, and `<![CDATA[` in HTML, which ends at the first `>`);
- `raw`: the content of an element whose content is not markup, between its `start` and its
  `end` token: the raw text elements (`script` with its escape states, `style`, `xmp`,
  `iframe`, `noembed`, `noframes`, `noscript` as a browser with scripting reads it,
  `textarea`, `title`; a `/>` on them changes nothing), and foreign content (`svg`, `math`:
  CDATA sections are text there, raw text elements are not raw; it also ends where a browser
  leaves it, before a tag such as `<p>` or `<b>`, and then has no `end` token);
- `tail`: what runs to the end of the input unfinished: an unclosed comment, raw text element
  or tag, `<plaintext>` and what follows it, foreign content a browser could read otherwise
  than we can tell without its tree (an HTML element inside `foreignObject`, an end tag of
  no element it opened). It is always the last token, and must stay last.

Tag names are ASCII-lowercased (`<ſcript>` is not `script`). `tally` counts every token but
text against the file's `max_tags` as it is found.
"""

from __future__ import annotations

import re
import string

from seq2seq.documents.formats.limits import Tally

RAW_TEXT = frozenset(
    ["script", "style", "xmp", "iframe", "noembed", "noframes", "noscript", "textarea", "title", "plaintext"]
)
FOREIGN = frozenset(["svg", "math"])
# Start tags that end foreign content (13.2.6.5, "rules for parsing tokens in foreign content").
BREAKOUT = frozenset(
    """b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing menu
    meta nobr ol p pre ruby s small span strong strike sub sup table tt u ul var""".split()  # noqa: SIM905
)
SVG_INTEGRATION = frozenset(["foreignobject", "desc", "title"])  # HTML integration points
MATH_TEXT_INTEGRATION = frozenset(["mi", "mo", "mn", "ms", "mtext"])

_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_SPACE = re.compile(r"[\t\n\f\r ]*")
_TAG_NAME = re.compile(r"[^\t\n\f\r />]*")
_ATTRIBUTE_NAME = re.compile(r"[^\t\n\f\r />=]*")
_UNQUOTED = re.compile(r"[^\t\n\f\r >]*")
_SCRIPT_MARKS = re.compile(r"<!--|-->|<(/?)script(?=[\t\n\f\r />])", re.IGNORECASE | re.ASCII)

Token = tuple[str, str, str]


def tag_end(markup: str, at: int, attributes: dict[str, str] | None = None) -> tuple[int, bool]:
    """The end of the tag whose name ends at `at` (the index after its `>`, -1 if the input
    ends first: a browser drops such a tag) and whether it is self-closing (`/>`). Each
    attribute's name and value go into `attributes` (the first of a name wins)."""
    size, i = len(markup), at
    while True:
        i = _SPACE.match(markup, i).end()
        if i >= size:
            return -1, False
        if markup[i] == ">":
            return i + 1, False
        if markup[i] == "/":
            if markup.startswith(">", i + 1):
                return i + 2, True
            i += 1
            continue
        start, i = i, _ATTRIBUTE_NAME.match(markup, i + 1).end()  # its first character may be "="
        name, value = markup[start:i].translate(_LOWER), ""
        after = _SPACE.match(markup, i).end()
        if markup.startswith("=", after):
            i = _SPACE.match(markup, after + 1).end()
            if i >= size:
                return -1, False
            if markup[i] in "\"'":
                close = markup.find(markup[i], i + 1)
                if close < 0:
                    return -1, False
                value, i = markup[i + 1 : close], close + 1
            elif markup[i] != ">":
                end = _UNQUOTED.match(markup, i).end()
                value, i = markup[i:end], end
        else:
            i = after
        if attributes is not None:
            attributes.setdefault(name, value)


def tag_attributes(tag: str) -> dict[str, str]:
    """The attributes of a start tag as a browser reads them (names lowercased, raw values)."""
    found: dict[str, str] = {}
    tag_end(tag, _TAG_NAME.match(tag, 1).end(), found)
    return found


def _markup_end(markup: str, lt: int) -> int:
    """The end of the comment, doctype or bogus comment at `lt` (-1: it runs to the end)."""
    if markup.startswith("<!--", lt):
        dashes = re.compile(r"-?>").match(markup, lt + 4)  # <!--> and <!---> end at once
        if dashes:
            return dashes.end()
        ends = [found + len(mark) for mark in ("-->", "--!>") if (found := markup.find(mark, lt + 4)) >= 0]
        return min(ends) if ends else -1
    close = markup.find(">", lt + 2)
    return close + 1 if close >= 0 else -1


def _raw_text_end(markup: str, start: int, name: str) -> int:
    """Where the content of raw text element `name`, from `start`, ends: at its end tag (-1:
    none, or `plaintext`, whose content is the rest of the input)."""
    if name == "plaintext":
        return -1
    if name != "script":
        found = re.compile(rf"</{name}(?=[\t\n\f\r />])", re.IGNORECASE | re.ASCII).search(markup, start)
        return found.start() if found else -1
    state, position = "data", start  # the script data states: data, escaped, double escaped
    while found := _SCRIPT_MARKS.search(markup, position):
        position = found.end()
        if found.group() == "<!--":
            state = "escaped" if state == "data" else state
            dashes = re.compile(r"-*>").match(markup, position)  # "--" then ">": back to data
            if dashes:
                state, position = "data", dashes.end()
        elif found.group() == "-->":
            state = "data"
        elif found.group(1):
            if state != "double":
                return found.start()
            state = "escaped"
        elif state == "escaped":
            state = "double"
    return -1


def _foreign_end(markup: str, start: int, root: str, tally: Tally | None) -> tuple[int, int]:
    """(where the foreign content opened by `root` before `start` ends, where its end tag
    ends): the end tag that closes `root`, or before a tag that makes a browser leave it (both
    the same index then); (-1, -1) where it runs to the end or we cannot tell (module doc)."""
    stack = [(root, root, False)]  # (name, namespace, an HTML integration point)
    position = start
    while (lt := markup.find("<", position)) >= 0:
        name, space, html_point = stack[-1]
        text_point = space == "math" and name in MATH_TEXT_INTEGRATION
        after = markup[lt + 1 : lt + 2]
        if tally is not None and (after.isascii() and after.isalpha() or after in "!?/"):
            tally.add("tags")
        if markup.startswith("<![CDATA[", lt):  # text in foreign content
            close = markup.find("]]>", lt + 9)
            if close < 0:
                return -1, -1
            position = close + 3
        elif after in ("!", "?") or (after == "/" and not markup[lt + 2 : lt + 3].isalpha()):
            position = _markup_end(markup, lt) if not markup.startswith("</>", lt) else lt + 3
            if position < 0:
                return -1, -1
        elif after == "/" and markup[lt + 2 : lt + 3].isascii():
            name_end = _TAG_NAME.match(markup, lt + 2).end()
            tag = markup[lt + 2 : name_end].translate(_LOWER)
            end, _ = tag_end(markup, name_end)
            if end < 0:
                return -1, -1
            if tag in ("br", "p"):
                return lt, lt
            depth = next((k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == tag), None)
            if depth is None:  # an end tag for an element outside: the browser's tree decides
                return -1, -1
            del stack[depth:]
            if not stack:
                return lt, end
            position = end
        elif after.isascii() and after.isalpha():
            name_end = _TAG_NAME.match(markup, lt + 1).end()
            tag, attributes = markup[lt + 1 : name_end].translate(_LOWER), {}
            end, closed = tag_end(markup, name_end, attributes)
            if end < 0:
                return -1, -1
            by_html = html_point or (text_point and tag not in ("mglyph", "malignmark"))
            if by_html or (name == "annotation-xml" and tag == "svg"):
                if tag not in FOREIGN:  # an HTML element inside: its rules are the tree's
                    return -1, -1
                space = tag
            elif tag in BREAKOUT or (tag == "font" and attributes.keys() & {"color", "face", "size"}):
                return lt, lt
            encoding = attributes.get("encoding", "").translate(_LOWER)
            point = (space == "svg" and tag in SVG_INTEGRATION) or (
                space == "math" and tag == "annotation-xml" and encoding in ("text/html", "application/xhtml+xml")
            )
            if not closed:
                stack.append((tag, space, point))
            position = end
        else:
            position = lt + 1
    return -1, -1


def _token_at(markup: str, lt: int, tally: Tally | None) -> list[tuple[str, str, int, int]] | None:
    """The token(s) (kind, name, start, end) that the "<" at `lt` begins: none if it is text,
    None if what it begins runs to the end of the input."""
    after, following = markup[lt + 1 : lt + 2], markup[lt + 2 : lt + 3]
    if after.isascii() and after.isalpha():  # a start tag
        name_end = _TAG_NAME.match(markup, lt + 1).end()
        name = markup[lt + 1 : name_end].translate(_LOWER)
        end, closed = tag_end(markup, name_end)
        if end < 0:
            return None
        if name in RAW_TEXT:
            stop = _raw_text_end(markup, end, name)
            close = tag_end(markup, stop + 2 + len(name))[0] if stop >= 0 else -1
        elif name in FOREIGN and not closed:
            stop, close = _foreign_end(markup, end, name, tally)
        else:
            return [("empty" if closed else "start", name, lt, end)]
        if close < 0:
            return None
        return [("start", name, lt, end), ("raw", name, end, stop)] + (
            [("end", name, stop, close)] if close > stop else []
        )
    if after == "/" and following.isascii() and following.isalpha():  # an end tag
        name_end = _TAG_NAME.match(markup, lt + 2).end()
        end, _ = tag_end(markup, name_end)
        return [("end", markup[lt + 2 : name_end].translate(_LOWER), lt, end)] if end >= 0 else None
    if after == "/" and following == ">":  # "</>": nothing at all to a browser
        return [("other", "", lt, lt + 3)]
    if after in ("!", "?") or (after == "/" and following):  # a comment, doctype or bogus comment
        end = _markup_end(markup, lt)
        return [("other", "", lt, end)] if end >= 0 else None
    return []


def tokens(markup: str, tally: Tally | None = None) -> list[Token]:
    """(kind, tag name, raw text) of every token of `markup`, which they cover exactly (module doc)."""
    out: list[Token] = []
    done = position = 0  # the input before `done` is in `out`; "<" is looked for from `position`
    while (lt := markup.find("<", position)) >= 0:
        found = _token_at(markup, lt, tally)
        if found is None:
            if lt > done:
                out.append(("text", "", markup[done:lt]))
            out.append(("tail", "", markup[lt:]))
            return out
        if not found:
            position = lt + 1
            continue
        for kind, name, start, end in found:
            if start > done:
                out.append(("text", "", markup[done:start]))
            out.append((kind, name, markup[start:end]))
            done = end
            if tally is not None and kind != "raw":
                tally.add("tags")
        position = done
    if done < len(markup):
        out.append(("text", "", markup[done:]))
    return out
