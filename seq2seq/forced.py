"""Forced alignment: the alignment map of a *given* translation, by teacher forcing.

Linguists often have the translation already and want only its alignment. The target is
fed to the decoder as BOS + target (teacher forcing) and the cross-attention is read
exactly as for a translation the search produced, so `crossalign align`, `POST /v1/align`,
`crossalign eval --gold` and `bench/alignment_sources.py` all apply the one rule of
`seq2seq.alignment` (layer, heads, step shift, subword -> word, argmax links) to the same
(L, H, T+1, S+1) array that `TranslationResult.attention` holds.

Where the attention comes from, by backend (`teacher_forced_attention`):

- a backend with `attention_maps` (export.runtime.OnnxBackend): one encoder and one
  decoder run over the whole padded batch;
- a backend with a torch `model` (seq2seq.torch_backend.TorchBackend): one
  `Transformer.decode(need_cross_weights=True)` call over the batch; torch is imported
  only then;
- any other `SearchBackend`: one `step` per target token with the KV cache, which is
  exactly what the search computes (slower; used by the scripted test backends).

Words are `seq2seq.alignment.words()` of the texts *as given* (both sides use the
tokenizer's character offsets into the original text), so word indices are those of the
gold set (seq2seq/aer.py) and of eflomal's Pharaoh files. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seq2seq.alignment import Alignment, AlignmentError, AlignmentOptions, Token, align
from seq2seq.search import pad_batch
from seq2seq.translator import Translator


@dataclass
class ForcedAlignment:
    """The alignment of one given pair: word level always, plus the requested level's map."""

    source: str
    target: str
    word: Alignment                          # rows = target words, columns = source words
    alignment: Alignment                     # the requested level (the same object when level="word")

    @property
    def links(self) -> list[tuple[int, int]]:
        """Hard word links (source word, target word)."""
        return self.word.links

    def to_record(self, decimals: int = 4) -> dict:
        """The JSON record of `crossalign align --format jsonl` and of `POST /v1/align`."""
        spans = lambda tokens: [{"text": t.text, "start": t.start, "end": t.end} for t in tokens]  # noqa: E731
        record = {
            "source": self.source, "target": self.target,
            "source_words": spans(self.word.source_tokens), "target_words": spans(self.word.target_tokens),
            "word_alignment": self.word.pharaoh,
            "matrix": np.round(self.word.matrix, decimals).tolist(),
            "layer": self.word.layer, "heads": list(self.word.heads) or "mean", "step_shift": self.word.step_shift,
        }
        if self.alignment is not self.word:
            record["subword_alignment"] = self.alignment.to_dict(decimals)
        return record


# --------------------------------------------------------------------------- attention


