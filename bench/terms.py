"""Target-term hints: how often a glossary's terms reach the translation, and what hints cost.

    python bench/terms.py --model models/de-en --data ~/.cache/crossalign/data/ding8k-hints \\
        --pairs ~/.cache/crossalign/data/ding8k-hints/test.tsv data/gold/de-en.gold.tsv
    python bench/terms.py --model models/en-de --data ~/.cache/crossalign/data/ding8k-hints-en-de \\
        --pairs data/gold/en-de.gold.tsv --term-bonus 0 2.5

Term use: for each pair, the glossary a user who knows the rare words would give: every
source word (or run of two or three) that the training phrases translate with a term its
reference uses (`seq2seq.training.hint_data.reference_hints`, as training draws its hints),
kept when the word is rare (seen at most `--max-count` times in the training sentences,
the same count the term index keeps). Printed per file: the share of those terms found in the
translation (with the target language's endings) without a glossary, and with it; and with
it, the share the quality block calls `used` (found, and aligned to the word it is for),
and sacreBLEU BLEU / chrF of those sentences without and with it. `--term-bonus B ...`
measures the glossary at each term bonus of the search (`seq2seq.decoding.terms`), and with
`--strict` each also with the glossary strict (`glossary_strict`).

Speed (`--speed`): beam 4, batches of 32, the first `--n` sentences of the first file with
the model's dictionary hints on and off, in alternating rounds (this machine's speed
drifts); sentences/s of each and their ratio, and how much the hints lengthen what the
encoder reads (hints per sentence, hint pieces per source piece). Then the same with a
three-term glossary on every sentence, the model's term bonus on and off.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.corpora.pairs import SENTENCE, Pair  # noqa: E402
from data.dictionary import phrase_votes  # noqa: E402
from data.prepare import read_pairs, read_tsv_pairs, untagged  # noqa: E402
from seq2seq.analysis.corpus_scores import corpus_scores  # noqa: E402
from seq2seq.core.alignment import words  # noqa: E402
from seq2seq.core.config import AlignmentOptions  # noqa: E402
from seq2seq.core.hints import endings, find_term  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402
from seq2seq.training.hint_data import frequent_source_words, reference_hints  # noqa: E402


def glossaries(
    pairs: list[Pair], train: list[Pair], max_count: int, target_language: str
) -> list[tuple[tuple[str, str], ...]]:
    """Per pair, (source term, reference term) of its rare dictionary words: each word of the
    term seen at most `max_count` times in the training sentences, or no one-word entry of the
    dictionary (as the term index counts them, whichever senses it keeps: the same terms for
    every model measured)."""
    votes, frequent = phrase_votes(train), frequent_source_words(train)
    plain = [Pair(untagged(p.source), p.target, p.kind) for p in train]
    entries = {form for form in phrase_votes(plain) if " " not in form}
    counts = Counter(w.text for p in plain if p.kind == SENTENCE for w in words(p.source))
    found = []
    for pair in pairs:
        glossary = []
        for start, end, term in reference_hints(pair, votes, frequent, target_language=target_language):
            form = pair.source[start:end]
            if all(w.text not in entries or counts[w.text] <= max_count for w in words(form)):
                glossary.append((form, term))
        found.append(tuple(glossary))
    return found


# Terms that occur in many sentences of either test split, so the term bonus has matches to follow.
COMMON_TERMS = {
    "de": (("Haus", "house"), ("Zeit", "time"), ("Arbeit", "work")),
    "en": (("house", "Haus"), ("time", "Zeit"), ("work", "Arbeit")),
}


def term_use(
    translator,
    pairs: list[Pair],
    glossary: list[tuple[tuple[str, str], ...]],
    batch: int,
    bonuses: list[float],
    strict_too: bool = False,
) -> dict:
    plain_config = replace(translator.decode_defaults, dictionary_hints=False, return_attention=False, term_bonus=0.0)
    with_config = replace(plain_config, return_attention=True, alignment=AlignmentOptions())
    asked = [i for i, g in enumerate(glossary) if g]
    terms = sum(len(glossary[i]) for i in asked)
    share = lambda n: round(100 * n / max(terms, 1), 1)  # noqa: E731
    references = [pairs[i].target for i in asked]
    plain = []
    for start in range(0, len(asked), batch):
        plain += translator.translate_batch([pairs[i].source for i in asked[start : start + batch]], plain_config)
    found_plain = sum(
        find_term(words(result.text), term, endings(translator.config.target_lang)) is not None
        for i, result in zip(asked, plain)
        for _, term in glossary[i]
    )
    report: dict = {
        "sentences with terms": len(asked),
        "terms": terms,
        "found without glossary %": share(found_plain),
        "BLEU / chrF without": scores([r.text for r in plain], references),
    }
    if translator.tokenizer.hint_ids is None:  # a model trained without hints: today's figure only
        return report
    for bonus, strict in [(b, s) for b in bonuses for s in ((False, True) if strict_too else (False,))]:
        found_with = used = 0
        texts = []
        asked_config = replace(with_config, term_bonus=bonus, glossary_strict=strict)
        for i in asked:  # each sentence with its own glossary
            result = translator.translate(pairs[i].source, replace(asked_config, glossary=glossary[i]))
            found_with += sum(t.appears for t in result.terms)
            used += sum(t.used for t in result.terms)
            texts.append(result.text)
        report[f"bonus {bonus}{', strict' if strict else ''}"] = {
            "found %": share(found_with),
            "used %": share(used),
            "BLEU / chrF": scores(texts, references),
            "closed early": closed_early(texts, references),
        }
    return report


def closed_early(hypotheses: list[str], references: list[str]) -> int:
    """How many translations go on after a sentence's closing punctuation where their reference
    does not: a term the search appended after the sentence ("... the sky. umbrella.")."""
    inside = re.compile(r"[.!?…]\s+\w")
    return sum(bool(inside.search(h)) and not inside.search(r) for h, r in zip(hypotheses, references))


def scores(hypotheses: list[str], references: list[str]) -> str:
    found = corpus_scores(hypotheses, references)
    return f"{found['bleu']:.2f} / {found['chrf']:.2f}"


def speed(translator, sources: list[str], rounds: int) -> dict:
    on = replace(translator.decode_defaults, beam_size=4, dictionary_hints=True, return_attention=False)
    report = timed(translator, sources, rounds, on, replace(on, dictionary_hints=False), "hints")
    # What the hints add to the encoder's input, as the translator builds it: the cost's cause.
    read = [translator.model_source(text, translator.hints_for(text, on)) for text in sources]
    report["hints per sentence"] = round(sum(len(r.hints) for r in read) / len(read), 2)
    report["hint pieces / source pieces"] = round(
        sum(len(r.ids) - r.user_pieces for r in read) / sum(r.user_pieces for r in read), 3
    )
    return report


def bonus_speed(translator, sources: list[str], rounds: int, glossary: tuple[tuple[str, str], ...]) -> dict:
    """The term bonus's cost: every sentence with the same glossary, the bonus on and off."""
    on = replace(translator.decode_defaults, beam_size=4, return_attention=False, glossary=glossary)
    return timed(translator, sources, rounds, on, replace(on, term_bonus=0.0), "term bonus")


