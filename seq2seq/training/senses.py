"""Which sense of a dictionary word a hint shows, by evidence, and where to show none.

Ding lists a word under each of its senses and inside the entries of its synonyms, so a
form's translations disagree ("Störung": hiccup, disturbance, disorder, interference,
trouble, ...) and its first entry is often not its usual sense: the first entry of
"Störung" is "Problemchen; Störung; Hindernis :: hiccup", which the dictionary hints showed
("Wegen einer Störung fällt der Zug heute aus." → "Hiccup of a hiccupup today."). The
training phrases all count once (the corpus keeps each pair once), so counting entries
cannot tell the senses apart. What can, at the time the index is built:

- **support**: the training phrases of several words and the training sentences that hold
  the form, and whose target writes the sense (with the target language's endings): the
  dictionary's own examples of the word in use ("Störung des Zellstoffwechsels" →
  "disturbance of cellular metabolism"). Translations that are one another with an ending
  ("condolence", "condolences") are one reading: its evidence is their entries plus the
  pairs that write any of them;
- **the chosen reading's share** of all the form's evidence: a form whose evidence is split
  among readings is ambiguous, and gets no hint (`SenseRule.min_share`);
- **target-side frequency** (`wordfreq`'s Zipf scale: 3 is once per million words): a term
  that the target language hardly uses is a dictionary oddity or a register the model's
  references do not use ("controverts", "unclasped"; `SenseRule.min_frequency`); among
  readings of equal evidence the more frequent is shown;
- **shape**: a gloss of several words for a one-word source is usually an explanation, not
  a translation ("temperature" → "erhöhte Temperatur"; `SenseRule.max_words`); among equal
  readings the shorter wins, then the entry that comes first.

The thresholds were tuned on Ding valid's hint precision and BLEU (docs/terms.md). Build time
only: `crossalign data hints` runs this; serving reads the index it wrote, and never imports
wordfreq.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from data.corpora.pairs import PHRASE, Pair
from seq2seq.core.alignment import words
from seq2seq.core.hints import endings, find_term, fold
from seq2seq.training.hint_data import verb_stem

# Support is counted over at most this many pairs per form: enough to tell its senses' shares,
# and it bounds the build for frequent words (which never get a hint anyway).
MAX_EXAMPLES = 200


@dataclass(frozen=True)
class Reading:
    """One sense of a source form: its translations that differ only by an ending, and the
    evidence for it."""

    terms: tuple[str, ...]  # as a hint shows them (Ding's "to go" as "go" for English), the shown one first
    entries: int  # the dictionary entries (training phrase pairs of the form alone) that give one of them
    support: int  # training phrases of several words and sentences with the form whose target writes one
    frequency: float  # Zipf frequency of the shown term in the target language (0: unknown)
    position: int  # the place of its first entry among the form's translations, in the dictionary's order

    @property
    def term(self) -> str:
        return self.terms[0]

    @property
    def evidence(self) -> int:
        return self.entries + self.support

    @property
    def length(self) -> int:
        return len(words(self.term))


@dataclass(frozen=True)
class SenseRule:
    """When a form gets a hint, and which. Defaults tuned on Ding valid (docs/terms.md)."""

    min_share: float = 0.2  # the chosen reading's share of the form's evidence; below: ambiguous, no hint
    min_frequency: float = 2.5  # the shown term's Zipf frequency in the target language; below: no hint
    max_words: int = 2  # the longest term shown for a one-word form

    def __post_init__(self) -> None:
        if not 0 <= self.min_share <= 1:
            raise ValueError(f"min_share must be within [0, 1], not {self.min_share}")
        if self.max_words < 1:
            raise ValueError(f"max_words must be at least 1, not {self.max_words}")

    def choose(self, readings: Sequence[Reading]) -> str | None:
        """The term a hint shows, or None where the readings disagree or none is plausible.

        Among the plausible readings (a shown term of at most `max_words` words, at least
        `min_frequency`), the best has the most evidence, then fewer words, then the more
        frequent term, then the earlier entry; it needs `min_share` of all the form's
        evidence, the implausible readings' included."""
        total = sum(r.evidence for r in readings)
        plausible = [r for r in readings if r.length <= self.max_words and r.frequency >= self.min_frequency]
        if not plausible or total == 0:
            return None
        best = min(plausible, key=lambda r: (-r.evidence, r.length, -r.frequency, r.position))
        return best.term if best.evidence >= self.min_share * total else None

    def describe(self) -> dict[str, float | int]:
        return asdict(self)


