"""Forced alignment: the alignment map of a *given* translation, by teacher forcing.

Linguists often have the translation already and want only its alignment. The target is
fed to the decoder as BOS + target (teacher forcing) and the cross-attention is read
exactly as for a translation the search produced, so `crossalign align`, `POST /v1/align`,
`crossalign eval --gold` and `export/alignment_sources.py` all apply the one rule of
`seq2seq.core.alignment` (layer, heads, step shift, subword -> word, argmax links) to the same
(L, H, T+1, S+1) array that `TranslationResult.attention` holds.

The attention comes from the backend's `teacher_force` (part of `SearchBackend`): one
encoder and one decoder run over the whole padded batch on onnxruntime and on torch alike;
`teacher_force_by_steps` gives the same from `encode` and `step` alone, for backends that
can only step.

Words are `seq2seq.core.alignment.words()` of the texts *as given* (both sides use the
tokenizer's character offsets into the original text), so word indices are those of the
gold set (seq2seq/analysis/aer.py) and of eflomal's Pharaoh files. A shouted text, or one with
shouted words, is read with its case restored, as a translation's source is
(seq2seq/core/casing.py; `restore_case`): the vocabulary cuts capitals into letters. The pieces
and words still show the text as given, at the same offsets. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seq2seq.analysis.occlusion import OCCLUSION_BATCH_TOKENS, occluded_log_probs, word_pieces
from seq2seq.analysis.quality import Evidence, SentenceQuality, assess_alignment
from seq2seq.core.alignment import Alignment, Alignments, Token, align
from seq2seq.core.backend import DecoderCache, SearchBackend, TeacherForced, Wanted
from seq2seq.core.casing import Truecaser, cased_pieces
from seq2seq.core.config import AlignmentError, AlignmentOptions
from seq2seq.decoding.search import pad_batch
from seq2seq.decoding.translator import Translator


class AlignmentFailed(AlignmentError):
    """The model raised on this pair (alone: its batch was retried pair by pair)."""


@dataclass
class ForcedAlignment:
    """The alignment of one given pair: word level always, plus the requested level's map."""

    source: str
    target: str
    word: Alignment  # rows = target words, columns = source words
    alignment: Alignment  # the requested level (the same object when level="word")
    quality: SentenceQuality  # from the maps and the decoder's log-probs of the target
    case_restored: bool = False  # a side was shouted and read with its case restored

    @property
    def links(self) -> list[tuple[int, int]]:
        """Hard word links (source word, target word)."""
        return self.word.links

    def to_record(self, decimals: int = 4) -> dict:
        """The JSON record of `crossalign align --format jsonl` and of `POST /v1/align`."""
        spans = lambda tokens: [{"text": t.text, "start": t.start, "end": t.end} for t in tokens]  # noqa: E731
        record = {
            "source": self.source,
            "target": self.target,
            "source_words": spans(self.word.source_tokens),
            "target_words": spans(self.word.target_tokens),
            "word_alignment": self.word.pharaoh,
            "matrix": np.round(self.word.matrix, decimals).tolist(),
            "layer": self.word.layer,
            "heads": list(self.word.heads) or "mean",
            "step_shift": self.word.step_shift,
            "quality": self.quality.to_dict(decimals),
            "case_restored": self.case_restored,
        }
        if self.alignment is not self.word:
            record["subword_alignment"] = self.alignment.to_dict(decimals)
        return record


# --------------------------------------------------------------------------- attention