def teacher_forced_attention(backend, sources: Sequence[Sequence[int]],
                             targets: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Cross-attention of given translations, one (L, H, T+1, S+1) float array per pair.

    sources: source ids *with* the source EOS; targets: target ids without BOS/EOS. Row t
    is the decoder step that produced target piece t (the last row produced EOS), as in
    `TranslationResult.attention`. Padded batch rows and columns are cut off.
    """
    if not sources:
        return []
    src_ids, src_mask = pad_batch([list(s) for s in sources], backend.pad_id)
    if hasattr(backend, "attention_maps"):
        tgt_ids, _ = pad_batch([list(t) for t in targets], backend.pad_id)
        cross = backend.attention_maps(src_ids, src_mask, tgt_ids)["cross"]              # (L, B, H, T+1, S)
    elif hasattr(backend, "model"):
        cross = _torch_attention(backend.model, src_ids, src_mask, targets)
    else:
        return [_stepwise_attention(backend, list(s), list(t)) for s, t in zip(sources, targets)]
    return [np.asarray(cross[:, row, :, : len(t) + 1, : len(s)], dtype=np.float32)
            for row, (s, t) in enumerate(zip(sources, targets))]


def _torch_attention(model, src_ids: np.ndarray, src_mask: np.ndarray, targets: Sequence[Sequence[int]]) -> np.ndarray:
    """One teacher-forced `Transformer.decode` over the batch -> (L, B, H, T+1, S)."""
    import torch  # only for the torch backend

    config = model.config
    tgt_in, tgt_mask = pad_batch([[config.bos_id] + list(t) for t in targets], config.pad_id)
    with torch.inference_mode():
        mask = torch.from_numpy(src_mask)
        encoded = model.encode(torch.from_numpy(src_ids), mask)
        out = model.decode(torch.from_numpy(tgt_in), encoded.cross_k, encoded.cross_v, mask,
                           tgt_key_mask=torch.from_numpy(tgt_mask), need_cross_weights=True)
    return out.cross_weights.float().numpy()


def _stepwise_attention(backend, source: list[int], target: list[int]) -> np.ndarray:
    """Any SearchBackend: feed BOS + target one token at a time, as the search does."""
    src_ids, src_mask = pad_batch([source], backend.pad_id)
    cross_k, cross_v = backend.encode(src_ids, src_mask)
    past_k = past_v = None
    rows = []
    for token in [backend.bos_id] + target:
        out = backend.step(np.array([[token]], dtype=np.int64), cross_k, cross_v, src_mask, past_k, past_v, True)
        past_k, past_v = out.past_k, out.past_v
        rows.append(np.asarray(out.cross_weights)[:, 0])                                   # (L, H, S)
    return np.stack(rows, axis=2).astype(np.float32)                                     # (L, H, T+1, S)


# --------------------------------------------------------------------------- the map


def _pieces(translator: Translator, text: str) -> tuple[list[int], list[Token]]:
    """Ids and pieces with character offsets into `text` (the text as given, not normalised)."""
    ids, pieces, offsets = translator.tokenizer.encode_with_offsets(text)
    return ids, [Token(p, s, e) for p, (s, e) in zip(pieces, offsets)]


Prepared = tuple[np.ndarray, list[Token], list[Token]]   # attention (L, H, T+1, S+1), source, target pieces


def forced_attention(translator: Translator, pairs: Sequence[tuple[str, str]], max_batch_tokens: int = 4096
                     ) -> list[Prepared | AlignmentError]:
    """Per pair: its teacher-forced attention and pieces, or why it cannot be aligned.

    The raw material of `align_given`, and of scoring many alignment sources from one
    forward pass (bench/alignment_sources.py: `seq2seq.alignment.align` with any options).
    Pairs are batched by length, at most `max_batch_tokens` padded tokens per batch.
    """
    source_limit = translator.max_source_tokens                # already <= max_positions
    target_limit = translator.max_positions
    results: list[Prepared | AlignmentError | None] = [None] * len(pairs)
    todo: list[tuple[int, list[int], list[Token], list[int], list[Token]]] = []
    for index, (source, target) in enumerate(pairs):
        if not source.strip() or not target.strip():
            results[index] = AlignmentError("empty " + ("source" if not source.strip() else "target"))
            continue
        source_ids, source_pieces = _pieces(translator, source)
        target_ids, target_pieces = _pieces(translator, target)
        if len(source_ids) + 1 > source_limit or len(target_ids) + 1 > target_limit:
            results[index] = AlignmentError(
                f"too long: {len(source_ids)} source and {len(target_ids)} target pieces (the model takes at "
                f"most {source_limit - 1} and {target_limit - 1})")
            continue
        todo.append((index, source_ids + [translator.backend.eos_id], source_pieces, target_ids, target_pieces))
    todo.sort(key=lambda item: (len(item[3]), len(item[1])))    # similar lengths share a batch
    start = 0
    while start < len(todo):
        end = start + 1
        while end < len(todo) and (end - start + 1) * max(len(todo[end][1]), len(todo[end][3]) + 1) \
                <= max_batch_tokens:
            end += 1
        chunk = todo[start:end]
        attentions = teacher_forced_attention(translator.backend, [c[1] for c in chunk], [c[3] for c in chunk])
        for (index, _, source_pieces, _, target_pieces), attention in zip(chunk, attentions):
            results[index] = (attention, source_pieces, target_pieces)
        start = end
    return [r for r in results if r is not None]


def align_given(translator: Translator, pairs: Sequence[tuple[str, str]],
                options: AlignmentOptions = AlignmentOptions(), max_batch_tokens: int = 4096
                ) -> list[ForcedAlignment | AlignmentError]:
    """Align given (source, target) pairs; one result per pair, in order.

    Options the model cannot satisfy raise AlignmentError at once; a pair that cannot be
    aligned gives an `AlignmentError` in its place instead, so one bad line never stops a job.
    """
    resolved = options.resolve(translator.config)
    results: list[ForcedAlignment | AlignmentError] = []
    for (source, target), prepared in zip(pairs, forced_attention(translator, pairs, max_batch_tokens)):
        if isinstance(prepared, AlignmentError):
            results.append(prepared)
            continue
        attention, source_pieces, target_pieces = prepared
        maps = align(attention, source, source_pieces, target, target_pieces, resolved)
        results.append(ForcedAlignment(source, target, maps.word, maps.requested))
    return results


def align_pairs(translator: Translator, pairs: Sequence[tuple[str, str]], level: str = "word",
                layer: int | None = None, heads: tuple[int, ...] | None = None, step_shift: bool | None = None,
                max_batch_tokens: int = 4096) -> list[ForcedAlignment | AlignmentError]:
    """`align_given` with the options spelled out; None = the model's alignment source
    (heads () = the mean of all heads)."""
    options = AlignmentOptions(level, layer, None if heads is None else tuple(heads), step_shift)
    return align_given(translator, pairs, options, max_batch_tokens)


def align_pair(translator: Translator, source: str, target: str, level: str = "word", layer: int | None = None,
               heads: tuple[int, ...] | None = None, step_shift: bool | None = None) -> ForcedAlignment:
    """Align one given pair; raises AlignmentError when it cannot be aligned."""
    result = align_pairs(translator, [(source, target)], level, layer, heads, step_shift)[0]
    if isinstance(result, AlignmentError):
        raise result
    return result
