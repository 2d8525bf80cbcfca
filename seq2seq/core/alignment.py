"""From cross-attention to alignment maps: one rule, used by the API, the CLI and evaluation.

The rule (documented in docs/alignment.md):

1. Read one decoder layer's cross-attention, averaged over the chosen heads (all heads by
   default). Row i is the decoder step that *produced* target piece i; with
   `step_shift=True` row i is instead the step where piece i is the decoder *input*
   (Chen et al. 2020), which often aligns better.
2. Remove special tokens: the source EOS column and the EOS step row. Each row is
   renormalised to sum to 1.
3. Subword -> word: words are whitespace tokens with punctuation split off (`WORD_PATTERN`).
   A piece belongs to the words its characters overlap, in proportion to the overlap.
   Source side: weights are **summed** over a word's pieces (a word receives everything
   its pieces received). Target side: rows are **averaged** over a word's pieces (a word
   draws what its pieces drew on average). Rows are renormalised again.
4. Soft -> hard: each target word links to its argmax source word (optionally only when
   that weight reaches `threshold`). Links are Pharaoh `i-j`: i = source word, j = target word.

The pipeline, used by translation (the translator fills `TranslationResult.alignment` in
the same pass), teacher forcing (seq2seq.decoding.forced), the service and the CLIs alike:
`AlignmentOptions` (the one options type) -> `resolve(model config)` (defaults applied,
validated once, `AlignmentError`) -> `align()` (both levels) -> `concat()` (the sentences of
a longer text, block-diagonal). A new option goes into `AlignmentOptions` and its one use.

Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seq2seq.core.config import AlignmentError, AlignmentOptions

# A word: letters/digits with inner apostrophes or hyphens ("don't", "E-Mail"), or one
# punctuation/symbol character.
WORD_PATTERN = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]")
SPACE_MARK = "▁"


@dataclass(frozen=True)
class Token:
    text: str
    start: int  # character offset into the text, inclusive
    end: int  # exclusive


def is_punctuation(word: str) -> bool:
    """True for a word without any letter or digit ("," "?" "–"): the quality flags skip them."""
    return not any(character.isalnum() for character in word)


def words(text: str) -> list[Token]:
    """Whitespace tokens with punctuation split off, with character offsets."""
    return [Token(m.group(), m.start(), m.end()) for m in WORD_PATTERN.finditer(text)]


def pieces_with_offsets(pieces: list[str]) -> tuple[str, list[Token]]:
    """Rebuild the detokenized text from SentencePiece pieces and each piece's span in it.

    The span excludes the piece's leading space marker, so a piece covers only visible
    characters; a piece that is only the marker covers the space it stands for (`visible`).
    """
    text, tokens = "", []
    for piece in pieces:
        visible = piece.replace(SPACE_MARK, " ")
        if visible.startswith(" ") and not text:
            visible = visible.lstrip(" ")
        marker = len(visible) - len(visible.lstrip(" "))
        start = len(text) + (marker if marker < len(visible) else 0)
        text += visible
        tokens.append(Token(piece, start, len(text)))
    return text, tokens


def projection(pieces: list[Token], units: list[Token]) -> np.ndarray:
    """(n_pieces, n_units): share of each piece's characters that fall in each unit.

    A piece overlapping no unit (a bare space marker) gets an all-zero row.
    """
    if not pieces or not units:
        return np.zeros((len(pieces), len(units)), dtype=np.float64)
    piece_spans = np.array([(p.start, p.end) for p in pieces], dtype=np.float64)  # (P, 2)
    unit_spans = np.array([(u.start, u.end) for u in units], dtype=np.float64)  # (U, 2)
    overlap = np.minimum(piece_spans[:, 1:], unit_spans[:, 1]) - np.maximum(
        piece_spans[:, :1], unit_spans[:, 0]
    )  # (P, U) characters shared
    return normalize_rows(np.clip(overlap, 0.0, None))


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    sums = matrix.sum(axis=-1, keepdims=True)
    return np.divide(matrix, sums, out=np.zeros_like(matrix), where=sums > 0)


def source_rows(attention: np.ndarray, layer: int, heads: tuple[int, ...] = ()) -> np.ndarray:
    """(L, H, R, S+1) cross-attention of R decoder steps -> (R, S): the rule's step 1 and its
    source side of step 2 (the layer, the mean of `heads` (() = all), the source EOS column
    removed, each row renormalised). What a stream shows of a step as soon as it is decoded."""
    per_layer = attention[layer]  # (H, R, S+1)
    mean = per_layer[list(heads)].mean(axis=0) if heads else per_layer.mean(axis=0)
    return normalize_rows(mean[:, :-1].astype(np.float64))


def subword_map(attention: np.ndarray, layer: int, heads: tuple[int, ...] = (), step_shift: bool = False) -> np.ndarray:
    """(L, H, T+1, S+1) cross-attention -> (T, S) subword map, specials removed, rows sum to 1.

    T target pieces (EOS row removed), S source pieces (EOS column removed).
    """
    rows = source_rows(attention, layer, heads)  # (T+1, S)
    return rows[1:] if step_shift else rows[:-1]


def word_map(sub_map: np.ndarray, source_projection: np.ndarray, target_projection: np.ndarray) -> np.ndarray:
    """(T, S) subword map -> (Tw, Sw) word map: sum over source pieces, mean over target pieces."""
    to_source_words = sub_map @ source_projection  # (T, Sw): summed
    weights = target_projection / np.maximum(target_projection.sum(axis=0, keepdims=True), 1e-12)
    return normalize_rows(weights.T @ to_source_words)  # (Tw, Sw): averaged


def hard_links(matrix: np.ndarray, threshold: float = 0.0) -> list[tuple[int, int]]:
    """Argmax source for every target row -> sorted (source_index, target_index) links."""
    links = []
    for target_index, row in enumerate(matrix):
        if row.size and row.max() > 0 and row.max() >= threshold:
            links.append((int(row.argmax()), target_index))
    return sorted(links)


def to_pharaoh(links: list[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)


def from_pharaoh(text: str) -> list[tuple[int, int]]:
    """Parse `i-j` (or `i?j` for possible links, read as i-j) pairs; raises ValueError."""
    links = []
    for item in text.split():
        match = re.fullmatch(r"(\d+)[-?p](\d+)", item)
        if not match:
            raise ValueError(f"not a Pharaoh link: {item!r}")
        links.append((int(match.group(1)), int(match.group(2))))
    return links


@dataclass
class Alignment:
    level: str  # "subword" or "word"
    source_tokens: list[Token]  # columns
    target_tokens: list[Token]  # rows
    matrix: np.ndarray  # (rows, columns), each row sums to 1
    links: list[tuple[int, int]]  # (source index, target index)
    layer: int
    heads: tuple[int, ...]  # () = mean of all heads
    step_shift: bool

    @property
    def pharaoh(self) -> str:
        return to_pharaoh(self.links)

    def to_dict(self, decimals: int = 4) -> dict:
        return {
            "level": self.level,
            "source_tokens": [{"text": t.text, "start": t.start, "end": t.end} for t in self.source_tokens],
            "target_tokens": [{"text": t.text, "start": t.start, "end": t.end} for t in self.target_tokens],
            "matrix": np.round(self.matrix, decimals).tolist(),
            "links": self.pharaoh,
            "layer": self.layer,
            "heads": list(self.heads) or "mean",
            "step_shift": self.step_shift,
        }


@dataclass
class Alignments:
    """The maps of one translation read with one set of options, at both levels."""

    subword: Alignment  # rows = target pieces, columns = source pieces
    word: Alignment  # rows = target words, columns = source words
    level: str = "word"  # the level that was asked for

    def at(self, level: str) -> Alignment:
        return self.word if level == "word" else self.subword

    @property
    def requested(self) -> Alignment:
        return self.at(self.level)

    def shifted(self, source_offset: int, target_offset: int) -> Alignments:
        """Both maps with token offsets moved by the sentence's position in a longer text."""
        return Alignments(
            concat([(self.subword, source_offset, target_offset)]),
            concat([(self.word, source_offset, target_offset)]),
            self.level,
        )


