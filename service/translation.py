"""What the routes know of a text before translating it.

The text level itself (split, translate as one batch, join; the text's map, quality, terms
and score) is the library's, `seq2seq.decoding.texts`, the one pipeline of every surface.
"""

from __future__ import annotations

from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.texts import sentences_of
from service.engine import ServedModel


def sentence_source_lengths(model: ServedModel, text: str, config: DecodeConfig) -> list[int]:
    """The source pieces the model will read of each sentence of `text` (EOS excluded), known
    before translating it with `config`: the routes refuse a text too long for a map early."""
    return model.translator.source_lengths(sentences_of(text), config)
