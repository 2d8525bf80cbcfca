"""The request bodies' building blocks: each field that several routes take is declared once, here.

`Source`, `Target`, `BeamSize`, `NoRepeatNgramSize` and `StepShift` are field types with their one default and
description (a model says `source: Source`); the search settings default to unset (None),
which is the served model's own (its bundle.json `decoding`, `ServedModel.decode_defaults`);
`AlignmentRequest` is the group of
alignment-source fields (level, layer, heads, step shift) that /translate and
/v1/translate take as `alignment` and /v1/align takes at the top level; `TermFields` the
group of term fields (glossary, dictionary hints, term bonus, strict) every request model
that translates includes, read as one `TermOptions`; `RerankFields` the group of reranking
fields (the mode, its candidates, the channel's weight, MBR's temperature), read as one
`RerankOptions`. `JSONRequest` is the base of every JSON body: validated as its JSON Schema reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from seq2seq.core.config import MAX_TERM_BONUS, AlignmentOptions, DecodeConfig, RerankOptions, TermOptions
from service.http.errors import APIError

Source = Annotated[str, Field("auto", description="source language code, or 'auto'")]
Target = Annotated[str | None, Field(None, description="target language (default: the only one served for the source)")]


def model_default(name: str) -> str:
    """What a search setting left out (or null) gets, as the API document says it: the setting
    the model's figures were measured with."""
    return (
        f"default: the served model's own, its bundle's `decoding` shown by /health, else {getattr(DecodeConfig, name)}"
    )


BeamSize = Annotated[int | None, Field(None, description=f"beam width of the search ({model_default('beam_size')})")]
# Past 10 pieces (a few words) a repeated n-gram is a phrase said twice, not a stutter.
MAX_NO_REPEAT_NGRAM_SIZE = 10
NoRepeatNgramSize = Annotated[
    int | None,
    Field(
        None,
        ge=0,
        le=MAX_NO_REPEAT_NGRAM_SIZE,
        description="no translation repeats an n-gram of target pieces it already holds "
        f"(a stutter such as 'office office office'); 0 = off ({model_default('no_repeat_ngram_size')})",
    ),
]
# A glossary is a request's own small term list, not a terminology base: bounded like the text.
MAX_GLOSSARY_ENTRIES = 256
MAX_GLOSSARY_BYTES = 16_384


# A term holds something other than (ASCII) whitespace: the same rule in the check and the
# schema (JSON Schema's \s and Python's differ beyond ASCII).
TERM_PATTERN = "[^ \t\n\r\f\v]"


def check_glossary(glossary: dict[str, str] | None) -> dict[str, str] | None:
    """A glossary's entries are non-blank strings, at most MAX_GLOSSARY_ENTRIES of them and
    MAX_GLOSSARY_BYTES of UTF-8 in all; ValueError (a 400 naming the field) otherwise."""
    if glossary is None:
        return None
    if len(glossary) > MAX_GLOSSARY_ENTRIES:
        raise ValueError(f"at most {MAX_GLOSSARY_ENTRIES} entries, not {len(glossary)}")
    if not all(re.search(TERM_PATTERN, term) for entry in glossary.items() for term in entry):
        raise ValueError("every term and its translation must be a non-empty string")
    size = sum(len(source.encode()) + len(target.encode()) for source, target in glossary.items())
    if size > MAX_GLOSSARY_BYTES:
        raise ValueError(f"at most {MAX_GLOSSARY_BYTES} bytes of terms, not {size}")
    return glossary


GLOSSARY_DESCRIPTION = (
    'your terms, source term -> target term (e.g. {"Gießkanne": "watering can"}): matched in inflected forms and '
    "shown to the model, which was trained to use such hints; each sentence's quality block says whether the "
    f"translation used them. At most {MAX_GLOSSARY_ENTRIES} entries and {MAX_GLOSSARY_BYTES} bytes; JSON bodies "
    "only. A model trained without hints answers 400"
)
GlossaryField = Annotated[
    dict[str, str] | None,
    AfterValidator(check_glossary),
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "object",
                    "maxProperties": MAX_GLOSSARY_ENTRIES,
                    "propertyNames": {"type": "string", "pattern": TERM_PATTERN},
                    "additionalProperties": {"type": "string", "pattern": TERM_PATTERN},
                },
                {"type": "null"},
            ],
            "description": GLOSSARY_DESCRIPTION,
        }
    ),
    Field(None, description=GLOSSARY_DESCRIPTION),
]
DictionaryHints = Annotated[
    bool | None,
    Field(
        None,
        description="show rare source words the model's dictionary knows with their translation (a model trained "
        f"with hints; false = off; {model_default('dictionary_hints')})",
    ),
]
TermBonus = Annotated[
    float | None,
    Field(
        None,
        ge=0,
        le=MAX_TERM_BONUS,
        description="added to a translation's score per piece of a glossary term it writes, so the search tries "
        f"the glossary's terms where the model alone would not; 0 = off ({model_default('term_bonus')})",
    ),
]
GlossaryStrict = Annotated[
    bool,
    Field(
        False,
        description="the glossary as a requirement: a translation that ends before writing every glossary term "
        "pays for each, so more terms reach the output, at some cost to the sentence around them",
    ),
]
MarkupFormat = Annotated[
    Literal["html", "xml"] | None,
    Field(
        None,
        description="the text carries inline markup, read as one segment: html (every element inline; br a line "
        "break; script, style, pre, code kept as written) or xml (any element inline, e.g. XLIFF 1.2 <g>/<x/>; "
        "<ph>, <bpt>, <ept>, <it> kept whole); the markup is placed on the translation by the word alignment",
    ),
]
StepShift = Annotated[
    bool | None,
    Field(None, description="read the map where the target token is the decoder input (default: the model's)"),
]


