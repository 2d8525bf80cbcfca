"""Markup placement on the gold pairs: tags planted on the source, the reference
teacher-forced, the placed tags scored against the hand alignment.

    python bench/markup.py --model models/de-en --gold data/gold/de-en.gold.tsv

Per gold pair, four cases, drawn with a fixed seed among the source's words and phrases
that have a translation of their own by the gold links (`consistent`: the phrase pairs of
phrase-based MT, what a person puts a tag around; punctuation never inside a span):

- `one word`: one tag around one word;
- `phrase`: one tag around two or three consecutive words;
- `two tags`: a phrase and a word or phrase that does not overlap it, two tags;
- `empty`: an empty element (`<x/>`) after one word.

The reference translation is teacher-forced through the shipped model (the map of
`seq2seq.decoding.forced`, as `POST /v1/align` with `format` reads it) and each tag is put
on it by `seq2seq.documents.markup.transfer`. The truth of a tag is the target words the
gold's sure links (its possible ones where a word has no sure link) join to its source
words, closed to one span (min..max) with punctuation at its edges left out; of an empty
element, the position after the last target word joined to the word it followed.

Scores: **exact** (the tag covers exactly the true words; an empty element stands exactly
at its true position), **well-formed** (the marked translation parses as XML), **lost** (a
tag missing from the output), and how many tags were approximated or split. Beside it
the **complete mapping** (`transfer(..., method="links")`: hard links, a soft column for
an unlinked word, one-word gaps filled) and the **naive** projection: hard links only, the
span min..max of the target words linked to the tag's words (a tag with none is lost).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from lxml import etree
from tqdm import tqdm

from seq2seq.analysis.aer import GoldPair, read_gold
from seq2seq.core.alignment import Alignment, is_punctuation, words
from seq2seq.decoding.forced import align_given
from seq2seq.documents.markup import Marked, Placed, Tag, transfer
from seq2seq.documents.xml import fragment, fragment_text, write_element
from seq2seq.loading import load_translator

KINDS = ("one word", "phrase", "two tags", "empty")


def content_words(pair: GoldPair) -> list[int]:
    return [i for i, word in enumerate(words(pair.source)) if not is_punctuation(word.text)]


def gold_image(pair: GoldPair, sources: list[int]) -> set[int]:
    """Target words the gold joins to `sources`: sure links, possible ones for a word without."""
    image = set()
    for i in sources:
        sure = {j for s, j in pair.sure if s == i}
        image |= sure or {j for s, j in pair.possible if s == i}
    return image


def closed(targets: set[int], target_words: list) -> set[int]:
    """min..max of `targets` with punctuation at the edges left out (a tag's span)."""
    if not targets:
        return set()
    low, high = min(targets), max(targets)
    while low < high and is_punctuation(target_words[low].text):
        low += 1
    while high > low and is_punctuation(target_words[high].text):
        high -= 1
    return set(range(low, high + 1))


def consistent(pair: GoldPair, first: int, last: int) -> bool:
    """A source range with a translation of its own: it has gold links, and no word of its
    target span (`closed`) is linked to a word outside it, nor a word in it to one outside
    that span (the phrase pairs of phrase-based MT; punctuation left out): what a person tags."""
    source_words, target_words = words(pair.source), words(pair.target)
    truth = closed(gold_image(pair, list(range(first, last + 1))), target_words)
    if not truth:
        return False
    for i, j in pair.possible:
        if is_punctuation(source_words[i].text) or is_punctuation(target_words[j].text):
            continue
        if (first <= i <= last) != (j in truth):
            return False
    return True


def spans(pair: GoldPair, rng: random.Random) -> dict[str, list[tuple[int, int]]]:
    """Per case, the source word ranges (first, last) to tag, drawn among the `consistent`
    ones; an empty element's is (w, w), a word with a gold link."""
    source_words = words(pair.source)
    content = content_words(pair)
    singles = [(w, w) for w in content if consistent(pair, w, w)]
    phrases = [
        (a, b)
        for a in content
        for b in content
        if 1 <= b - a <= 2
        and all(not is_punctuation(source_words[k].text) for k in range(a, b + 1))
        and consistent(pair, a, b)
    ]
    out: dict[str, list[tuple[int, int]]] = {}
    if singles:
        out["one word"] = [rng.choice(singles)]
    if phrases:
        out["phrase"] = [rng.choice(phrases)]
    if singles and phrases:
        first = rng.choice(phrases)
        apart = [(a, b) for a, b in singles + phrases if b < first[0] or a > first[1]]
        if apart:
            out["two tags"] = sorted([first, rng.choice(apart)])
    linked = [w for w in content if gold_image(pair, [w])]
    if linked:
        w = rng.choice(linked)
        out["empty"] = [(w, w)]
    return out


def planted(pair: GoldPair, ranges: list[tuple[int, int]], empty: bool) -> Marked:
    source_words = words(pair.source)
    tags = []
    for first, last in ranges:
        if empty:
            tags.append(Tag(source_words[first].end, source_words[first].end, "x", empty=True))
        else:
            tags.append(Tag(source_words[first].start, source_words[last].end, "g"))
    return Marked(pair.source, tags)


def naive(ranges: list[tuple[int, int]], alignment: Alignment) -> list[set[int]]:
    out = []
    for first, last in ranges:
        linked = {j for i, j in alignment.links if first <= i <= last}
        out.append(set(range(min(linked), max(linked) + 1)) if linked else set())
    return out


def marked_xml(placed: Placed) -> str:
    """The placed translation as XLIFF-like markup: `<g id>` for tags, `<x id/>` for empties."""
    root = fragment(placed.text.replace("&", "&amp;").replace("<", "&lt;"))
    elements = [
        etree.Element("x" if tag.empty else "g", id=str(index)) for index, tag in enumerate(placed.tags)
    ]  # the data of each tag: a fresh element
    write_element(
        root,
        Placed(
            placed.text,
            [Tag(t.start, t.end, e, t.empty) for t, e in zip(placed.tags, elements)],
            placed.stacks,
            placed.empties,
            placed.words,
            placed.approximated,
        ),
    )
    return fragment_text(root)


def well_formed(markup: str, count: int) -> tuple[bool, int]:
    """Whether `markup` parses, and how many of the `count` tags are in it."""
    try:
        root = etree.fromstring(f"<r>{markup}</r>".encode())
    except etree.XMLSyntaxError:
        return False, 0
    return True, len({element.get("id") for element in root.iter("g", "x")} & {str(i) for i in range(count)})


def score(cases: list, maps: dict, method: str) -> dict:
    """Exact, well-formed and lost counts per case kind for one method of `transfer`."""
    exact, formed, lost, tags, approximated, split = Counter(), Counter(), Counter(), Counter(), 0, 0
    for pair, kind, ranges in cases:
        target_words = words(pair.target)
        result = transfer(planted(pair, ranges, kind == "empty"), pair.target, maps[pair.line], method)
        ok, present = well_formed(marked_xml(result), len(ranges))
        formed[kind] += ok
        lost[kind] += len(ranges) - present
        tags[kind] += len(ranges)
        approximated += len(result.approximated)
        split += result.splits()
        for index, (first, last) in enumerate(ranges):
            if kind == "empty":
                truth = max(gold_image(pair, [first]), default=None)
                offset = next(o for o, i in result.empties if i == index)
                exact[kind] += truth is not None and offset == target_words[truth].end
            else:
                truth = closed(gold_image(pair, list(range(first, last + 1))), target_words)
                exact[kind] += set(result.words[index]) == truth
    return {"exact": exact, "formed": formed, "lost": lost, "tags": tags, "approximated": approximated, "split": split}


def percent(part: float, whole: float) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/de-en"))
    parser.add_argument("--gold", type=Path, default=Path("data/gold/de-en.gold.tsv"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    translator = load_translator(args.model, threads=args.threads, quality_mode="fast")
    pairs = read_gold(args.gold)
    rng = random.Random(args.seed)
    cases = [(pair, kind, ranges) for pair in pairs for kind, ranges in spans(pair, rng).items()]
    started = time.perf_counter()
    maps = {}
    for start in tqdm(range(0, len(pairs), 64), desc="teacher forcing", unit="batch", file=sys.stderr):
        chunk = pairs[start : start + 64]
        for pair, aligned in zip(chunk, align_given(translator, [(p.source, p.target) for p in chunk])):
            if isinstance(aligned, Exception):
                raise SystemExit(f"gold line {pair.line}: {aligned}")
            maps[pair.line] = aligned.word
    seconds = time.perf_counter() - started
    ours, links = score(cases, maps, "share"), score(cases, maps, "links")
    baseline: Counter = Counter()
    for pair, kind, ranges in cases:
        if kind != "empty":
            truths = [closed(gold_image(pair, list(range(a, b + 1))), words(pair.target)) for a, b in ranges]
            baseline[kind] += sum(got == truth for got, truth in zip(naive(ranges, maps[pair.line]), truths))
    tags = ours["tags"]
    print(f"{len(pairs)} gold pairs, {len(cases)} cases, {sum(tags.values())} tags; teacher forcing {seconds:.1f} s\n")
    print(f"{'case':10} {'tags':>5} {'exact':>8} {'links':>8} {'naive':>8} {'well-formed':>12} {'lost':>5}")
    figures: dict = {"cases": len(cases), "tags": sum(tags.values()), "kinds": {}}
    for kind in KINDS:
        n, count = tags[kind], sum(1 for _, k, _ in cases if k == kind)
        row = {
            "tags": n,
            "exact": percent(ours["exact"][kind], n),
            "links_exact": percent(links["exact"][kind], n),
            "naive_exact": None if kind == "empty" else percent(baseline[kind], n),
            "well_formed": percent(ours["formed"][kind], count),
            "lost": ours["lost"][kind],
        }
        figures["kinds"][kind] = row
        naive_text = "-" if row["naive_exact"] is None else f"{row['naive_exact']:.1f}%"
        print(
            f"{kind:10} {n:5} {row['exact']:7.1f}% {row['links_exact']:7.1f}% {naive_text:>8} "
            f"{row['well_formed']:11.1f}% {row['lost']:5}"
        )
    span_tags = sum(tags[k] for k in KINDS if k != "empty")
    figures["span_exact"] = percent(sum(ours["exact"][k] for k in KINDS if k != "empty"), span_tags)
    figures["span_links_exact"] = percent(sum(links["exact"][k] for k in KINDS if k != "empty"), span_tags)
    figures["span_naive_exact"] = percent(sum(baseline.values()), span_tags)
    figures["all_exact"] = percent(sum(ours["exact"].values()), sum(tags.values()))
    figures["well_formed"] = percent(sum(ours["formed"].values()), len(cases))
    figures["lost"] = sum(ours["lost"].values()) + sum(links["lost"].values())
    figures["approximated"], figures["split"] = ours["approximated"], ours["split"]
    print(
        f"\ntag spans exact: {figures['span_exact']}% (complete mapping {figures['span_links_exact']}%, naive "
        f"{figures['span_naive_exact']}%); every tag, empty ones too: {figures['all_exact']}%; well-formed "
        f"{figures['well_formed']}%; lost {figures['lost']}; approximated {ours['approximated']}, split {ours['split']}"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