def timed(translator, sources: list[str], rounds: int, on, off, label: str) -> dict:
    times: dict[str, list[float]] = {"on": [], "off": []}
    for round_ in range(rounds):
        for name in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
            config = on if name == "on" else off
            started = time.perf_counter()
            for start in range(0, len(sources), 32):
                translator.translate_batch(sources[start : start + 32], config)
            times[name].append(time.perf_counter() - started)
    rate = {name: len(sources) / statistics.median(values) for name, values in times.items()}
    return {
        f"{label} on sent/s": round(rate["on"], 1),
        f"{label} off sent/s": round(rate["off"], 1),
        "on / off": round(rate["on"] / rate["off"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a bundle or model directory trained with hints")
    parser.add_argument("--data", type=Path, required=True, help="prepared data (its training phrases and sentences)")
    parser.add_argument("--pairs", type=Path, nargs="+", required=True, help="source<TAB>reference files")
    parser.add_argument("--backend", default="onnx", choices=("onnx", "torch"))
    parser.add_argument("--max-count", type=int, default=2, help="a word is rare at most this often (default 2)")
    parser.add_argument(
        "--term-bonus", type=float, nargs="+", default=[0.0], help="the search's term bonuses to measure (default 0)"
    )
    parser.add_argument("--strict", action="store_true", help="also measure each bonus with the glossary strict")
    parser.add_argument("--speed", action="store_true", help="also time dictionary hints on and off")
    parser.add_argument("--n", type=int, default=640, help="sentences timed with --speed (default 640)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds with --speed (default 4)")
    args = parser.parse_args()
    translator = load_translator(args.model, args.backend)
    train = read_pairs(args.data / "train.tsv")
    for path in args.pairs:
        sources, references = read_tsv_pairs(path)
        pairs = [Pair(s, r, SENTENCE) for s, r in zip(sources, references)]
        glossary = glossaries(pairs, train, args.max_count, translator.config.target_lang)
        print(path.name, term_use(translator, pairs, glossary, 32, args.term_bonus, args.strict), flush=True)
    if args.speed:
        sources = read_tsv_pairs(args.pairs[0])[0][: args.n]
        print("speed (beam 4, batch 32):", speed(translator, sources, args.rounds), flush=True)
        if translator.decode_defaults.term_bonus:
            glossary = COMMON_TERMS[translator.config.source_lang]
            print("speed, a glossary:", bonus_speed(translator, sources, args.rounds, glossary), flush=True)


if __name__ == "__main__":
    main()
