"""SentencePiece tokenizer with fixed special ids, shared by both languages.

The ids of pad/unk/bos/eos are fixed (0/1/2/3) so the model config, the ONNX graphs and
the search never need to ask the tokenizer which id means what.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
# The pieces that open and close a target-term hint in a source ("Gießkanne ⟨watering can⟩",
# seq2seq/core/hints.py): user-defined symbols, which SentencePiece never splits or merges.
HINT_OPEN, HINT_CLOSE = "⟨", "⟩"
TAG_OPEN, TAG_CLOSE = "⟦", "⟧"  # around a corpus tag (`corpus_tag`)


def train_sentencepiece(
    texts: Iterable[str],
    model_prefix: Path,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    seed_sentences: int = 2_000_000,
) -> Path:
    """Train a joint SentencePiece model on `texts`; returns the `.model` path."""
    buffer = io.StringIO()
    for text in texts:
        buffer.write(text.replace("\n", " ") + "\n")
    model_prefix = Path(model_prefix)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(buffer.getvalue().splitlines()),
        model_prefix=str(model_prefix),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,  # German umlauts and ß must never be <unk>
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        input_sentence_size=seed_sentences,
        shuffle_input_sentence=True,
        normalization_rule_name="nmt_nfkc",
        num_threads=2,
        minloglevel=2,
    )
    return model_prefix.with_suffix(".model")


def add_hint_pieces(model_path: Path, out_path: Path) -> Path:
    """A copy of the SentencePiece model with HINT_OPEN and HINT_CLOSE appended as
    user-defined pieces (ids V and V + 1): every other piece keeps its id, so a model's
    embeddings stay valid and only grow two rows (`crossalign train --init-from`). A model
    that has them already is copied unchanged."""
    return add_pieces(model_path, out_path, (HINT_OPEN, HINT_CLOSE))


def corpus_tag(kind: str) -> str:
    """The piece that marks a training source from an extra corpus of `kind` ("gettext" ->
    "⟦gettext⟧"): `crossalign data prepare --tag-extra-corpora`."""
    return f"{TAG_OPEN}{kind}{TAG_CLOSE}"


def add_pieces(model_path: Path, out_path: Path, symbols: tuple[str, ...]) -> Path:
    """A copy of the SentencePiece model with `symbols` appended as user-defined pieces
    (which encoding never splits), those it lacks, in order; every other id unchanged."""
    from sentencepiece import sentencepiece_model_pb2  # protobuf: a build-time step, never serving

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(model_path).read_bytes())
    have = {piece.piece for piece in proto.pieces}
    for symbol in symbols:
        if symbol not in have:
            piece = proto.pieces.add()
            piece.piece, piece.score = symbol, 0.0
            piece.type = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    Path(out_path).write_bytes(proto.SerializeToString())
    return Path(out_path)


class Tokenizer:
    """Thin wrapper: text <-> ids, plus pieces with character offsets for alignments."""

    def __init__(self, model_path: Path | str):
        self.model_path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.model_path))
        assert (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) == (
            PAD_ID,
            UNK_ID,
            BOS_ID,
            EOS_ID,
        ), f"{model_path}: special ids are not pad/unk/bos/eos = 0/1/2/3"

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @functools.cached_property
    def hint_ids(self) -> tuple[int, int] | None:
        """The ids of HINT_OPEN and HINT_CLOSE, or None for a vocabulary without them (a
        model that was never taught hints)."""
        ids = tuple(self.sp.piece_to_id(symbol) for symbol in (HINT_OPEN, HINT_CLOSE))
        return None if UNK_ID in ids else (ids[0], ids[1])

    @functools.cached_property
    def tag_ids(self) -> dict[str, int]:
        """Corpus kind -> the id of its tag piece ("gettext" -> id of "⟦gettext⟧"): the tags a
        model was trained with (`data prepare --tag-extra-corpora`); empty for none."""
        tags = {}
        for index in range(self.vocab_size):
            piece = self.sp.id_to_piece(index)
            if self.sp.is_control(index) or not (piece.startswith(TAG_OPEN) and piece.endswith(TAG_CLOSE)):
                continue
            tags[piece[len(TAG_OPEN) : -len(TAG_CLOSE)]] = index
        return tags

    @functools.cached_property
    def reserved_ids(self) -> frozenset[int]:
        """The pieces only the translator places (hint markers, corpus tags): typed by a
        user, they are read as <unk>."""
        return frozenset((self.hint_ids or ()) + tuple(self.tag_ids.values()))

    def same_pieces_as(self, other: Tokenizer) -> bool:
        """True if this vocabulary is `other`'s, possibly with pieces appended (the hint
        pieces): every id of `other` names the same piece here."""
        return self.vocab_size >= other.vocab_size and all(
            self.sp.id_to_piece(i) == other.sp.id_to_piece(i) for i in range(other.vocab_size)
        )

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([i for i in ids if i > EOS_ID])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.sp.id_to_piece(i) for i in ids]

    def segmentation_score(self, text: str) -> float:
        """Log-probability of `text`'s best segmentation under the unigram model: the sum of
        its pieces' scores (their log-probabilities in the training text), so a form seen
        often in training scores higher than one spelled out piece by piece.

        An unknown piece scores `unk_score` (SentencePiece's own penalty, 10 below the least
        likely piece), not the 0 its vocabulary entry holds."""
        return sum(self.unk_score if i == UNK_ID else self.sp.get_score(i) for i in self.sp.encode(text))

    @functools.cached_property
    def unk_score(self) -> float:
        return min(self.sp.get_score(i) for i in range(self.vocab_size) if i != UNK_ID) - 10.0

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[str], list[tuple[int, int]]]:
        """Ids, pieces and (start, end) character offsets into `text` for each piece.

        SentencePiece's own offset mapping, in characters: its C++ side walks the
        normalization, so no protobuf is parsed in Python (4x faster, and the first request
        no longer pays for importing protobuf, ~0.5 s)."""
        mapping = self.sp.encode(text, out_type="offset_mapping")
        return list(mapping["ids"]), list(mapping["pieces"]), [(start, end) for start, end in mapping["offsets"]]
