"""The term bonus of the beam search: a hypothesis that writes a glossary term's pieces
gains `DecodeConfig.term_bonus` per piece (`seq2seq.decoding.search.beam_search`).

A model trained with target-term hints copies a hinted term only in part (docs/terms.md):
where the sentence around it is hard, the hint's first piece ranks below the words the
model knows, and a beam of four never tries it. The bonus is contextual biasing as in
speech recognition (a prefix tree of phrases whose pieces earn a bonus as they are matched,
and lose it again when the match breaks; icefall's context graph): each piece that extends
a term's match earns the bonus, a hypothesis that leaves a term half-written gives back
what its partial match earned, and one that completes a term keeps the bonus in its score,
so it also wins the final ranking against a hypothesis that did not use the term. Each term
counts once (a term the hypothesis has written earns nothing more), and a term may have
alternatives (its capitalised form), of which one is enough.

Strict (`DecodeConfig.glossary_strict`): ending a hypothesis also costs MAX_TERM_BONUS per
term it has not written, so the search goes on until the terms are in (a penalty, not a ban:
a term the model cannot reach before the length limit still lets the sentence end).

Shapes: B sentences, K beam size, N = B'·K rows, V vocabulary, A the most alternatives
of any sentence, P the most pieces of any alternative.
"""

from __future__ import annotations

import numpy as np

from seq2seq.core.config import MAX_TERM_BONUS

# One sentence's terms: each term a tuple of alternatives, each a list of target piece ids.
SentenceTerms = list[tuple[list[int], ...]]


