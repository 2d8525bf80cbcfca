"""Dictionary hints: how often the hinted term is the reference's word, and how many there are.

    python bench/hint_precision.py --model models/de-en --pairs data/gold/de-en.gold.tsv \\
        ~/.cache/crossalign/data/ding8k-po/valid.tsv --index OLD.tsv.gz --data ~/.cache/crossalign/data/ding8k-po
    python bench/hint_precision.py --model models/de-en --pairs ~/.cache/crossalign/data/ding8k-po/valid.tsv \\
        --index OLD.tsv.gz --data ~/.cache/crossalign/data/ding8k-po --sweep

For every dictionary hint the translator would insert on a source (`dictionary_hints` with
the bundle's `hint_max_count`, as `Translator.hints_for` gives them without a glossary), the
hint is correct when its term is in the reference (`find_term`, each word with one of the
target language's endings). Printed per term index (the bundle's, and each `--index` file,
e.g. an older bundle's dictionary.tsv.gz) and file: sentences, hints, hints per sentence,
correct hints and the precision. With `--data` (the prepared data the index was built from),
also how many hints a sense of the dictionary would have got right (any of the form's
translations in the reference): the most a choice of sense can reach.

`--sweep` tunes the sense rule (`seq2seq.training.senses.SenseRule`) on the files given (give
valid only): over the words the first `--index` hints (the old rule's index holds every
form), the precision and the number of hints of each rule of the grid. The index each rule
writes may hint a few words more (a sentence-initial word whose exact form the rule leaves
out is looked up lower-cased), so report the index built with the chosen rule, not the sweep.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.dictionary import TermIndex, phrase_votes  # noqa: E402
from data.prepare import read_tsv_pairs  # noqa: E402
from seq2seq.core.alignment import words  # noqa: E402
from seq2seq.core.hints import dictionary_entry, dictionary_hints, endings, find_term  # noqa: E402
from seq2seq.runtime.bundle import load_bundle_manifest  # noqa: E402


@dataclass(frozen=True)
class Hinted:
    """One dictionary hint on a source sentence, and its reference's words."""

    form: str  # the index's form the word was found as
    term: str
    reference: list  # the reference's words (Token)


def hinted(index: TermIndex, path: Path, max_count: int) -> tuple[int, list[Hinted]]:
    """(sentences, the hints the translator would insert on the file's sources)."""
    sources, references = read_tsv_pairs(path)
    found = []
    for source, reference in zip(sources, references):
        text_words = words(source)
        positions = {w.start: k for k, w in enumerate(text_words)}
        target = words(reference)
        for hint in dictionary_hints(source, index, max_count):
            position = positions[hint.start]
            form, _, term = dictionary_entry(index, text_words[position].text, position)
            found.append(Hinted(form, term, target))
    return len(sources), found


def _label(path: Path) -> str:
    """A file as its folder and name (both directions' splits are called valid.tsv)."""
    return f"{path.parent.name}/{path.name}"


def correct(hint: Hinted, term: str, language: str) -> bool:
    return find_term(hint.reference, term, endings(language)) is not None


def precision_rows(indexes: dict[str, TermIndex], files: list[Path], max_count: int, language: str, votes) -> None:
    any_column = " any sense |" if votes is not None else ""
    print(f"| index | file | sentences | hints | per sentence | correct | precision |{any_column}")
    print("|---|---|---|---|---|---|---|" + ("---|" if votes is not None else ""))
    for (name, index), path in itertools.product(indexes.items(), files):
        sentences, hints = hinted(index, path, max_count)
        right = sum(correct(h, h.term, language) for h in hints)
        share = f"{100 * right / len(hints):.1f}%" if hints else "-"
        per_sentence = len(hints) / sentences
        row = f"| {name} | {_label(path)} | {sentences} | {len(hints)} | {per_sentence:.2f} | {right} | {share} |"
        if votes is not None:
            reachable = sum(any(correct(h, t, language) for t in _senses(votes, h.form, language)) for h in hints)
            row += f" {100 * reachable / max(len(hints), 1):.1f}% |"
        print(row, flush=True)


def _senses(votes, form: str, language: str) -> list[str]:
    from seq2seq.training.hint_data import verb_stem

    return [verb_stem(t, language) for t in votes.get(form, ())]


def sweep(index: TermIndex, files: list[Path], max_count: int, language: str, plain, votes, args) -> None:
    """Each rule of the grid over the words `index` hints in `files`."""
    from seq2seq.training.senses import SenseRule, sense_table, wordfreq_frequency

    per_file = {path: hinted(index, path, max_count)[1] for path in files}
    forms = {h.form for hints in per_file.values() for h in hints}
    table = sense_table(plain, votes, language, wordfreq_frequency(language), forms)
    print(
        "| min share | min frequency | max words | "
        + " | ".join(f"{_label(p)}: hints, correct, precision" for p in files)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(files))
    for share, frequency, most in itertools.product(args.shares, args.frequencies, args.words):
        rule = SenseRule(share, frequency, most)
        cells = []
        for hints in per_file.values():
            chosen = [(h, rule.choose(table[h.form])) for h in hints if h.form in table]
            shown = [(h, term) for h, term in chosen if term is not None]
            right = sum(correct(h, term, language) for h, term in shown)
            cells.append(f"{len(shown)}, {right}, {100 * right / max(len(shown), 1):.1f}%")
        print(f"| {share} | {frequency} | {most} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a release bundle with a dictionary")
    parser.add_argument("--pairs", type=Path, nargs="+", required=True, help="source<TAB>reference files")
    parser.add_argument("--index", type=Path, nargs="*", default=[], help="other term indexes to measure")
    parser.add_argument("--data", type=Path, help="the prepared data the index was built from (train.tsv)")
    parser.add_argument("--max-count", type=int, help="hint words seen at most this often (default: the bundle's)")
    parser.add_argument("--sweep", action="store_true", help="tune the sense rule on --pairs (needs --data, --index)")
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.2, 0.3, 0.4, 0.5, 0.6])
    parser.add_argument("--frequencies", type=float, nargs="+", default=[0.0, 2.0, 2.5, 3.0])
    parser.add_argument("--words", type=int, nargs="+", default=[1, 2, 9])
    args = parser.parse_args()
    bundle = load_bundle_manifest(args.model)
    if bundle.dictionary_path is None:
        parser.error(f"{args.model} has no dictionary.tsv.gz")
    if args.sweep and (args.data is None or not args.index):
        parser.error("--sweep needs --data and an --index holding every form (the old rule's)")
    language = bundle.model_config.target_lang
    max_count = bundle.decode_defaults.hint_max_count if args.max_count is None else args.max_count
    indexes = {str(args.model): TermIndex.load(bundle.dictionary_path)}
    indexes.update({str(path): TermIndex.load(path) for path in args.index})
    plain = votes = None
    if args.data is not None:
        from seq2seq.cli.hints import read_training

        plain = read_training(args.data)[3]
        votes = phrase_votes(plain)
    print(f"hint_max_count {max_count}, target terms found with the endings of {language!r}\n")
    if args.sweep:
        sweep(indexes[str(args.index[0])], args.pairs, max_count, language, plain, votes, args)
    else:
        precision_rows(indexes, args.pairs, max_count, language, votes)


if __name__ == "__main__":
    main()
