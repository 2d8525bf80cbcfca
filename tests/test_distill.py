"""Sequence-level distillation (seq2seq/training/distill.py): the device-side greedy search
gives the one search's greedy tokens, and the distilled data directory lines up with the
files that are read line by line beside train.tsv."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from toy import toy_pairs, train_tiny

from data.tokenizer import Tokenizer
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.search import beam_search, pad_batch
from seq2seq.training.distill import LINKS_FILE, greedy_ids, repeats_ngram, translate_sources, write_distilled_data
from seq2seq.training.hint_data import HINTS_FILE
from seq2seq.training.model import Transformer, load_model
from seq2seq.training.torch_backend import TorchBackend


def test_device_greedy_gives_the_search_s_greedy_tokens(tmp_path: Path) -> None:
    """On a random model (every sentence runs to its length limit) and on a trained one
    (sentences end with EOS, at different steps of one batch)."""
    trained = load_model(train_tiny(tmp_path))
    torch.manual_seed(0)
    untrained = Transformer(trained.config).eval()
    tokenizer = Tokenizer(tmp_path / "ckpt" / "spm.model")
    eos = trained.config.eos_id
    sources = [tokenizer.encode(s) + [eos] for s, _ in toy_pairs(12)]
    config = DecodeConfig(beam_size=1, no_repeat_ngram_size=0)  # greedy_ids has no repetition guard
    src_ids, src_mask = pad_batch(sources, trained.config.pad_id)
    limits = [2 * len(s) + 10 for s in sources]
    for model, ends_early in ((untrained, False), (trained, True)):
        expected = [h[0].tokens for h in beam_search(TorchBackend(model), src_ids, src_mask, config, 256)]
        got = greedy_ids(model, sources, config)
        assert got == expected
        assert all((len(tokens) < limit) == ends_early for tokens, limit in zip(got, limits))
    assert len({len(tokens) for tokens in got}) > 1


def test_distilled_data_adds_the_teacher_s_sentences_line_for_line(tmp_path: Path) -> None:
    teacher = load_model(train_tiny(tmp_path))  # a few steps: right on some sentences, wrong on others
    data = tmp_path / "data"
    data.mkdir()
    (data / "spm.model").write_bytes((tmp_path / "ckpt" / "spm.model").read_bytes())
    lines = [f"{source}\t{target}\tsentence" for source, target in toy_pairs(40, seed=5)]
    lines.append("der Hund\tthe dog\tphrase")  # phrases are not translated
    (data / "train.tsv").write_text("".join(line + "\n" for line in lines))
    (data / "valid.tsv").write_text(lines[0] + "\n")
    (data / LINKS_FILE).write_text("".join("0-0\n" for _ in lines))
    (data / HINTS_FILE).write_text("".join("[]\n" for _ in lines))
    out = tmp_path / "distilled"
    summary = write_distilled_data(data, out, teacher)
    written = (out / "train.tsv").read_text().splitlines()
    assert summary["sentences"] == len(lines) - 1 and summary["added"] > 0
    assert written[: len(lines)] == lines and len(written) == len(lines) + summary["added"]
    # Each added line: a training sentence with the teacher's greedy translation, where it differs.
    tokenizer = Tokenizer(data / "spm.model")
    references = dict(line.split("\t")[:2] for line in lines[:-1])
    for line in written[len(lines) :]:
        source, target, kind = line.split("\t")
        assert kind == "sentence" and target != references[source]
        assert target == translate_sources(teacher, tokenizer, [source])[0]
    links = (out / LINKS_FILE).read_text().splitlines()
    assert len(links) == len(written) and links[len(lines) :] == [""] * summary["added"]
    hints = (out / HINTS_FILE).read_text().splitlines()
    assert len(hints) == len(written) and all(json.loads(h) == [] for h in hints)
    assert (out / "spm.model").read_bytes() == (data / "spm.model").read_bytes() and (out / "valid.tsv").is_file()


def test_a_looping_translation_is_recognised() -> None:
    assert repeats_ngram(["the", "dog", "the", "dog", "the", "dog", "the", "dog"])
    assert not repeats_ngram(["the", "dog", "is", "not", "the", "cat"])


def test_a_command_line_teacher_s_translations_become_the_student_s_data(tmp_path: Path) -> None:
    """`distill sources` writes what a teacher translates (`crossalign translate` with an
    ensemble, on the CPU); `distill build` adds its lines, refusing a count that does not match."""
    from seq2seq.training.distill import main

    data = tmp_path / "data"
    data.mkdir()
    lines = ["a b\tA B\tsentence", "c\tC\tphrase", "d e\tD E\tsentence", "f\tF\tsentence"]
    (data / "train.tsv").write_text("".join(line + "\n" for line in lines))
    (data / "valid.tsv").write_text(lines[0] + "\n")
    (data / "test.tsv").write_text(lines[2] + "\n")
    main(["sources", "--data-dir", str(data), "--out", str(tmp_path / "sources.txt")])
    assert (tmp_path / "sources.txt").read_text().splitlines() == ["a b", "d e", "f"]
    # The teacher: one line the reference already says, one that loops, one new.
    (tmp_path / "teacher.txt").write_text("A B\nthe the the the the the the the\nF!\n")
    main(
        [
            "build",
            "--data-dir",
            str(data),
            "--translations",
            str(tmp_path / "teacher.txt"),
            "--out",
            str(tmp_path / "d"),
        ]
    )
    written = (tmp_path / "d" / "train.tsv").read_text().splitlines()
    assert written == lines + ["f\tF!\tsentence"]
    assert json.loads((tmp_path / "d" / "distilled.json").read_text()) == {
        "sentences": 3,
        "added": 1,
        "same_as_reference": 1,
        "looping": 1,
    }
    assert (tmp_path / "d" / "test.tsv").read_text() == lines[2] + "\n"
    # Only the main corpus's sentences: "f" is the extra corpora's (the tail `extra_pairs` long).
    (data / "manifest.json").write_text(json.dumps({"extra_pairs": 1}))
    main(
        ["build", "--data-dir", str(data), "--translations", str(tmp_path / "teacher.txt")]
        + ["--out", str(tmp_path / "m"), "--main-corpus-only"]
    )
    assert (tmp_path / "m" / "train.tsv").read_text().splitlines() == lines
    (tmp_path / "short.txt").write_text("A B\nD E\n")  # two translations for three sentences
    with pytest.raises(SystemExit, match="2 translations for 3 training sentences"):
        main(
            [
                "build",
                "--data-dir",
                str(data),
                "--translations",
                str(tmp_path / "short.txt"),
                "--out",
                str(tmp_path / "x"),
            ]
        )