def visible(piece: Token, text: str) -> Token:
    """The piece's span without the whitespace SentencePiece offsets include before a
    word-initial piece, labelled with the text it covers.

    The rule every token of a map keeps: `text[start:end] == token.text`. A piece that is
    only the space marker ("▁" before "(" in "Haus (rot)") covers the whitespace it stands
    for, and its text is that whitespace; at the very start of a text, where SentencePiece
    adds a marker for no whitespace, it covers nothing and its text is "". (A label shows
    either as "▁": `label`.)"""
    start = piece.start
    while start < piece.end and text[start].isspace():
        start += 1
    if start == piece.end:  # only whitespace (or nothing): the piece is a bare space marker
        start = piece.start
    return Token(text[start : piece.end], start, piece.end)


def label(text: str) -> str:
    """How a token's text is shown on a heatmap axis: as it is, or "▁" for a bare space
    marker (whose text is whitespace or empty: `visible`)."""
    return text if text.strip() else SPACE_MARK


def align(
    attention: np.ndarray,
    source_text: str,
    source_pieces: list[Token],
    target_text: str,
    target_pieces: list[Token],
    options: AlignmentOptions,
) -> Alignments:
    """Build the alignment of one translation, at both levels, by the rule above.

    attention (L, H, T+1, S+1) from the search or from teacher forcing; `source_pieces` and
    `target_pieces` carry character offsets into `source_text` / `target_text`
    (Tokenizer.encode_with_offsets, or `pieces_with_offsets` of a detokenized translation).
    `options` must be resolved (`AlignmentOptions.resolve`).
    """
    if options.layer is None or options.heads is None or options.step_shift is None:
        raise AlignmentError("alignment options must be resolved against the model first")
    layer, heads, shift = options.layer, options.heads, options.step_shift
    sub = subword_map(attention, layer, heads, shift)  # (T, S)
    source_pieces = [visible(p, source_text) for p in source_pieces]
    target_pieces = [visible(p, target_text) for p in target_pieces]
    source_words, target_words = words(source_text), words(target_text)
    matrix = word_map(sub, projection(source_pieces, source_words), projection(target_pieces, target_words))
    return Alignments(
        subword=Alignment(
            "subword", source_pieces, target_pieces, sub, hard_links(sub, options.threshold), layer, heads, shift
        ),
        word=Alignment(
            "word", source_words, target_words, matrix, hard_links(matrix, options.threshold), layer, heads, shift
        ),
        level=options.level,
    )