def teacher_forced_attention(
    backend: SearchBackend, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cross-attention of given translations, one (L, H, T+1, S+1) float array per pair, and
    from the same decoder run the log-prob of each target piece, (T+1,) float64 (EOS last).

    sources: source ids *with* the source EOS; targets: target ids without BOS/EOS. Row t
    is the decoder step that produced target piece t (the last row produced EOS), as in
    `TranslationResult.attention`. Padded batch rows and columns are cut off.
    """
    if not sources:
        return []
    src_ids, src_mask = pad_batch([list(s) for s in sources], backend.pad_id)
    tgt_ids, _ = pad_batch([list(t) for t in targets], backend.pad_id)
    forced = backend.teacher_force(src_ids, src_mask, tgt_ids)
    cross = forced.cross  # (L, B, H, T+1, S)
    out = []
    for row, (s, t) in enumerate(zip(sources, targets)):
        produced = [*t, backend.eos_id]  # step i produced piece i
        log_prob = forced.log_probs[row, np.arange(len(produced)), produced]  # (T+1,)
        out.append(
            (np.asarray(cross[:, row, :, : len(t) + 1, : len(s)], dtype=np.float32), log_prob.astype(np.float64))
        )
    return out


def teacher_force_by_steps(
    backend: SearchBackend, src_ids: np.ndarray, src_mask: np.ndarray, tgt_ids: np.ndarray
) -> TeacherForced:
    """Teacher forcing through `encode` and `step` alone, one position at a time with the KV
    cache, exactly as the search computes it: for a backend that cannot run the decoder over
    a whole target at once (the scripted test backends). It has no self-attention to show.
    """
    cache = DecoderCache.start(*backend.encode(src_ids, src_mask))
    bos = np.full((src_ids.shape[0], 1), backend.bos_id, dtype=np.int64)
    tokens = np.concatenate([bos, tgt_ids.astype(np.int64)], axis=1)  # (B, T+1)
    log_probs, cross = [], []
    for position in range(tokens.shape[1]):
        out = backend.step(tokens[:, position : position + 1], src_mask, cache, True)
        assert out.cross_weights is not None
        cache = out.cache
        log_probs.append(out.log_probs)
        cross.append(out.cross_weights)  # (L, B, H, S)
    return TeacherForced(
        log_probs=np.stack(log_probs, axis=1), cross=np.stack(cross, axis=3), encoder_self=None, decoder_self=None
    )


# --------------------------------------------------------------------------- the map


def _pieces(
    translator: Translator, text: str, truecaser: Truecaser | None = None
) -> tuple[list[int], list[Token], bool]:
    """Ids and pieces with character offsets into `text` (the text as given, not normalised),
    and whether its case was restored for the model (with a `truecaser`: a shouted text or
    shouted words, `Truecaser.restored`); the pieces then show the text's own characters."""
    read = truecaser.restored(text) if truecaser is not None else None
    ids, pieces, offsets = translator.tokenizer.encode_with_offsets(text if read is None else read)
    spans = [(p, s, e) for p, (s, e) in zip(pieces, offsets)]
    shown = pieces if read is None else cased_pieces(spans, read, text)
    return ids, [Token(p, s, e) for p, (_, s, e) in zip(shown, spans)], read is not None


def _truecasers(translator: Translator, restore_case: bool) -> tuple[Truecaser | None, Truecaser | None]:
    """Source and target truecasers of a forced alignment, or none when case is read as given."""
    return (translator.truecaser, translator.target_truecaser) if restore_case else (None, None)


# attention (L, H, T+1, S+1), source pieces, target pieces, log-prob of each target piece (T+1,),
# EOS last, and whether a side was read with its case restored
Prepared = tuple[np.ndarray, list[Token], list[Token], np.ndarray, bool]


def forced_attention(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    max_batch_tokens: int = 4096,
    restore_case: bool = True,
    wanted: Wanted | None = None,
) -> list[Prepared | AlignmentError]:
    """Per pair: its teacher-forced attention and pieces, or why it cannot be aligned.
    `restore_case`: shouted texts are read with their case restored (module doc).

    The raw material of `align_given`, and of scoring many alignment sources from one
    forward pass (export/alignment_sources.py: `seq2seq.core.alignment.align` with any options).
    Pairs are batched by length, at most `max_batch_tokens` padded tokens per batch; `wanted`
    () -> (pairs,) bool is asked before each batch (a pair nobody wants is not run: an error
    in its place), as the search asks it after each step.
    """
    source_limit = translator.max_source_tokens  # already <= max_positions
    target_limit = translator.max_positions
    results: list[Prepared | AlignmentError | None] = [None] * len(pairs)
    todo: list[tuple[int, list[int], list[Token], list[int], list[Token], bool]] = []
    source_case, target_case = _truecasers(translator, restore_case)
    for index, (source, target) in enumerate(pairs):
        if not source.strip() or not target.strip():
            results[index] = AlignmentError("empty " + ("source" if not source.strip() else "target"))
            continue
        source_ids, source_pieces, source_restored = _pieces(translator, source, source_case)
        target_ids, target_pieces, target_restored = _pieces(translator, target, target_case)
        if len(source_ids) + 1 > source_limit or len(target_ids) + 1 > target_limit:
            results[index] = AlignmentError(
                f"too long: {len(source_ids)} source and {len(target_ids)} target pieces (the model takes at "
                f"most {source_limit - 1} and {target_limit - 1})"
            )
            continue
        source_ids = source_ids + [translator.backend.eos_id]
        todo.append((index, source_ids, source_pieces, target_ids, target_pieces, source_restored or target_restored))
    todo.sort(key=lambda item: (len(item[3]), len(item[1])))  # similar lengths share a batch
    start = 0
    while start < len(todo):
        end = start + 1
        while end < len(todo) and (end - start + 1) * max(len(todo[end][1]), len(todo[end][3]) + 1) <= max_batch_tokens:
            end += 1
        batch = todo[start:end]
        if wanted is not None:
            still = wanted()
            for item in (item for item in batch if not still[item[0]]):
                results[item[0]] = AlignmentError("no longer wanted")
            batch = [item for item in batch if still[item[0]]]
        for index, prepared in _attend(translator.backend, batch) if batch else []:
            results[index] = prepared
        start = end
    return [r for r in results if r is not None]


def _attend(
    backend: SearchBackend, chunk: list[tuple[int, list[int], list[Token], list[int], list[Token], bool]]
) -> list[tuple[int, Prepared | AlignmentError]]:
    """One batch through the model; if it fails, pair by pair, so only the guilty pair fails
    (as the service's scheduler retries a failed batch request by request)."""
    try:
        attentions = teacher_forced_attention(backend, [c[1] for c in chunk], [c[3] for c in chunk])
    except Exception as error:  # noqa: BLE001 - retried below; the pair at fault gets the error
        if len(chunk) == 1:
            return [(chunk[0][0], AlignmentFailed(f"alignment failed: {type(error).__name__}: {error}"))]
        return [result for item in chunk for result in _attend(backend, [item])]
    return [
        (index, (attention, source_pieces, target_pieces, token_log_probs, restored))
        for (index, _, source_pieces, _, target_pieces, restored), (attention, token_log_probs) in zip(
            chunk, attentions
        )
    ]


def align_given(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    options: AlignmentOptions = AlignmentOptions(),
    max_batch_tokens: int = 4096,
    restore_case: bool = True,
    wanted: Wanted | None = None,
) -> list[ForcedAlignment | AlignmentError]:
    """Align given (source, target) pairs; one result per pair, in order. `restore_case`: a
    shouted text is read with its case restored (module doc), as `DecodeConfig.restore_case`.
    `wanted` () -> (pairs,) bool is asked before each teacher-forced batch (`forced_attention`,
    the occlusion's): a pair nobody wants any more is not aligned.

    Options the model cannot satisfy raise AlignmentError at once; a pair that cannot be
    aligned gives an `AlignmentError` in its place instead, so one bad line never stops a job.
    """
    resolved = options.resolve(translator.config)
    prepared = forced_attention(translator, pairs, max_batch_tokens, restore_case, wanted)
    maps = [
        item if isinstance(item, AlignmentError) else align(item[0], source, item[1], target, item[2], resolved)
        for (source, target), item in zip(pairs, prepared)
    ]
    occluded: list[np.ndarray | None] = [None] * len(pairs)
    if translator.quality.needs_occlusion:
        occluded = occluded_given(translator, pairs, maps, restore_case=restore_case, wanted=wanted)
    results: list[ForcedAlignment | AlignmentError] = []
    for (source, target), item, alignments, occluded_row in zip(pairs, prepared, maps, occluded):
        if isinstance(alignments, AlignmentError):  # the pair's error, as forced_attention gave it
            results.append(alignments)
            continue
        assert not isinstance(item, AlignmentError)
        attention, _, _, token_log_probs, restored = item
        evidence = Evidence(attention, token_log_probs, translator.own_source, occluded_row)
        quality = assess_alignment(alignments, float(token_log_probs.mean()), translator.quality, evidence)
        results.append(ForcedAlignment(source, target, alignments.word, alignments.requested, quality, restored))
    return results


def occluded_given(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    maps: Sequence[Alignments | AlignmentError],
    max_batch_tokens: int = OCCLUSION_BATCH_TOKENS,
    mode: str = "remove",
    restore_case: bool = True,
    wanted: Wanted | None = None,
) -> list[np.ndarray | None]:
    """Per given pair, (Sw, T+1) log-probs of its target pieces with each source word
    occluded (`seq2seq.analysis.occlusion`, `mode`), all pairs batched; None where the pair has no maps.
    The pieces are read as `forced_attention` read them (`restore_case`); `wanted` as there."""
    kept = [n for n, item in enumerate(maps) if not isinstance(item, AlignmentError)]
    occlusions = []
    source_case, target_case = _truecasers(translator, restore_case)
    for n in kept:
        alignments = maps[n]
        assert not isinstance(alignments, AlignmentError)
        source_ids = _pieces(translator, pairs[n][0], source_case)[0] + [translator.backend.eos_id]
        occlusions.append((source_ids, _pieces(translator, pairs[n][1], target_case)[0], word_pieces(alignments)))
    out: list[np.ndarray | None] = [None] * len(maps)
    kept_wanted = None if wanted is None else (lambda: wanted()[kept])
    found = occluded_log_probs(translator.backend, occlusions, mode, max_batch_tokens, kept_wanted)
    for n, occluded in zip(kept, found):
        out[n] = occluded
    return out


def align_pairs(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    level: str = "word",
    layer: int | None = None,
    heads: tuple[int, ...] | None = None,
    step_shift: bool | None = None,
    max_batch_tokens: int = 4096,
) -> list[ForcedAlignment | AlignmentError]:
    """`align_given` with the options spelled out; None = the model's alignment source
    (heads () = the mean of all heads)."""
    options = AlignmentOptions(level, layer, None if heads is None else tuple(heads), step_shift)
    return align_given(translator, pairs, options, max_batch_tokens)


def align_pair(
    translator: Translator,
    source: str,
    target: str,
    level: str = "word",
    layer: int | None = None,
    heads: tuple[int, ...] | None = None,
    step_shift: bool | None = None,
) -> ForcedAlignment:
    """Align one given pair; raises AlignmentError when it cannot be aligned."""
    result = align_pairs(translator, [(source, target)], level, layer, heads, step_shift)[0]
    if isinstance(result, AlignmentError):
        raise result
    return result