def group_readings(terms: Sequence[str], language: str) -> list[list[int]]:
    """The positions of `terms` grouped into readings: a term joins the first reading holding
    a term of as many words that it spells with one of `language`'s endings, or that spells
    it ("condolence", "condolences")."""
    groups: list[list[int]] = []
    for k, term in enumerate(terms):
        home = next((g for g in groups if any(_one_word(term, terms[j], language) for j in g)), None)
        if home is None:
            groups.append([k])
        else:
            home.append(k)
    return groups


def _one_word(a: str, b: str, language: str) -> bool:
    """`a` and `b` are the same words up to an ending of `language`."""
    a_words, b_words = words(a), words(b)
    if len(a_words) != len(b_words):
        return False
    return find_term(a_words, b, endings(language)) is not None or find_term(b_words, a, endings(language)) is not None


def sense_table(
    pairs: Sequence[Pair],
    votes: dict[str, Counter[str]],
    target_language: str,
    frequency: Callable[[str], float],
    forms: Iterable[str] | None = None,
) -> dict[str, list[Reading]]:
    """The readings of each single-word source form of `votes` (or of `forms` only), with
    their evidence from the training `pairs` (phrases of several words and sentences; the
    pairs' sources without corpus tags). A reading shows the translation with the most
    entries, then the fewest words, then the first. `frequency(term)` is the term's Zipf
    frequency in the target language (`wordfreq_frequency`)."""
    grouped: dict[str, list[tuple[tuple[str, ...], int, int]]] = {}
    for form in votes if forms is None else forms:
        if " " in form or form not in votes:
            continue
        counted: Counter[str] = Counter()
        for term, count in votes[form].items():
            counted[verb_stem(term, target_language)] += count
        terms = list(counted)
        readings = []
        for group in group_readings(terms, target_language):
            ordered = sorted(group, key=lambda k: (-counted[terms[k]], len(words(terms[k])), k))
            readings.append((tuple(terms[k] for k in ordered), sum(counted[terms[k]] for k in group), group[0]))
        grouped[form] = readings
    ambiguous = {form: [r[0] for r in readings] for form, readings in grouped.items() if len(readings) > 1}
    support = _support(pairs, ambiguous, target_language)
    return {
        form: [
            Reading(terms, entries, support[form][k] if form in support else 0, frequency(terms[0]), position)
            for k, (terms, entries, position) in enumerate(readings)
        ]
        for form, readings in grouped.items()
    }


def _support(
    pairs: Sequence[Pair], readings: dict[str, list[tuple[str, ...]]], target_language: str
) -> dict[str, list[int]]:
    """form -> per reading, how many of the first `MAX_EXAMPLES` pairs of two or more source
    words that hold the form have a target that writes one of the reading's terms."""
    where: dict[str, list[int]] = defaultdict(list)
    for index, pair in enumerate(pairs):
        if pair.kind == PHRASE and " " not in pair.source.strip():
            continue  # a one-word phrase is an entry: counted as such, not as support
        for form in {w.text for w in words(pair.source)} & readings.keys():
            if len(where[form]) < MAX_EXAMPLES:
                where[form].append(index)
    wanted = endings(target_language)
    keys = {t: [_prefix(w.text) for w in words(t)] for terms in readings.values() for r in terms for t in r}
    support: dict[str, list[int]] = {}
    for form, indices in where.items():
        found = [0] * len(readings[form])
        for index in indices:
            target = words(pairs[index].target)
            # A match's word begins with the term word's first three letters (a stem keeps
            # three): the cheap test first, find_term's for the rest.
            starts = {_prefix(w.text)[:k] for w in target for k in (1, 2, 3)}
            for k, terms in enumerate(readings[form]):
                found[k] += any(
                    all(key in starts for key in keys[t]) and find_term(target, t, wanted) is not None for t in terms
                )
        support[form] = found
    return support


def _prefix(word: str) -> str:
    return fold(word)[:3]


def wordfreq_frequency(language: str) -> Callable[[str], float]:
    """A term's Zipf frequency in `language` by the `wordfreq` package (its word lists travel
    in its wheel: nothing is downloaded); a term of several words gets wordfreq's estimate for
    the phrase. Imported here, at build time only (the `train` extra)."""
    from wordfreq import zipf_frequency

    return lambda term: zipf_frequency(term, language)


def choose_terms(table: dict[str, list[Reading]], rule: SenseRule) -> dict[str, str]:
    """form -> the term its hint shows, for the forms `rule` gives one."""
    chosen = {form: rule.choose(readings) for form, readings in table.items()}
    return {form: term for form, term in chosen.items() if term is not None}