class TermBias:
    """Per beam row, how far it has matched each alternative of its sentence's terms, which
    terms it has completed, and the bonus it has kept for them. Reordered with the beams."""

    def __init__(self, terms: list[SentenceTerms], bonus: float, k: int, eos_id: int, strict: bool = False) -> None:
        self.bonus, self.k, self.eos_id, self.strict = float(bonus), k, eos_id, strict
        flat = [
            [(group, alternative) for group, term in enumerate(sentence) for alternative in term] for sentence in terms
        ]
        alternatives = max(1, max(len(sentence) for sentence in flat))
        pieces = max([1] + [len(alternative) for sentence in flat for _, alternative in sentence])
        self.ids = np.full((len(terms), alternatives, pieces), -1, dtype=np.int64)  # (B, A, P), -1 pads
        self.lengths = np.zeros((len(terms), alternatives), dtype=np.int64)  # (B, A), 0: no alternative
        self.groups = np.full((len(terms), alternatives), -1, dtype=np.int64)  # (B, A) the term of each
        self.written_first = np.zeros((len(terms), alternatives), dtype=bool)  # (B, A) a term's own spelling
        for s, sentence in enumerate(flat):
            for a, (group, alternative) in enumerate(sentence):
                self.ids[s, a, : len(alternative)] = alternative
                self.lengths[s, a], self.groups[s, a] = len(alternative), group
                self.written_first[s, a] = a == 0 or sentence[a - 1][0] != group
        rows = len(terms) * k
        self.progress = np.zeros((rows, alternatives), dtype=np.int64)  # (N, A) pieces matched
        self.done = np.zeros((rows, alternatives), dtype=bool)  # (N, A) its term completed
        self.kept = np.zeros(rows)  # (N,) the bonus of the terms each row completed

    def _tables(self, sentences: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For rows of `sentences` (N,) with state `progress`, `done`: each alternative's
        length (N, A), which alternatives are still open (N, A), the piece that extends each
        after the `progress` matched so far (N, A) and each one's first piece (N, A)."""
        ids, lengths = self.ids[sentences], self.lengths[sentences]  # (N, A, P), (N, A)
        depth = np.minimum(self.progress, ids.shape[2] - 1)[:, :, None]
        next_piece = np.take_along_axis(ids, depth, axis=2)[:, :, 0]
        return lengths, ~self.done & (lengths > 0), next_piece, ids[:, :, 0]

    @staticmethod
    def _advance(
        token: np.ndarray,
        progress: np.ndarray,
        open_: np.ndarray,
        next_piece: np.ndarray,
        first: np.ndarray,
        lengths: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The match after appending `token` (broadcast against the (…, A) tables): new
        progress and which alternatives it completes."""
        extends = open_ & (next_piece == token)
        matched = np.where(extends, progress + 1, np.where(open_ & (first == token), 1, 0))
        return matched, open_ & (matched == lengths)

    def apply(self, log_probs: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log_probs (N, V) of the rows of the sentences `active` (B',) -> the values to rank
        the candidates by (N, V; a copy where any row has a term open) and the rows changed.

        A candidate's value is its log-prob plus the change in the row's bonus: + bonus for a
        piece that extends a match (the whole term's bonus kept once it is complete), minus
        what the row's open match had earned for every other token (EOS included)."""
        lengths, open_, next_piece, first = self._tables(active[np.arange(len(log_probs)) // self.k])
        changed = np.nonzero(open_.any(axis=1))[0]
        if not len(changed):
            return log_probs, changed
        partial = self.bonus * (self.progress * open_).max(axis=1)  # (N,)
        # The tokens whose value differs from "every other token": per row, each open
        # alternative's next piece and first piece (N, C = 2A; -1 none).
        candidates = np.concatenate([np.where(open_, next_piece, -1), np.where(open_, first, -1)], axis=1)
        matched, complete = self._advance(
            candidates[:, :, None],
            self.progress[:, None, :],
            open_[:, None, :],
            next_piece[:, None, :],
            first[:, None, :],
            lengths[:, None, :],
        )  # (N, C, A)
        # A token that completes two spellings at once (a term and its capitalised form never
        # do; "can" and "watering can" might) keeps the longer one's bonus.
        gained = self.bonus * (complete * lengths[:, None, :]).max(axis=2)
        still_open = self.bonus * (matched * ~complete).max(axis=2)
        ranked = log_probs - partial[:, None].astype(log_probs.dtype)
        rows, columns = np.nonzero(candidates >= 0)
        tokens = candidates[rows, columns]
        ranked[rows, tokens] = log_probs[rows, tokens] + (still_open + gained)[rows, columns] - partial[rows]
        if self.strict:  # ending now leaves every open term unwritten: each costs MAX_TERM_BONUS
            written_first = self.written_first[active[np.arange(len(log_probs)) // self.k]]
            unmet = (open_ & written_first).sum(axis=1)
            ranked[:, self.eos_id] -= (MAX_TERM_BONUS * unmet).astype(ranked.dtype)
        return ranked, changed

    def select(self, rows: np.ndarray, tokens: np.ndarray, active: np.ndarray) -> None:
        """Next row i extends row `rows[i]` with `tokens[i]`; `active` (B',) the sentences of
        the rows before this step (as `_Beams.active` before `advance`)."""
        self.progress, self.done, self.kept = self.progress[rows], self.done[rows], self.kept[rows]
        lengths, open_, next_piece, first = self._tables(active[rows // self.k])
        matched, complete = self._advance(tokens[:, None], self.progress, open_, next_piece, first, lengths)
        self.kept = self.kept + self.bonus * (complete * lengths).max(axis=1)
        groups = self.groups[active[rows // self.k]]  # (N, A)
        # A completed alternative closes its whole term (every alternative of that group).
        closed = ((groups[:, :, None] == np.where(complete, groups, -2)[:, None, :]).any(axis=2)) & (groups >= 0)
        self.done = self.done | closed
        self.progress = np.where(self.done, 0, matched)

    def kept_bonus(self, row: int) -> float:
        """The bonus in `row`'s score for the terms it completed (its score minus its log-prob
        when it ends now: an open match's bonus is given back by the EOS candidate)."""
        return float(self.kept[row])
