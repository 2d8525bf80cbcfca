"""`crossalign data hints`: ready a prepared data directory for target-term hints.

Writes, into the data directory:
- `hints.train.jsonl`: each training pair's candidate hints (`seq2seq.training.hint_data.
  reference_hints`), one JSON list of [start, end, term] per line of train.tsv, which
  `crossalign train --hint-rate P` draws from;
- `dictionary.tsv.gz`: the term index of the single-word source forms (their count in the
  training sentences and the term the evidence favours; no entry where the senses disagree:
  `seq2seq.training.senses`), which the release bundle ships and the translator's automatic
  hints read (`data.dictionary.TermIndex`);
- `spm.model` with the two hint pieces appended (ids V and V + 1; every other id is
  unchanged, so a model continued with `--init-from` only grows two embedding rows), and the
  manifest's tokenizer entry updated.

    crossalign data hints --data-dir ~/.cache/crossalign/data/ding8k-all

`--dictionary-only` writes the term index alone, and `--bundle DIR` writes it into a release
bundle instead (its bundle.json gets the new hash and the rule), which is how a shipped
model's dictionary is rebuilt without retraining:

    crossalign data hints --data-dir ~/.cache/crossalign/data/ding8k-po --dictionary-only --bundle models/de-en
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from data.dictionary import SENSE_RULES, phrase_votes, write_term_index
from data.files import DICTIONARY_FILE, TOKENIZER_FILE, sha256_file
from data.prepare import Pair, read_pairs, untagged
from data.tokenizer import Tokenizer, add_hint_pieces
from seq2seq.cli import UsageError
from seq2seq.core.alignment import words
from seq2seq.runtime.bundle import set_dictionary_file
from seq2seq.training.hint_data import HINTS_FILE, frequent_source_words, reference_hints, verb_stem
from seq2seq.training.senses import SenseRule, choose_terms, sense_table, wordfreq_frequency

log = logging.getLogger("crossalign.data")
# How a form's term is chosen: by evidence (seq2seq.training.senses), or one of the vote rules
# of data.dictionary.SENSE_RULES.
SENSES = ("evidence", *sorted(SENSE_RULES))
# The evidence rule's thresholds (SenseRule's fields, whose defaults the flags take).
THRESHOLDS = {
    "min_share": "the chosen sense's least share of the form's evidence",
    "min_frequency": "the shown term's least Zipf frequency in the target language",
    "max_words": "the longest term shown for a one-word form",
}


def prepare_hints(data_dir: Path, sense: str = "evidence", rule: SenseRule = SenseRule()) -> dict[str, int]:
    """Write the three files above into `data_dir`, each form's term chosen by the `sense`
    rule (`SENSES`; `rule`'s thresholds for "evidence"); returns counts for the log."""
    manifest, target, pairs, plain = read_training(data_dir)
    votes = phrase_votes(plain)
    indexed = write_term_index(term_rows(plain, votes, target, sense, rule), data_dir / DICTIONARY_FILE)
    frequent = frequent_source_words(plain)
    with_hints = 0
    with open(data_dir / HINTS_FILE, "w", encoding="utf-8") as handle:
        shown = sys.stderr.isatty()
        for pair, bare in tqdm(zip(pairs, plain), total=len(pairs), desc="hints", file=sys.stderr, disable=not shown):
            shift = len(pair.source) - len(bare.source)  # the tag and its space, before the words
            candidates = reference_hints(bare, votes, frequent, target_language=target)
            found = [(start + shift, end + shift, term) for start, end, term in candidates]
            with_hints += bool(found)
            handle.write(json.dumps(found, ensure_ascii=False) + "\n")
    spm_path = data_dir / TOKENIZER_FILE
    add_hint_pieces(spm_path, spm_path)
    if manifest:
        manifest["tokenizer"].update(
            sha256=sha256_file(spm_path), vocab_size=Tokenizer(spm_path).vocab_size, hint_pieces=True
        )
        manifest["hints"] = {
            "candidates": HINTS_FILE,
            "dictionary": DICTIONARY_FILE,
            "indexed_forms": indexed,
            "sense": sense_description(sense, rule),
        }
        write_manifest(data_dir, manifest)
    return {"pairs": len(pairs), "pairs_with_hints": with_hints, "indexed_forms": indexed}


def prepare_dictionary(
    data_dir: Path, out: Path, sense: str = "evidence", rule: SenseRule = SenseRule(), bundle: Path | None = None
) -> dict:
    """Write only the term index of `data_dir`'s training split to `out`; with `bundle`, `out`
    is that release bundle's dictionary, its bundle.json records the new file's hash and how it
    was built, and the data directory is only read (else its manifest's `hints` says so)."""
    manifest, target, _, plain = read_training(data_dir)
    partial = out.with_name(out.name + ".partial")  # a bundle never holds half an index
    indexed = write_term_index(term_rows(plain, phrase_votes(plain), target, sense, rule), partial)
    partial.replace(out)
    described = {"indexed_forms": indexed, "sense": sense_description(sense, rule), "data": data_dir.name}
    if bundle is not None:
        set_dictionary_file(bundle, described)
    elif "hints" in manifest:
        manifest["hints"].update(indexed_forms=indexed, sense=described["sense"])
        write_manifest(data_dir, manifest)
    return described


def read_training(data_dir: Path) -> tuple[dict, str, list[Pair], list[Pair]]:
    """(manifest or {}, target language, train.tsv's pairs, the same without corpus tags).
    The dictionary and the word counts read the sources without their tags (`data prepare
    --tag-extra-corpora`): a tagged phrase is still a one-word entry."""
    manifest_path = data_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    target = manifest.get("languages", {}).get("target", "en")  # an en->de split's terms are German
    pairs = read_pairs(data_dir / "train.tsv")
    return manifest, target, pairs, [Pair(untagged(p.source), p.target, p.kind) for p in pairs]


def write_manifest(data_dir: Path, manifest: dict) -> None:
    (data_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def term_rows(
    plain: list[Pair], votes: dict[str, Counter[str]], target: str, sense: str, rule: SenseRule
) -> list[tuple[str, int, str]]:
    """(form, training-sentence count, term) of every single-word form that gets a term."""
    counts = Counter(w.text for p in plain if p.kind == "sentence" for w in words(p.source))
    single = {form: terms for form, terms in votes.items() if " " not in form}
    if sense == "evidence":
        log.info("weighing the senses of %d forms", len(single))
        chosen = choose_terms(sense_table(plain, single, target, wordfreq_frequency(target)), rule)
    else:
        choose = SENSE_RULES[sense]
        chosen = {form: verb_stem(choose(terms), target) for form, terms in single.items()}
    return [(form, counts.get(form, 0), term) for form, term in chosen.items()]


def sense_description(sense: str, rule: SenseRule) -> dict:
    """How the index chose its terms, for the manifests."""
    return {"rule": sense, **(rule.describe() if sense == "evidence" else {})}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, required=True, help="a directory `crossalign data prepare` wrote")
    parser.add_argument(
        "--sense",
        choices=SENSES,
        default="evidence",
        help="which translation of a form the dictionary gives: the one the evidence favours, none where its "
        "senses disagree (evidence, the default: seq2seq/training/senses.py); the one its entries give most "
        "often, ties to the first (usual: the rule before); or its first entry's (first)",
    )
    rule = SenseRule()
    for field, meaning in THRESHOLDS.items():
        default = getattr(rule, field)
        flag = "--" + field.replace("_", "-")
        parser.add_argument(flag, type=type(default), default=default, help=f"evidence: {meaning} (default {default})")
    parser.add_argument(
        "--dictionary-only",
        action="store_true",
        help="write only the term index (dictionary.tsv.gz): the data directory's candidates and vocabulary stay",
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        help="with --dictionary-only: write the index into this release bundle (and its bundle.json), "
        "not into the data directory",
    )


def main(args: argparse.Namespace) -> None:
    if args.bundle is not None and not args.dictionary_only:
        raise UsageError("--bundle writes only the term index: add --dictionary-only")
    try:
        rule = SenseRule(**{field: getattr(args, field) for field in THRESHOLDS})
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.dictionary_only:
        out = (args.bundle if args.bundle is not None else args.data_dir) / DICTIONARY_FILE
        found = prepare_dictionary(args.data_dir, out, args.sense, rule, args.bundle)
    else:
        found = prepare_hints(args.data_dir, args.sense, rule)
    log.info("hints for %s: %s", args.data_dir, json.dumps(found))
