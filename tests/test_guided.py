"""Guided alignment: the word -> subword supervision rule, the rows it supervises with and
without the step shift, the loss, and a run that makes a head align.

The last test trains two tiny models on a reversal task, whose gold alignment is the
anti-diagonal: with guidance, the guided head's AER drops far below the unguided one's.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TOY_ALPHABET, write_toy_tokenizer
from toy import toy_model_config

from data.prepare import read_pairs
from data.tokenizer import Tokenizer
from seq2seq.analysis.aer import write_pharaoh
from seq2seq.cli import main as cli_main
from seq2seq.core.config import TrainConfig
from seq2seq.training.guided import GuidedAlignment, guided_loss
from seq2seq.training.train import train
from seq2seq.training.train_data import BatchExample, load_examples


class FakeTokenizer:
    """A fixed segmentation with subwords, to check the word -> subword supervision rule."""

    SEGMENTS = {
        "Das Hausboot sinkt": ["▁Das", "▁Haus", "boot", "▁sinkt"],
        "The house boat is sinking": ["▁The", "▁house", "▁boat", "▁is", "▁sink", "ing"],
    }

    def encode_with_offsets(self, text: str):
        pieces, offsets, position = self.SEGMENTS[text], [], 0
        for piece in pieces:
            visible = piece.replace("▁", " ") if position else piece.lstrip("▁")
            offsets.append((position, position + len(visible)))
            position += len(visible)
        return list(range(len(pieces))), pieces, offsets


def test_guided_rule_maps_word_links_to_subword_rows(tmp_path: Path) -> None:
    links = tmp_path / "links.pharaoh"
    links.write_text("0-0 1-1 1-2 2-3 2-4\n")
    pairs = read_pairs_text(tmp_path, "Das Hausboot sinkt\tThe house boat is sinking\tsentence\n")
    gold = GuidedAlignment(links, pairs, [0], FakeTokenizer()).distribution(0, n_source=4, n_target=6)
    half = [0, 0.5, 0.5, 0, 0]
    np.testing.assert_allclose(
        gold,
        [
            [1, 0, 0, 0, 0],  # The -> Das
            half,  # house -> Haus boot (both pieces of Hausboot)
            half,  # boat -> Haus boot
            [0, 0, 0, 1, 0],  # is -> sinkt
            [0, 0, 0, 1, 0],  # sink -> sinkt
            [0, 0, 0, 1, 0],
        ],
    )  # ing -> sinkt; EOS column never supervised
    links.write_text("0-0 7-7\n")  # out-of-range links are dropped
    unaligned = GuidedAlignment(links, pairs, [0], FakeTokenizer()).distribution(0, 4, 6)
    assert unaligned[0, 0] == 1 and unaligned[1:].sum() == 0  # rows of unaligned words stay unsupervised


@pytest.mark.parametrize("step_shift", [True, False])
def test_guided_rows_are_the_input_steps_of_the_pieces_with_the_step_shift(tmp_path: Path, step_shift: bool) -> None:
    links = tmp_path / "links.pharaoh"
    links.write_text("0-0 1-1 1-2 2-3 2-4\n")
    pairs = read_pairs_text(tmp_path, "Das Hausboot sinkt\tThe house boat is sinking\tsentence\n")
    guided = GuidedAlignment(links, pairs, [0], FakeTokenizer(), step_shift=step_shift)
    batch = [BatchExample(0, [4, 5, 6, 7, 3], [8, 9, 10, 11, 12, 13])]  # 4 source pieces + EOS, 6 target pieces
    rows = guided.targets(batch)[0].numpy()  # (T + 1 decoder steps, S + 1)
    per_piece = guided.distribution(0, n_source=4, n_target=6)
    # Decoder step p reads BOS + y_<p and produces y_p: shifted, piece t is supervised at
    # step t + 1 (where it is the input) and step 0 (input BOS) is free; else at step t.
    first = 1 if step_shift else 0
    np.testing.assert_allclose(rows[first : first + 6], per_piece)
    free = 0 if step_shift else 6
    assert rows.shape == (7, 5) and rows[free].sum() == 0


def read_pairs_text(directory: Path, text: str):
    path = directory / "train.tsv"
    path.write_text(text)
    return read_pairs(path)


def test_guided_loss_is_zero_without_gold_and_examples_keep_their_lines(
    tmp_path: Path, toy_tokenizer_path: Path
) -> None:
    weights = torch.softmax(torch.randn(2, 3, 4), dim=-1)
    assert guided_loss(weights, torch.zeros(2, 3, 4)) == (0, 0)
    gold = torch.zeros(2, 3, 4)
    gold[0, 1, 2] = 1.0
    total, rows = guided_loss(weights, gold)
    assert rows == 1 and torch.isclose(total, -weights[0, 1, 2].log())
    # Dropped (over-long) and upsampled pairs: every example remembers its train.tsv line.
    path = tmp_path / "train.tsv"
    path.write_text("a b\tb a\tsentence\n" + "a " * 40 + "\ta\tsentence\nc\td\tphrase\ne f\tf e\tsentence\n")
    lines: list[int] = []
    examples = load_examples(path, Tokenizer(toy_tokenizer_path), 16, upsample_sentences=2, lines=lines)
    assert lines == [0, 0, 2, 3, 3] and len(examples) == 5
    assert examples == load_examples(path, Tokenizer(toy_tokenizer_path), 16, upsample_sentences=2)


def reversal_pairs(count: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(count):
        words = [rng.choice(TOY_ALPHABET) for _ in range(rng.randint(3, 6))]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


def anti_diagonal(source: str) -> list[tuple[int, int]]:
    n = len(source.split())
    return [(i, n - 1 - i) for i in range(n)]


def test_guided_alignment_makes_the_head_align(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Reversal task: with the anti-diagonal as guidance, the guided head's AER drops far below
    the same head's AER after the same training without guidance."""
    rng = random.Random(0)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(write_toy_tokenizer(tmp_path), data / "spm.model")
    training, valid, test = reversal_pairs(2000, rng), reversal_pairs(20, rng), reversal_pairs(50, rng)
    (data / "train.tsv").write_text("".join(f"{s}\t{t}\tsentence\n" for s, t in training))
    (data / "valid.tsv").write_text("".join(f"{s}\t{t}\tsentence\n" for s, t in valid))
    write_pharaoh(tmp_path / "train.pharaoh", [anti_diagonal(s) for s, _ in training])
    gold = tmp_path / "gold.tsv"
    gold.write_text("".join(f"{s}\t{t}\t{' '.join(f'{i}-{j}' for i, j in anti_diagonal(s))}\n" for s, t in test))
    model = toy_model_config(max_positions=64)
    aer = {}
    for guided in (False, True):
        out = tmp_path / ("guided" if guided else "plain")
        config = TrainConfig(
            data_dir=str(data),
            out_dir=str(out),
            max_tokens=256,
            max_steps=100,
            lr=1e-2,
            warmup_steps=20,
            valid_every=100,
            valid_bleu_sentences=0,
            save_every=100,
            keep_checkpoints=1,
            average_last=1,
            threads=1,
            guided_alignment=str(tmp_path / "train.pharaoh") if guided else "",
            guided_weight=1.0,
        )
        final = train(config, model, resume=False)
        history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
        assert ("guided_loss" in history[-1]) == guided
        saved = json.loads((final / "config.json").read_text())
        assert saved["alignment_heads"] == ([0] if guided else [])  # the guided head becomes the default
        assert saved["alignment_step_shift"] == guided  # read as it was supervised
        capsys.readouterr()
        assert (
            cli_main(
                [
                    "eval",
                    "--gold",
                    str(gold),
                    "--model",
                    str(final),
                    "--backend",
                    "torch",
                    "--layer",
                    "0",
                    "--heads",
                    "0",
                    "--json",
                ]
            )
            == 0
        )
        aer[guided] = json.loads(capsys.readouterr().out)["aer"]
    assert aer[True] < 35.0 and aer[True] < aer[False] - 25.0, aer
