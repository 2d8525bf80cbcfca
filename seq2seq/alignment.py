"""From cross-attention to alignment maps: one rule, used by the API, the CLI and evaluation.

The rule (documented in README, "Alignment maps"):

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

Torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# A word: letters/digits with inner apostrophes or hyphens ("don't", "E-Mail"), or one
# punctuation/symbol character.
WORD_PATTERN = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]")
SPACE_MARK = "▁"


@dataclass(frozen=True)
class Token:
    text: str
    start: int   # character offset into the text, inclusive
    end: int     # exclusive


def words(text: str) -> list[Token]:
    """Whitespace tokens with punctuation split off, with character offsets."""
    return [Token(m.group(), m.start(), m.end()) for m in WORD_PATTERN.finditer(text)]


def pieces_with_offsets(pieces: list[str]) -> tuple[str, list[Token]]:
    """Rebuild the detokenized text from SentencePiece pieces and each piece's span in it.

    The span excludes the piece's leading space marker, so a piece covers only visible
    characters.
    """
    text, tokens = "", []
    for piece in pieces:
        visible = piece.replace(SPACE_MARK, " ")
        if visible.startswith(" ") and not text:
            visible = visible.lstrip(" ")
        start = len(text) + (len(visible) - len(visible.lstrip(" ")))
        text += visible
        tokens.append(Token(piece, start, len(text)))
    return text, tokens


def projection(pieces: list[Token], units: list[Token]) -> np.ndarray:
    """(n_pieces, n_units): share of each piece's characters that fall in each unit.

    A piece overlapping no unit (a bare space marker) gets an all-zero row.
    """
    matrix = np.zeros((len(pieces), len(units)), dtype=np.float64)
    for i, piece in enumerate(pieces):
        for j, unit in enumerate(units):
            overlap = min(piece.end, unit.end) - max(piece.start, unit.start)
            if overlap > 0:
                matrix[i, j] = overlap
        total = matrix[i].sum()
        if total > 0:
            matrix[i] /= total
    return matrix


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    sums = matrix.sum(axis=-1, keepdims=True)
    return np.divide(matrix, sums, out=np.zeros_like(matrix), where=sums > 0)


def subword_map(attention: np.ndarray, layer: int, heads: tuple[int, ...] = (), step_shift: bool = False) -> np.ndarray:
    """(L, H, T+1, S+1) cross-attention -> (T, S) subword map, specials removed, rows sum to 1.

    T target pieces (EOS row removed), S source pieces (EOS column removed).
    """
    per_layer = attention[layer]                                      # (H, T+1, S+1)
    mean = per_layer[list(heads)].mean(axis=0) if heads else per_layer.mean(axis=0)
    rows = mean[1:] if step_shift else mean[:-1]                      # (T, S+1)
    return normalize_rows(rows[:, :-1].astype(np.float64))


def word_map(sub_map: np.ndarray, source_projection: np.ndarray, target_projection: np.ndarray) -> np.ndarray:
    """(T, S) subword map -> (Tw, Sw) word map: sum over source pieces, mean over target pieces."""
    to_source_words = sub_map @ source_projection                     # (T, Sw): summed
    weights = target_projection / np.maximum(target_projection.sum(axis=0, keepdims=True), 1e-12)
    return normalize_rows(weights.T @ to_source_words)                # (Tw, Sw): averaged


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
    level: str                               # "subword" or "word"
    source_tokens: list[Token]               # columns
    target_tokens: list[Token]               # rows
    matrix: np.ndarray                       # (rows, columns), each row sums to 1
    links: list[tuple[int, int]]             # (source index, target index)
    layer: int
    heads: tuple[int, ...]                   # () = mean of all heads
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


def _visible(piece: Token, text: str) -> Token:
    """Trim the whitespace SentencePiece offsets include before a word-initial piece."""
    start = piece.start
    while start < piece.end and text[start].isspace():
        start += 1
    return Token(piece.text, start, piece.end)


def align(attention: np.ndarray, source_text: str, source_pieces: list[Token], target_pieces: list[str],
          layer: int, heads: tuple[int, ...] = (), level: str = "word", step_shift: bool = False,
          threshold: float = 0.0) -> tuple[str, Alignment]:
    """Build the alignment of one translation.

    attention (L, H, T+1, S+1) from the search; source_pieces carry offsets into
    `source_text` (Tokenizer.encode_with_offsets); target_pieces are SentencePiece pieces.
    Returns the detokenized target text (offsets refer to it) and the Alignment.
    """
    if level not in ("word", "subword"):
        raise ValueError(f"level must be 'word' or 'subword', not {level!r}")
    layer = layer % attention.shape[0]
    target_text, target_tokens = pieces_with_offsets(target_pieces)
    sub = subword_map(attention, layer, heads, step_shift)
    source_pieces = [_visible(p, source_text) for p in source_pieces]
    source_tokens = [Token(source_text[p.start:p.end] or p.text, p.start, p.end) for p in source_pieces]
    target_tokens = [Token(target_text[t.start:t.end] or t.text, t.start, t.end) for t in target_tokens]
    if level == "subword":
        return target_text, Alignment("subword", source_tokens, target_tokens, sub, hard_links(sub, threshold),
                                      layer, heads, step_shift)
    source_words, target_words = words(source_text), words(target_text)
    matrix = word_map(sub, projection(source_pieces, source_words), projection(target_tokens, target_words))
    return target_text, Alignment("word", source_words, target_words, matrix, hard_links(matrix, threshold),
                                  layer, heads, step_shift)