def concat(parts: Sequence[tuple[Alignment, int, int]], options: AlignmentOptions = AlignmentOptions()) -> Alignment:
    """Per-sentence alignments -> one block-diagonal alignment of the whole text.

    parts: (alignment, source offset of its sentence, target offset of its translation).
    Token offsets are shifted, the matrices placed on the diagonal (a sentence draws
    nothing from another sentence) and links renumbered; rows still sum to 1. With no
    parts: an empty map labelled with `options` (resolved).
    """
    if not parts:
        return Alignment(
            options.level,
            [],
            [],
            np.zeros((0, 0)),
            [],
            options.layer or 0,
            options.heads or (),
            bool(options.step_shift),
        )
    first = parts[0][0]
    rows = sum(a.matrix.shape[0] for a, _, _ in parts)
    columns = sum(a.matrix.shape[1] for a, _, _ in parts)
    matrix = np.zeros((rows, columns), dtype=np.float64)
    source_tokens: list[Token] = []
    target_tokens: list[Token] = []
    links: list[tuple[int, int]] = []
    for alignment, source_offset, target_offset in parts:
        row, column = len(target_tokens), len(source_tokens)
        height, width = alignment.matrix.shape
        matrix[row : row + height, column : column + width] = alignment.matrix
        links += [(i + column, j + row) for i, j in alignment.links]
        source_tokens += [
            Token(t.text, t.start + source_offset, t.end + source_offset) for t in alignment.source_tokens
        ]
        target_tokens += [
            Token(t.text, t.start + target_offset, t.end + target_offset) for t in alignment.target_tokens
        ]
    return Alignment(
        first.level, source_tokens, target_tokens, matrix, sorted(links), first.layer, first.heads, first.step_shift
    )
