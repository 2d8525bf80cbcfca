"""The input rules: which texts may be translated, the same for the service and the CLIs.

A text is refused, with a message that says where, when it

- is empty or only whitespace (nothing to translate; the model would invent a sentence);
- is longer than the caller's limit (characters, as Python counts them);
- contains a control character other than TAB, LF and CR (C0, DEL and C1: a NUL or an
  escape sequence is never language, and SentencePiece maps them to unknown pieces);
- contains a lone UTF-16 surrogate (U+D800..U+DFFF). JSON may spell one (`"\\ud800"`),
  but it is no character: it cannot be encoded as UTF-8, and SentencePiece raises on it.
  Checked here, before a text joins a batch, so it never fails the texts beside it.

`text_problem` is the one check; callers put the returned message in their own error
(an HTTP 400, a batch record's `error`), and `printable` makes a refused text fit to be
shown in that error (UTF-8 cannot hold a lone surrogate). Torch-free and dependency-free.
"""

from __future__ import annotations

import re

# Control characters a text may not contain: C0 except TAB, LF, CR; DEL; C1.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
SURROGATES = re.compile(r"[\ud800-\udfff]")
# The same rules as a JSON-Schema `pattern` (the OpenAPI document's constraint on every text
# field): one character that is neither whitespace nor refused, and none refused around it.
# Surrogates are left out: schema validators match Unicode scalar values, which cannot hold
# a lone surrogate, and reject a pattern that names them (the rule holds all the same).
_ALLOWED = r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
TEXT_PATTERN = rf"^{_ALLOWED}*[^\s\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]{_ALLOWED}*$"
TEXT_RULES = (
    "not empty or only whitespace; no control characters except TAB, LF, CR; no lone surrogates (\\ud800-\\udfff)"
)


def text_problem(text: str, max_chars: int | None = None) -> str | None:
    """Why `text` cannot be translated (one sentence, no trailing period), or None if it can.

    Positions in the message are 1-based character columns of `text`.
    """
    if not text.strip():
        return "empty text" if not text else "text is only whitespace"
    if max_chars is not None and len(text) > max_chars:
        return f"text too long: {len(text)} characters (limit {max_chars})"
    bad = SURROGATES.search(text)
    if bad:
        return (
            f"lone surrogate U+{ord(bad.group()):04X} at column {bad.start() + 1} "
            "(not a character; the text is not valid Unicode)"
        )
    bad = CONTROL_CHARACTERS.search(text)
    if bad:
        return f"control character U+{ord(bad.group()):04X} at column {bad.start() + 1}"
    return None


def printable(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, so that it can be written as UTF-8
    (the `source` of an error record); other refused characters are kept as they are."""
    return SURROGATES.sub("\ufffd", text)
