"""Shouted input (README, "Shouted input"): translation quality with and without case restoration.

    nice python bench/shouting.py --model models/de-en \\
        --valid ~/.cache/crossalign/data/ding8k-all/valid.tsv --gold data/gold/de-en.gold.tsv \\
        --test ~/.cache/crossalign/data/ding8k-all/test.tsv

For the valid split and the gold sentences, translates (beam 4, the shipped decoding) the
sources as they are and shouted (`seq2seq.core.casing.shout`: every letter upper case, character
for character, as caps lock types them), and prints case-insensitive BLEU and chrF
(sacreBLEU, `lowercase=True`) of

- normal sources, restoration on (the default) and off: the detector must not fire on them,
  so the two rows must be the same;
- shouted sources read as given (restoration off): what the model did before;
- shouted sources in "all lower case but the first word" (the naive restoration), and
- shouted sources with the truecaser (restoration on);
- sources with one word shouted (the first word of 4+ letters after the first, upper case:
  "Das ist UNGLAUBLICH teuer."), read as given and with that word restored
  (`Truecaser.restore_emphasised`).

Then how many normal sources of valid, test and gold the detector fires on (should be 0)
and how many shouted ones it misses (those with fewer than 4 letters), and the word accuracy
of the truecaser on the shouted valid sources: the share of words (runs of letters) restored
to exactly their original case, against the naive restoration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sacrebleu  # noqa: E402

from data.prepare import read_tsv_pairs  # noqa: E402
from seq2seq.core.casing import WORD_LETTERS, capitalise, is_shouting, lower, shout  # noqa: E402
from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402

BATCH = 64


def naive_case(text: str) -> str:
    """All lower case but the first word, capitalised: the baseline restoration."""
    match = WORD_LETTERS.search(text)
    if match is None:
        return lower(text)
    return lower(text[: match.start()]) + capitalise(match.group()) + lower(text[match.end() :])


def emphasise(text: str) -> str:
    """`text` with one word shouted: the first run of 4+ letters after the first word (else as is)."""
    words = [m for m in WORD_LETTERS.finditer(text) if len(m.group()) >= 4][1:2] or []
    for match in words:
        return text[: match.start()] + shout(match.group()) + text[match.end() :]
    return text


def translate(translator: Translator, sources: list[str], restore_case: bool) -> list[str]:
    config = DecodeConfig(restore_case=restore_case, return_attention=False)
    out: list[str] = []
    for start in range(0, len(sources), BATCH):
        out += [r.text for r in translator.translate_batch(sources[start : start + BATCH], config)]
    return out


def scores(hypotheses: list[str], references: list[str]) -> tuple[float, float]:
    """Case-insensitive corpus BLEU and chrF."""
    bleu = sacrebleu.metrics.BLEU(lowercase=True).corpus_score(hypotheses, [references]).score
    chrf = sacrebleu.metrics.CHRF(lowercase=True).corpus_score(hypotheses, [references]).score
    return bleu, chrf


def word_accuracy(originals: list[str], restored: list[str]) -> float:
    """Share of words (runs of letters) of `restored` spelled exactly as in `originals`."""
    right = total = 0
    for original, guess in zip(originals, restored, strict=True):
        assert len(original) == len(guess), "a case change must keep the length"
        for a, b in zip(WORD_LETTERS.finditer(original), WORD_LETTERS.finditer(guess), strict=True):
            right += a.group() == b.group()
            total += 1
    return right / max(total, 1)


def quality_rows(translator: Translator, name: str, sources: list[str], references: list[str]) -> list[str]:
    """The table rows of one set: every way of reading it, with its BLEU / chrF."""
    shouted = [shout(s) for s in sources]
    runs = [
        ("normal, restoration on", sources, True),
        ("normal, restoration off", sources, False),
        ("shouted, read as given (off)", shouted, False),
        ("shouted, naive: lower case, first word capitalised", [naive_case(s) for s in shouted], False),
        ("shouted, truecaser (on)", shouted, True),
        ("one word shouted, read as given (off)", [emphasise(s) for s in sources], False),
        ("one word shouted, restored (on)", [emphasise(s) for s in sources], True),
    ]
    rows, outputs = [], {}
    for label, texts, restore in runs:
        outputs[label] = translate(translator, texts, restore)
        bleu, chrf = scores(outputs[label], references)
        rows.append(f"| {name} | {label} | {bleu:.2f} | {chrf:.2f} |")
        print(rows[-1], file=sys.stderr, flush=True)  # progress: the raw shouted run takes minutes
    same = sum(a == b for a, b in zip(outputs[runs[0][0]], outputs[runs[1][0]]))
    rows.append(f"| {name} | normal sources translated the same on and off | {same}/{len(sources)} | |")
    restored = sum(translator.truecaser.restore_emphasised(s) is not None for s in sources)
    rows.append(f"| {name} | normal sources with a shouted word (restored) | {restored}/{len(sources)} | |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/de-en"), help="bundle (default models/de-en)")
    parser.add_argument("--valid", type=Path, required=True, help="source<TAB>reference TSV (the valid split)")
    parser.add_argument("--gold", type=Path, required=True, help="data/gold/de-en.gold.tsv")
    parser.add_argument("--test", type=Path, help="a further TSV whose sources only the detector reads")
    parser.add_argument("--n", type=int, default=0, help="first N sentences of each set (default 0: all)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0: the library default)")
    args = parser.parse_args(argv)
    translator = load_translator(args.model, threads=args.threads)
    sets = {"valid": read_tsv_pairs(args.valid), "gold": read_tsv_pairs(args.gold)}
    if args.n:
        sets = {name: (s[: args.n], r[: args.n]) for name, (s, r) in sets.items()}
    rows = ["| set | sources | BLEU (lower-cased) | chrF (lower-cased) |", "|---|---|---|---|"]
    for name, (sources, references) in sets.items():
        rows += quality_rows(translator, name, sources, references)
    print("\n".join(rows))
    detector = {name: sources for name, (sources, _) in sets.items()}
    if args.test:
        detector["test"] = read_tsv_pairs(args.test)[0]
    print("\n| set | normal sources it fires on | shouted sources it misses |\n|---|---|---|")
    for name, sources in detector.items():
        fired = sum(map(is_shouting, sources))
        missed = sum(not is_shouting(shout(s)) for s in sources)
        print(f"| {name} | {fired}/{len(sources)} | {missed}/{len(sources)} |")
    valid = sets["valid"][0]
    shouted = [shout(s) for s in valid]
    print(
        f"\nword accuracy on the shouted valid sources: truecaser "
        f"{word_accuracy(valid, [translator.truecaser.restore(s) for s in shouted]):.4f}, naive "
        f"{word_accuracy(valid, [naive_case(s) for s in shouted]):.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
