"""The shapes of aligned translations: one schema for the HTTP API and the batch CLI.

Pydantic models; `AlignedTranslation.model_json_schema()` is the JSON Schema that the
batch CLI's JSONL records and the API's `/v1/translate` results both validate against.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from seq2seq.alignment import Alignment
from seq2seq.translator import TranslationResult


class TokenSpan(BaseModel):
    text: str
    start: int = Field(description="character offset into the source or translation text, inclusive")
    end: int = Field(description="character offset, exclusive")


class AlignmentMap(BaseModel):
    level: Literal["word", "subword"]
    source_tokens: list[TokenSpan] = Field(description="columns of the matrix")
    target_tokens: list[TokenSpan] = Field(description="rows of the matrix")
    matrix: list[list[float]] = Field(description="soft alignment, rows = target tokens, each row sums to 1")
    links: str = Field(description="hard links in Pharaoh format 'i-j' (i = source word, j = target word)")
    layer: int = Field(description="decoder layer whose cross-attention produced the map (0-based)")
    heads: list[int] | Literal["mean"] = Field(description="heads averaged, or 'mean' for all heads")
    step_shift: bool = Field(description="read at the step where the target token is the decoder input")

    @classmethod
    def from_alignment(cls, alignment: Alignment, decimals: int = 4) -> "AlignmentMap":
        return cls.model_validate(alignment.to_dict(decimals))


class AlignedTranslation(BaseModel):
    text: str = Field(description="the translation")
    score: float = Field(description="length-normalised log-probability of the translation")
    alignment: AlignmentMap | None = None


def aligned_translation(result: TranslationResult, alignment: Alignment | None) -> AlignedTranslation:
    return AlignedTranslation(text=result.text, score=round(result.score, 4),
                              alignment=None if alignment is None else AlignmentMap.from_alignment(alignment))
