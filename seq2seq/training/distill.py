"""Sequence-level knowledge distillation (Kim & Rush 2016, "Sequence-Level Knowledge
Distillation"): a large teacher translates the training sentences, and the served-size
student trains on the teacher's translations beside the references.

The teacher is trained on a lent GPU in the GPU round (`seq2seq.training.gpu_round`), where
the whole round, distillation included, must fit one command of a few minutes, so the
teacher translates with `greedy_ids`: a batched greedy search that keeps the KV cache on the
model's device. The one beam search (`seq2seq.decoding.search`) is numpy in and out and would
move every step's cache through the host; `greedy_ids` gives the same tokens as its greedy
search (tested on the CPU), and serving never uses it.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

import torch
from tqdm import tqdm

from data.corpora.pairs import SENTENCE
from data.files import DICTIONARY_FILE, TOKENIZER_FILE
from data.prepare import read_pairs
from data.tokenizer import Tokenizer
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.search import max_target_length
from seq2seq.training.hint_data import HINTS_FILE
from seq2seq.training.model import Transformer, key_padding_mask

log = logging.getLogger("crossalign.distill")

LINKS_FILE = "eflomal.train.pharaoh"


@torch.inference_mode()
def greedy_ids(
    model: Transformer, sources: list[list[int]], config: DecodeConfig = DecodeConfig(), bf16: bool = False
) -> list[list[int]]:
    """Greedy translations of `sources` (each a list of piece ids ending in EOS), one batch,
    on the model's device: the target ids of each, without EOS. The length limit, the
    banned PAD and BOS and the forced EOS at the limit are the search's (`beam_search`)."""
    model.eval()
    cfg = model.config
    device = next(model.parameters()).device
    width = max(len(s) for s in sources)
    src = torch.full((len(sources), width), cfg.pad_id, dtype=torch.long)
    for row, ids in enumerate(sources):
        src[row, : len(ids)] = torch.tensor(ids)
    src = src.to(device)
    mask = key_padding_mask(src, cfg.pad_id)  # (B, S) True at real tokens
    limits = torch.tensor(
        [min(max_target_length(len(ids), config), cfg.max_positions - 2) for ids in sources], device=device
    )
    tokens = torch.full((len(sources), 1), cfg.bos_id, dtype=torch.long, device=device)
    done = torch.zeros(len(sources), dtype=torch.bool, device=device)
    chosen: list[torch.Tensor] = []
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        encoded = model.encode(src, mask)
        past_k = past_v = None
        for step in range(int(limits.max()) + 1):
            out = model.decode(tokens, encoded.cross_k, encoded.cross_v, mask, past_k, past_v)
            log_probs = out.log_probs[:, -1].float()  # (B, V)
            log_probs[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")
            at_limit = limits <= step
            eos = log_probs[:, cfg.eos_id].clone()
            log_probs[at_limit] = float("-inf")
            log_probs[at_limit, cfg.eos_id] = eos[at_limit]
            # A sentence that ended stays in the batch (writing PAD) until all have ended.
            next_tokens = torch.where(done, cfg.pad_id, log_probs.argmax(dim=-1))
            chosen.append(next_tokens)
            done |= next_tokens == cfg.eos_id
            if bool(done.all()):
                break
            tokens, past_k, past_v = next_tokens[:, None], out.layer_k, out.layer_v
    rows = torch.stack(chosen, dim=1).tolist()  # (B, T)
    return [[t for t in row if t != cfg.pad_id][:-1] if cfg.eos_id in row else row for row in rows]


def translate_sources(
    model: Transformer, tokenizer: Tokenizer, texts: list[str], max_tokens: int | None = None, bf16: bool = False
) -> list[str]:
    """Greedy translations of `texts`, in batches of similar length of at most `max_tokens`
    source pieces (sorted by length, so little of a batch is padding; default 12,000 on the
    CPU, 64,000 on a GPU, where a step costs about the same for any batch that fits)."""
    if max_tokens is None:
        max_tokens = 12_000 if next(model.parameters()).device.type == "cpu" else 64_000
    encoded = [tokenizer.encode(text)[: model.config.max_positions - 1] + [model.config.eos_id] for text in texts]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    results: list[str] = [""] * len(texts)
    batch: list[int] = []
    with tqdm(total=len(texts), desc="distil", unit="sent", mininterval=5) as progress:
        for position, index in enumerate(order):
            batch.append(index)
            last = position == len(order) - 1
            if last or (len(batch) + 1) * len(encoded[order[position + 1]]) > max_tokens:
                for i, ids in zip(batch, greedy_ids(model, [encoded[i] for i in batch], bf16=bf16)):
                    results[i] = tokenizer.decode(ids)
                progress.update(len(batch))
                batch = []
    return results


def repeats_ngram(words: list[str], n: int = 4) -> bool:
    """Whether some n words occur twice in a row of words: a greedy search caught in a loop."""
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(grams) != len(set(grams))


def sentence_sources(data_dir: Path) -> list[str]:
    """The sources of `data_dir`'s training sentences, in file order: what a teacher
    translates (phrases are not: the dictionary's own pairs are what the recipe samples them for)."""
    return [p.source for p in read_pairs(data_dir / "train.tsv") if p.kind == SENTENCE]


def write_distilled_data(data_dir: Path, out_dir: Path, model: Transformer, bf16: bool = False) -> dict:
    """`write_teacher_data` with `model`'s greedy translations (the GPU round's teacher)."""
    tokenizer = Tokenizer(data_dir / TOKENIZER_FILE)
    return write_teacher_data(
        data_dir, out_dir, translate_sources(model, tokenizer, sentence_sources(data_dir), bf16=bf16)
    )


def write_teacher_data(data_dir: Path, out_dir: Path, translations: list[str], main_corpus_only: bool = False) -> dict:
    """A data directory for the student: `data_dir`'s training lines and, after them, each
    training sentence again with the teacher's translation as its target (`translations`,
    one per `sentence_sources(data_dir)`, in order; a CPU ensemble's or a GPU model's). The
    references stay because at our data size they carry what the teacher got wrong; the
    added lines have no alignment links and no hint candidates (an empty line in each file
    supervises nothing). `main_corpus_only`: add only the main corpus's sentences (Ding's),
    not those of the extra corpora, which `data prepare` appends to train.tsv (its manifest's
    `extra_pairs`). Returns counts for the run's summary. Raises ValueError when the
    translations do not match the sentences in number."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = read_pairs(data_dir / "train.tsv")
    sentences = [p for p in pairs if p.kind == SENTENCE]
    if len(translations) != len(sentences):
        raise ValueError(f"{len(translations)} translations for {len(sentences)} training sentences in {data_dir}")
    looping = [repeats_ngram(t.split()) for t in translations]
    main = len(pairs)
    if main_corpus_only:
        main -= json.loads((data_dir / "manifest.json").read_text(encoding="utf-8")).get("extra_pairs", 0)
    in_main = [i < main for i, p in enumerate(pairs) if p.kind == SENTENCE]
    added = [
        (p.source, t)
        for p, t, loop, keep in zip(sentences, translations, looping, in_main)
        if keep and t.strip() and t != p.target and not loop and "\t" not in t
    ]
    with open(out_dir / "train.tsv", "w", encoding="utf-8") as handle:
        handle.write((data_dir / "train.tsv").read_text(encoding="utf-8"))
        handle.writelines(f"{source}\t{target}\t{SENTENCE}\n" for source, target in added)
    for name, empty in ((LINKS_FILE, "\n"), (HINTS_FILE, "[]\n")):
        if (data_dir / name).is_file():
            (out_dir / name).write_text((data_dir / name).read_text(encoding="utf-8") + empty * len(added))
    for name in ("valid.tsv", "test.tsv", TOKENIZER_FILE, "manifest.json", DICTIONARY_FILE):
        if (data_dir / name).is_file():
            shutil.copyfile(data_dir / name, out_dir / name)
    summary = {
        "sentences": len(sentences),
        "added": len(added),
        "same_as_reference": sum(t == p.target for p, t in zip(sentences, translations)),
        "looping": sum(looping),  # caught in a loop: such outputs are dropped
    }
    (out_dir / "distilled.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("distilled %d sentences: %d added", len(sentences), len(added))
    return summary


def main(argv: list[str] | None = None) -> None:
    """`python -m seq2seq.training.distill sources|build`: the two steps around a teacher that
    translates on the command line (an ensemble directory through `crossalign translate`)."""
    parser = argparse.ArgumentParser(
        prog="python -m seq2seq.training.distill",
        description="sequence-level distillation data: the training sentences out, the teacher's translations in",
    )
    steps = parser.add_subparsers(dest="step", required=True)
    sources = steps.add_parser("sources", help="write the training sentences' sources, one per line")
    sources.add_argument("--data-dir", type=Path, required=True, help="a prepared data directory")
    sources.add_argument("--out", type=Path, required=True, help="the file to write")
    build = steps.add_parser("build", help="a data directory with the teacher's translations added")
    build.add_argument("--data-dir", type=Path, required=True, help="the data directory the sources came from")
    build.add_argument("--translations", type=Path, required=True, help="the teacher's output, one line per source")
    build.add_argument("--out", type=Path, required=True, help="the new data directory")
    build.add_argument(
        "--main-corpus-only", action="store_true", help="add the main corpus's sentences only, not the extra corpora's"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    data_dir = args.data_dir.expanduser()
    if args.step == "sources":
        found = sentence_sources(data_dir)
        args.out.write_text("".join(f"{line}\n" for line in found), encoding="utf-8")
        log.info("%d training sentences -> %s", len(found), args.out)
        return
    translations = args.translations.read_text(encoding="utf-8").split("\n")
    if translations and translations[-1] == "":
        translations.pop()
    try:
        summary = write_teacher_data(data_dir, args.out.expanduser(), translations, args.main_corpus_only)
    except ValueError as error:
        raise SystemExit(f"distill build: {error}") from None
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
