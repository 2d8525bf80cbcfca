"""`crossalign data hints`: ready a prepared data directory for target-term hints.

Writes, into the data directory:
- `hints.train.jsonl`: each training pair's candidate hints (`seq2seq.training.hint_data.
  reference_hints`), one JSON list of [start, end, term] per line of train.tsv, which
  `crossalign train --hint-rate P` draws from;
- `dictionary.tsv.gz`: the term index of the single-word source forms (their count in the
  training sentences and their usual term), which the release bundle ships and the
  translator's automatic hints read (`data.dictionary.TermIndex`);
- `spm.model` with the two hint pieces appended (ids V and V + 1; every other id is
  unchanged, so a model continued with `--init-from` only grows two embedding rows), and the
  manifest's tokenizer entry updated.

    crossalign data hints --data-dir ~/.cache/crossalign/data/ding8k-all
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
from seq2seq.core.alignment import words
from seq2seq.training.hint_data import HINTS_FILE, frequent_source_words, reference_hints, verb_stem

log = logging.getLogger("crossalign.data")


def prepare_hints(data_dir: Path, sense: str = "usual") -> dict[str, int]:
    """Write the three files above into `data_dir`, each form's term chosen by the `sense`
    rule (`data.dictionary.SENSE_RULES`); returns counts for the log."""
    pairs = read_pairs(data_dir / "train.tsv")
    manifest_path = data_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    target = manifest.get("languages", {}).get("target", "en")  # an en->de split's terms are German
    # The dictionary and the word counts read the sources without their corpus tags
    # (`data prepare --tag-extra-corpora`): a tagged phrase is still a one-word entry.
    plain = [Pair(untagged(p.source), p.target, p.kind) for p in pairs]
    votes = phrase_votes(plain)
    frequent = frequent_source_words(plain)
    counts = Counter(w.text for p in plain if p.kind == "sentence" for w in words(p.source))
    choose = SENSE_RULES[sense]
    single = {form: terms for form, terms in votes.items() if " " not in form}
    rows = [(form, counts.get(form, 0), verb_stem(choose(terms), target)) for form, terms in single.items()]
    indexed = write_term_index(rows, data_dir / DICTIONARY_FILE)
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
        manifest["hints"] = {"candidates": HINTS_FILE, "dictionary": DICTIONARY_FILE, "indexed_forms": indexed}
        manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return {"pairs": len(pairs), "pairs_with_hints": with_hints, "indexed_forms": indexed}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, required=True, help="a directory `crossalign data prepare` wrote")
    parser.add_argument(
        "--sense",
        choices=sorted(SENSE_RULES),
        default="usual",
        help="which translation of a form the dictionary gives: the one its entries give most often (usual, "
        "the default: chosen on valid), or its first entry's (first)",
    )


def main(args: argparse.Namespace) -> None:
    found = prepare_hints(args.data_dir, args.sense)
    log.info("hints for %s: %s", args.data_dir, json.dumps(found))
