"""The parity check of an export: a bundle's ONNX graphs against torch eager on the same
weights. Greedy and beam-4 tokens identical; the searched alignment maps and scores, the
cross K/V, and the teacher-forced log-probs and cross-attention of every position, layer
and head within `PARITY_TOLERANCE` (fp32). int8 graphs are measured, not held to it. The
results go into bundle.json. Used by `export.exporter` and `export.regraph`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from data.files import BUNDLE_FILE
from seq2seq.core.config import DecodeConfig
from seq2seq.training.model import Transformer, load_model

log = logging.getLogger("crossalign.export")

PARITY_TOLERANCE = 1e-4
# Sentences the parity check translates when no file is given: short and long, with
# punctuation and umlauts, so padding, beam pruning and the length limit are all exercised.
PARITY_SENTENCES = (
    "Das Haus ist klein.",
    "Ich habe heute keine Zeit, weil ich arbeiten muss.",
    "Die Katze schläft auf dem Sofa.",
    "Können Sie mir bitte sagen, wo der Bahnhof ist?",
    "Er wohnt seit drei Jahren in München und arbeitet bei einer großen Firma.",
    "Guten Morgen!",
)


class ParityError(RuntimeError):
    """The written graphs disagree with torch beyond the tolerance."""


@dataclass
class ParityReport:
    sentences: int
    max_log_prob_diff: float = 0.0  # teacher-forced log-probs, every position
    max_cross_weight_diff: float = 0.0  # cross-attention, every layer/head, forced and searched
    max_cross_kv_diff: float = 0.0
    max_score_diff: float = 0.0
    token_agreement: dict[str, float] = field(default_factory=dict)  # "greedy"/"beam4" -> fraction identical
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "problems"}


def check_parity(
    bundle_dir: Path,
    sentences: list[str] | tuple[str, ...] = PARITY_SENTENCES,
    precision: str = "fp32",
    tolerance: float = PARITY_TOLERANCE,
    reference: Transformer | None = None,
) -> ParityReport:
    """Compare the bundle's ONNX graphs with torch eager on `sentences`.

    Checks greedy and beam-4 tokens (identical), the searched alignment maps and scores, the
    cross K/V, and the teacher-forced log-probs and cross-attention of every position,
    layer and head (all within `tolerance`). Mismatches are collected in `problems`.
    """
    from seq2seq.decoding.search import pad_batch
    from seq2seq.decoding.translator import Translator
    from seq2seq.loading import load_translator
    from seq2seq.training.torch_backend import TorchBackend

    onnx_translator = load_translator(bundle_dir, "onnx", precision=precision)
    backend = onnx_translator.backend
    model = reference if reference is not None else load_model(bundle_dir)
    torch_translator = Translator(TorchBackend(model), onnx_translator.tokenizer)
    report = ParityReport(len(sentences))

    for label, decode in (("greedy", DecodeConfig(beam_size=1)), ("beam4", DecodeConfig(beam_size=4))):
        expected = torch_translator.translate_batch(list(sentences), decode)
        actual = onnx_translator.translate_batch(list(sentences), decode)
        same = 0
        for sentence, e, a in zip(sentences, expected, actual):
            if e.target_ids != a.target_ids:
                report.problems.append(
                    f"{label}: tokens differ for {sentence!r}: torch {e.target_ids} onnx {a.target_ids}"
                )
                continue
            same += 1
            report.max_score_diff = max(report.max_score_diff, abs(e.score - a.score))
            if e.attention is not None and a.attention is not None:
                report.max_cross_weight_diff = max(
                    report.max_cross_weight_diff, float(np.abs(e.attention - a.attention).max())
                )
        report.token_agreement[label] = same / max(1, len(sentences))

    # Teacher forcing through the whole decoder graph (T > 1, empty past) on torch's greedy output.
    source = [onnx_translator.encode_source(s) for s in sentences]
    targets = [r.target_ids for r in torch_translator.translate_batch(list(sentences), DecodeConfig(beam_size=1))]
    src_ids, src_mask = pad_batch(source, model.config.pad_id)
    tgt_ids, tgt_mask = pad_batch(targets, model.config.pad_id)
    maps = backend.teacher_force(src_ids, src_mask, tgt_ids)
    with torch.inference_mode():
        encoded = model.encode(torch.from_numpy(src_ids), torch.from_numpy(src_mask))
        bos = torch.full((len(sentences), 1), model.config.bos_id, dtype=torch.long)
        decoded = model.decode(
            torch.cat([bos, torch.from_numpy(tgt_ids)], dim=1),
            encoded.cross_k,
            encoded.cross_v,
            torch.from_numpy(src_mask),
            need_cross_weights=True,
        )
    cross_k, _ = backend.encode(src_ids, src_mask)
    # Real source positions only: the backend encodes sentences of similar length together
    # (lever 21), so padded positions differ, and every decoder score masks them out.
    real = src_mask[None, :, None, :, None]  # against (L, B, H, S, Dh)
    cross_k = backend.keys_in_rows(cross_k)  # the graphs' transposed keys, as the model's
    report.max_cross_kv_diff = float(np.where(real, np.abs(cross_k - encoded.cross_k.numpy()), 0).max())
    # Rows up to each target's own length + 1 (the EOS step); later rows read padding.
    rows = np.concatenate([np.ones((len(targets), 1), dtype=bool), tgt_mask], axis=1)
    log_prob_diff = np.abs(maps.log_probs - decoded.log_probs.numpy())[rows]
    cross_diff = np.abs(maps.cross - decoded.cross_weights.numpy()).transpose(1, 3, 0, 2, 4)[rows]
    report.max_log_prob_diff = float(log_prob_diff.max())
    report.max_cross_weight_diff = max(report.max_cross_weight_diff, float(cross_diff.max()))

    for name in ("max_log_prob_diff", "max_cross_weight_diff", "max_cross_kv_diff", "max_score_diff"):
        value = getattr(report, name)
        if not value <= tolerance:  # also catches NaN
            report.problems.append(f"{name} = {value:.2e} exceeds {tolerance:.0e}")
    return report


def run_parity_checks(directory: Path, model: Transformer, sentences: list[str], int8: bool) -> dict[str, Any]:
    """fp32 must match torch (ParityError otherwise); int8 is measured. Results go into bundle.json."""
    log.info("parity check: onnxruntime fp32 vs torch on %d sentences", len(sentences))
    fp32 = check_parity(directory, sentences, "fp32", reference=model)
    if fp32.problems:
        raise ParityError(
            f"{directory}: the fp32 graphs disagree with torch (bundle left there for "
            f"inspection):\n  - " + "\n  - ".join(fp32.problems)
        )
    log.info("fp32 parity: %s", fp32.as_dict())
    parity = {"fp32": fp32.as_dict()}
    if int8:
        quantized = check_parity(directory, sentences, "int8", tolerance=float("inf"), reference=model)
        parity["int8"] = quantized.as_dict()
        log.info(
            "int8 vs torch: tokens identical for %s of the sentences, max log-prob diff %.3f",
            quantized.token_agreement,
            quantized.max_log_prob_diff,
        )
    manifest_path = directory / BUNDLE_FILE
    manifest = json.loads(manifest_path.read_text())
    manifest["parity"] = parity  # bundle.json is not hashed: adding to it is safe
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return parity