class JSONRequest(BaseModel):
    """A request body validated as its JSON Schema reads: strict types (no `0` for false, no
    `"4"` for 4, no unknown fields), except that an integral number such as `4.0` is the
    integer it is in JSON Schema."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integral_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {key: _integral(value) for key, value in data.items()}


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


def exactly_one(*groups: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    """A model's `json_schema_extra` saying that exactly one group of its fields is given
    (given = present and not null), as its validator requires."""

    def given(names: tuple[str, ...]) -> dict[str, Any]:
        return {"required": list(names), "properties": {name: {"not": {"type": "null"}} for name in names}}

    def edit(schema: dict[str, Any]) -> None:
        fields = [name for group in groups for name in group]
        schema["anyOf"] = [
            {**given(group), "not": {"anyOf": [given((name,)) for name in fields if name not in group]}}
            for group in groups
        ]

    return edit


class AlignmentRequest(JSONRequest):
    """Which cross-attention the map is read from, and at which level (seq2seq.core.alignment)."""

    level: Literal["word", "subword"] = Field(
        "word",
        description="word: a map between words; subword: between SentencePiece pieces (/v1/align: beside the word map)",
    )
    layer: int | None = Field(None, description="decoder layer (default: the model's alignment layer)")
    heads: list[int] | None = Field(None, description="heads to average (default: the model's; [] = all)")
    step_shift: StepShift

    def options(self) -> AlignmentOptions:
        """The options as asked (resolve them against the model's config before use)."""
        return AlignmentOptions(
            self.level, self.layer, None if self.heads is None else tuple(self.heads), self.step_shift
        )


class TermFields(JSONRequest):
    """The target-term fields, one group: /translate, /v1/translate (and its stream) and
    /v1/attention include it; read as the one options value, `TermOptions`."""

    glossary: GlossaryField
    dictionary_hints: DictionaryHints
    term_bonus: TermBonus
    glossary_strict: GlossaryStrict

    def term_options(self) -> TermOptions:
        """The fields as the search's term options (unset ones: the model's own)."""
        glossary = tuple(self.glossary.items()) if self.glossary else ()
        return TermOptions(glossary, self.dictionary_hints, self.term_bonus, self.glossary_strict)


# λ past 10 lets the reverse model alone decide (a per-piece log-prob of -1 to -5 outweighs the
# search's score by an order of magnitude); a softmax past temperature 100 is flat over any n-best.
MAX_CHANNEL_WEIGHT = 10.0
MAX_RERANK_TEMPERATURE = 100.0
RERANK_DEFAULTS = RerankOptions()
RerankMode = Literal["none", "mbr", "channel", "mbr+channel"]


class RerankFields(JSONRequest):
    """The reranking fields, one group: /translate, /v1/translate (and its stream),
    /v1/attention and /v1/heatmap include it; read as the one options value, `RerankOptions`
    (seq2seq/decoding/rerank.py)."""

    rerank: RerankMode | None = Field(
        None,
        description="choose the translation among the search's n-best: channel (the reverse direction's model "
        "reads the source back from each candidate; needs both directions served), mbr (the candidate that "
        "agrees most with the others by chrF), mbr+channel (both), none (the search's own best, the default). "
        "The search is widened to `rerank_candidates` and the channel costs a teacher-forced pass: a reranked "
        "request counts more work (`max_request_work`)",
    )
    rerank_candidates: int | None = Field(
        None,
        ge=2,
        description=f"with `rerank`: how many of the search's hypotheses are reranked; the beam is widened to "
        f"them, at most the server's max_beam_size, at least n_best (default {RERANK_DEFAULTS.candidates})",
    )
    channel_weight: float | None = Field(
        None,
        ge=0,
        le=MAX_CHANNEL_WEIGHT,
        description="λ of the channel modes (read by them only): score + λ · log P(source | candidate) per source "
        f"piece (default {RERANK_DEFAULTS.channel_weight})",
    )
    rerank_temperature: float | None = Field(
        None,
        gt=0,
        le=MAX_RERANK_TEMPERATURE,
        description="the MBR modes' weights (read by them only) are softmax(score / temperature) over the "
        f"candidates; larger is flatter (default {RERANK_DEFAULTS.temperature})",
    )

    def rerank_options(self, largest_beam: int) -> RerankOptions | None:
        """The fields as the search's rerank options (None: no reranking), its candidates at
        most `largest_beam` (the server's `max_beam_size`: 400 beyond it; unset, the default
        within it). A field the mode does not read (a `channel_weight` with "mbr") is left
        unread, as a query's or a form's unknown fields are: no schema can say which field
        depends on which, and a GET takes them as query parameters."""
        if self.rerank_candidates is not None and self.rerank_candidates > largest_beam:
            asked = self.rerank_candidates
            raise APIError(400, f"Invalid request: rerank_candidates must be between 2 and {largest_beam}, not {asked}")
        if self.rerank in (None, "none"):
            return None
        asked = {
            "candidates": self.rerank_candidates or min(RERANK_DEFAULTS.candidates, largest_beam),
            "channel_weight": self.channel_weight,
            "temperature": self.rerank_temperature,
        }
        try:
            return RerankOptions(self.rerank, **{name: value for name, value in asked.items() if value is not None})
        except ValueError as error:  # the schema bounds all but the candidates' library limit
            raise APIError(400, f"Invalid request: rerank_candidates: {error}") from None
