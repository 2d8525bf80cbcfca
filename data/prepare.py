"""`crossalign data prepare`: corpus -> cleaned splits + SentencePiece model + manifest.

A corpus too small for the sizes asked is refused before anything is written, naming the
flag to change (`PrepareError`: --valid-size and --test-size, --vocab-size), and the
SentencePiece training, minutes on Ding, shows its elapsed time (`Elapsed`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import re
import shutil
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from data.corpora import read_corpus
from data.corpora.pairs import PHRASE, SENTENCE, CorpusError, Pair, keep_pair, split_key
from data.files import TOKENIZER_FILE, sha256_file
from data.split import MAX_HELD_OUT_FRACTION, Splits, split_pairs
from data.tokenizer import TAG_OPEN, Tokenizer, add_pieces, corpus_tag, train_sentencepiece

log = logging.getLogger("crossalign.data")


class PrepareError(ValueError):
    """Sizes the corpus cannot give; the message names the flag to change."""


def write_pairs(path: Path, pairs: list[Pair]) -> None:
    """One pair per line: `source<TAB>target<TAB>kind`."""
    with open(path, "w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(f"{pair.source}\t{pair.target}\t{pair.kind}\n")


def data_languages(data_dir: Path) -> tuple[str, str] | None:
    """(source, target) languages a prepared data directory's manifest records, or None
    (a directory prepared before the manifest had them: German -> English)."""
    path = Path(data_dir) / "manifest.json"
    if not path.is_file():
        return None
    languages = json.loads(path.read_text()).get("languages")
    return (languages["source"], languages["target"]) if languages else None


def read_pairs(path: Path) -> list[Pair]:
    """Read a split written by :func:`write_pairs` (a third column is optional)."""
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            pairs.append(Pair(fields[0], fields[1], fields[2] if len(fields) > 2 else SENTENCE))
    return pairs


def read_tsv_pairs(path: Path) -> tuple[list[str], list[str]]:
    """(sources, references) of a `source<TAB>reference[<TAB>...]` file such as a split's test.tsv;
    raises ValueError naming the file and line of a line without a tab."""
    sources, references = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise ValueError(f"{path}:{number}: expected source<TAB>reference")
        sources.append(fields[0])
        references.append(fields[1])
    return sources, references


@dataclass(frozen=True)
class PrepareOptions:
    """What `crossalign data prepare` does; its flags map onto these, one default each."""

    corpus: str = "ding"  # a spec: ding | tsv:PATH | moses:SRC,TGT | gettext:PATH | descriptions:DIR
    vocab_size: int = 8000  # joint SentencePiece vocabulary, when one is trained
    # Dictionary phrase pairs kept in train (None: all); short ones first, as they are the
    # word and term translations that help sentences.
    max_phrases: int | None = 200_000
    test_size: int = 1600  # held-out test sentences
    valid_size: int = 1100  # held-out validation sentences
    seed: int = 1  # which phrases are kept when there are more than max_phrases
    ding_path: Path | None = None  # the Ding file; None: found (data/corpora/ding.py)
    # Reuse this SentencePiece model instead of training one: what continuing or fine-tuning
    # a model (`crossalign train --init-from`) needs, since its embeddings are indexed by its ids.
    tokenizer_model: Path | None = None
    languages: tuple[str, str] = ("de", "en")  # the corpus's (source, target) as read (Ding: German, English)
    # Write every split the other way round (target -> source) after splitting, so both
    # directions share one split (by the corpus's source side) and one held-out set.
    reverse: bool = False
    extra_corpora: tuple[str, ...] = ()  # specs like `corpus` that add training pairs only
    tag_extra_corpora: bool = False  # start each extra pair's source with its corpus's tag


def prepare(out: Path, options: PrepareOptions = PrepareOptions()) -> dict:
    """Write train/valid/test TSVs, `spm.model` and `manifest.json` into `out`.

    The manifest records the direction written (`languages`), which training puts into the
    model's config. Extra corpora add training pairs only: the held-out splits stay the main
    corpus's, and an extra pair that shares a side with a held-out sentence or with the gold
    set (data/gold/) is dropped, so every reported figure stays held out.
    """
    pairs_iter, inputs, license_ = read_corpus(options.corpus, options.ding_path)
    splits, extra = split_corpus(list(pairs_iter), options)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    languages = options.languages
    if options.reverse:
        languages = (languages[1], languages[0])
        splits = Splits(*([Pair(p.target, p.source, p.kind) for p in part] for part in splits.astuple()))
    tags = tag_extra_pairs(splits.train, extra) if options.tag_extra_corpora else {}
    train = limit_phrases(splits.train, options.max_phrases, options.seed)
    try:  # first: it may refuse the vocabulary size, and then nothing is left behind
        tokenizer, vocab_size = write_tokenizer(out, train, options, tags)
    except PrepareError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    write_pairs(out / "train.tsv", train)
    write_pairs(out / "valid.tsv", splits.valid)
    write_pairs(out / "test.tsv", splits.test)
    sample = list(splits.valid)[:1000]
    tokens_per_sentence = sum(len(tokenizer.encode(p.source)) + len(tokenizer.encode(p.target)) for p in sample) / max(
        2 * len(sample), 1
    )
    counts = {
        name: dict(Counter(p.kind for p in pairs)) | {"total": len(pairs)}
        for name, pairs in (("train", train), ("valid", splits.valid), ("test", splits.test))
    }
    manifest = {
        "corpus": options.corpus,
        "extra_corpora": list(options.extra_corpora),
        "extra_pairs": len(extra.pairs),
        "extra_dropped": extra.dropped,
        "extra_added": extra.added,
        "extra_licenses": extra.licenses,
        "extra_tags": tags,
        "languages": {"source": languages[0], "target": languages[1]},
        "inputs": [{"path": str(p), "sha256": sha256_file(p)} for p in inputs + extra.inputs],
        "license": license_,
        "counts": counts,
        "filters": {"max_chars": 300, "max_length_ratio": 3.0, "max_phrases": options.max_phrases},
        "split": {
            "method": "sha256 of casefolded NFC source of the corpus as read"
            + ("; written reversed" if options.reverse else "")
            + "; no training pair shares a side with a held-out pair",
            "test_size": options.test_size,
            "valid_size": options.valid_size,
        },
        "tokenizer": {
            "file": TOKENIZER_FILE,
            "sha256": sha256_file(out / TOKENIZER_FILE),
            "reused_from": str(options.tokenizer_model) if options.tokenizer_model else None,
            "vocab_size": vocab_size,
            "type": "unigram",
            "pad_id": 0,
            "unk_id": 1,
            "bos_id": 2,
            "eos_id": 3,
            "valid_tokens_per_sentence": round(tokens_per_sentence, 2),
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    log.info("wrote %s: %s", out, json.dumps(counts))
    return manifest


def split_corpus(raw: list[Pair], options: PrepareOptions) -> tuple[Splits, ExtraCorpora]:
    """The main corpus's pairs within the length filters, split, with the extra corpora's
    training pairs appended to train."""
    kept = [p for p in raw if keep_pair(p)]
    check_held_out_sizes(kept, options)
    log.info("read %d pairs, %d after length filters", len(raw), len(kept))
    splits = split_pairs(kept, test_size=options.test_size, valid_size=options.valid_size)
    extra = ExtraCorpora([], [], 0, {}, {})
    if options.extra_corpora:
        extra = read_extra_corpora(options.extra_corpora, splits, options.ding_path)
        log.info(
            "extra corpora: %d training pairs (%s; %d dropped: repeats, length, held out or gold)",
            len(extra.pairs),
            ", ".join(f"{count} from {spec}" for spec, count in extra.added.items()),
            extra.dropped,
        )
        splits.train.extend(extra.pairs)
    return splits, extra


def check_held_out_sizes(pairs: list[Pair], options: PrepareOptions) -> None:
    """PrepareError unless the corpus holds enough distinct sentence sources for the valid and
    test sizes asked: the split holds out at most MAX_HELD_OUT_FRACTION of them, and would
    otherwise write smaller splits than asked."""
    sources = len({split_key(p.source) for p in pairs if p.kind == SENTENCE})
    room = int(MAX_HELD_OUT_FRACTION * sources)
    asked = options.valid_size + options.test_size
    if asked <= room:
        return
    valid = room * options.valid_size // max(asked, 1)
    raise PrepareError(
        f"the corpus has {sources} distinct sentence sources within the length filters: too few for "
        f"--valid-size {options.valid_size} and --test-size {options.test_size} (held out together: at most "
        f"{room}, a quarter); give smaller sizes, e.g. --valid-size {valid} --test-size {room - valid}, "
        "or a larger corpus"
    )


def limit_phrases(train: list[Pair], max_phrases: int | None, seed: int) -> list[Pair]:
    """`train` with at most `max_phrases` phrase pairs (None: all), the short ones first."""
    phrases = [p for p in train if p.kind == PHRASE]
    if max_phrases is None or len(phrases) <= max_phrases:
        return train
    # Short phrases first: they are word/term translations, the part that helps sentences.
    rng = random.Random(seed)
    rng.shuffle(phrases)
    phrases.sort(key=lambda p: len(p.source.split()) > 4)
    keep = set(phrases[:max_phrases])
    return [p for p in train if p.kind == SENTENCE or p in keep]


def write_tokenizer(
    out: Path, train: list[Pair], options: PrepareOptions, tags: dict[str, str]
) -> tuple[Tokenizer, int]:
    """`out`/spm.model, reused or trained on `train`, with the corpus tags as pieces; and its
    vocabulary size."""
    vocab_size = options.vocab_size
    if options.tokenizer_model is not None:
        tokenizer = Tokenizer(options.tokenizer_model)  # checks the special ids before anything is copied
        (out / TOKENIZER_FILE).write_bytes(Path(options.tokenizer_model).read_bytes())
        (out / "spm.vocab").unlink(missing_ok=True)
        vocab_size = tokenizer.vocab_size
        log.info("reusing SentencePiece model %s (vocab %d)", options.tokenizer_model, vocab_size)
    else:
        spm_texts = [t for p in train for t in (untagged(p.source), p.target)]
        with Elapsed(f"training SentencePiece (vocab {vocab_size}, {len(spm_texts)} sentences)"):
            tokenizer = Tokenizer(trained_tokenizer(spm_texts, out, vocab_size))
    if tags:
        tokenizer = Tokenizer(add_pieces(out / TOKENIZER_FILE, out / TOKENIZER_FILE, tuple(tags.values())))
        vocab_size = tokenizer.vocab_size
        log.info("corpus tags %s appended to the SentencePiece model (vocab %d)", list(tags.values()), vocab_size)
    return tokenizer, vocab_size


# SentencePiece's refusals of a vocabulary size (the number it names captured), and what
# the command says instead.
VOCABULARY_REFUSALS = (
    (
        r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)",
        "--vocab-size {asked} is too large for this corpus: SentencePiece makes at most {named} pieces of it; "
        "give --vocab-size {named} or less, or a larger corpus",
    ),
    (
        r"smaller than required_chars\. \d+ vs (\d+)",
        "--vocab-size {asked} is too small: the corpus's characters and the special pieces need {named}; "
        "give --vocab-size {named} or more",
    ),
)


def trained_tokenizer(texts: list[str], out: Path, vocab_size: int) -> Path:
    """`out`/spm.model trained on `texts`; PrepareError naming --vocab-size when SentencePiece
    cannot make that many pieces of them, or needs more for their characters."""
    try:
        return train_sentencepiece(texts, out / "spm", vocab_size=vocab_size)
    except RuntimeError as error:
        for pattern, message in VOCABULARY_REFUSALS:
            found = re.search(pattern, str(error))
            if found:
                raise PrepareError(message.format(asked=vocab_size, named=found.group(1))) from None
        raise


class Elapsed:
    """A long step's elapsed time on stderr while it runs: a spinner line redrawn on a terminal,
    else (a log file) a line every `every` seconds; then one line with the time it took."""

    FRAMES = "|/-\\"

    def __init__(self, what: str, every: float = 30.0, tick: float = 0.25):
        self.what, self.every, self.tick = what, every, tick
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._show, name="elapsed", daemon=True)
        self.started = 0.0

    def __enter__(self) -> Elapsed:
        log.info("%s", self.what)
        self.started = time.monotonic()
        self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stopped.set()
        self.thread.join()
        if kind is None:
            log.info("%s: done in %s", self.what, clock(time.monotonic() - self.started))

    def _show(self) -> None:
        stream = sys.stderr
        terminal = stream.isatty()
        frames = itertools.cycle(self.FRAMES)
        while not self.stopped.wait(self.tick if terminal else self.every):
            elapsed = clock(time.monotonic() - self.started)
            if terminal:
                stream.write(f"\r{next(frames)} {self.what}: {elapsed}")
                stream.flush()
            else:
                log.info("%s: %s so far", self.what, elapsed)
        if terminal:
            stream.write("\r\033[K")  # the spinner's line cleared for the log line after it
            stream.flush()


def clock(seconds: float) -> str:
    """`4m 03s`, or `12s` under a minute."""
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


GOLD_DIR = Path(__file__).parent / "gold"


def gold_sides() -> set[str]:
    """Split keys of both sides of every gold pair (data/gold/*.gold.tsv)."""
    sides = set()
    for path in sorted(GOLD_DIR.glob("*.gold.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            sides.update(split_key(field) for field in line.split("\t")[:2])
    return sides


@dataclass
class ExtraCorpora:
    """What `read_extra_corpora` added: the pairs, their input files, how many were dropped,
    and per spec its license and how many pairs it added."""

    pairs: list[Pair]
    inputs: list[Path]
    dropped: int
    licenses: dict[str, str]
    added: dict[str, int]


def read_extra_corpora(specs: tuple[str, ...], splits: Splits, ding_path: Path | None) -> ExtraCorpora:
    """Training-only pairs of `specs`.

    Dropped: pairs failing the length filters, repeating a main-corpus training pair (or one
    an earlier spec added), or sharing a side with a held-out or gold sentence.
    """
    forbidden = gold_sides() | {
        split_key(side) for pair in splits.valid + splits.test for side in (pair.source, pair.target)
    }
    known = set(splits.train)
    extra = ExtraCorpora([], [], 0, {}, {})
    for spec in specs:
        pairs_iter, spec_inputs, license_ = read_corpus(spec, ding_path)
        extra.inputs.extend(spec_inputs)
        extra.licenses[spec] = license_
        before = len(extra.pairs)
        for pair in pairs_iter:
            if (
                pair in known
                or not keep_pair(pair)
                or split_key(pair.source) in forbidden
                or split_key(pair.target) in forbidden
            ):
                extra.dropped += 1
                continue
            known.add(pair)
            extra.pairs.append(pair)
        extra.added[spec] = len(extra.pairs) - before
    return extra


def tag_extra_pairs(train: list[Pair], extra: ExtraCorpora) -> dict[str, str]:
    """Start the source of every extra pair (the tail of `train`, in spec order) with its
    corpus's tag, in place; returns spec -> tag."""
    tags, position = {}, len(train) - len(extra.pairs)
    for spec, count in extra.added.items():
        tags[spec] = corpus_tag(spec.split(":", 1)[0])
        for index in range(position, position + count):
            pair = train[index]
            train[index] = Pair(f"{tags[spec]} {pair.source}", pair.target, pair.kind)
        position += count
    return tags


def untagged(source: str) -> str:
    """A training source without its corpus tag."""
    return source.split(" ", 1)[1] if source.startswith(TAG_OPEN) and " " in source else source


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The defaults are PrepareOptions's own, so the library and the command line cannot drift.
    default = asdict(PrepareOptions())
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument(
        "--corpus",
        default=default["corpus"],
        help=f"ding | tsv:PATH | moses:SRC,TGT | gettext:PATH | descriptions:DIR (default: {default['corpus']})",
    )
    parser.add_argument(
        "--extra-corpus",
        action="append",
        default=[],
        metavar="SPEC",
        help="more training pairs, a spec like --corpus's (e.g. gettext:DIR of .po/.mo catalogs, "
        "descriptions:DIR of translated package descriptions; see docs/cli.md); held out and gold sentences "
        "are never among them; repeatable",
    )
    parser.add_argument(
        "--tag-extra-corpora",
        action="store_true",
        help="start each extra corpus's training sources with its tag (⟦gettext⟧, ⟦descriptions⟧), so the model "
        "learns their registers apart and untagged text reads as the main corpus's",
    )
    parser.add_argument(
        "--ding-path", type=Path, default=default["ding_path"], help="explicit path to the Ding de-en file"
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=default["vocab_size"],
        help=f"joint SentencePiece vocabulary (default {default['vocab_size']})",
    )
    parser.add_argument(
        "--max-phrases",
        type=int,
        default=default["max_phrases"],
        help=f"dictionary phrase pairs mixed into train, -1 for all (default {default['max_phrases']})",
    )
    parser.add_argument(
        "--test-size",
        type=int,
        default=default["test_size"],
        help=f"held-out test sentences (default {default['test_size']})",
    )
    parser.add_argument(
        "--valid-size",
        type=int,
        default=default["valid_size"],
        help=f"held-out validation sentences (default {default['valid_size']})",
    )
    parser.add_argument("--seed", type=int, default=default["seed"])
    parser.add_argument(
        "--languages",
        nargs=2,
        default=list(default["languages"]),
        metavar=("SOURCE", "TARGET"),
        help="the corpus's languages as read, first column first (default: de en)",
    )
    parser.add_argument(
        "--reverse",
        action="store_true",
        help="write the data the other way round (Ding: English -> German); the split is the same as without it",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=default["tokenizer_model"],
        metavar="SPM_MODEL",
        help="reuse this SentencePiece model instead of training one (e.g. models/de-en/spm.model, "
        "to continue training or fine-tune that model with --init-from)",
    )


def options_from(args: argparse.Namespace) -> PrepareOptions:
    """The command line's flags as `PrepareOptions` (`--max-phrases -1`: all)."""
    return PrepareOptions(
        corpus=args.corpus,
        vocab_size=args.vocab_size,
        max_phrases=None if args.max_phrases is not None and args.max_phrases < 0 else args.max_phrases,
        test_size=args.test_size,
        valid_size=args.valid_size,
        seed=args.seed,
        ding_path=args.ding_path,
        tokenizer_model=args.tokenizer,
        languages=tuple(args.languages),
        reverse=args.reverse,
        extra_corpora=tuple(args.extra_corpus),
        tag_extra_corpora=args.tag_extra_corpora,
    )


def main(args: argparse.Namespace) -> int:
    """`crossalign data prepare`: a corpus or size that will not do is one line naming the fix,
    exit status 2 (this layer is below `seq2seq.cli`'s UsageError, so it ends so itself)."""
    try:
        prepare(args.out, options_from(args))
    except (PrepareError, CorpusError) as error:
        print(f"crossalign data prepare: error: {error}", file=sys.stderr)
        return 2
    return 0
