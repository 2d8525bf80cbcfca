"""The Translator and the command line around it: length limits, alignment, --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from toy import SENTENCES

from data.tokenizer import Tokenizer
from seq2seq.core.alignment import SPACE_MARK, Token, label, pieces_with_offsets, visible, words
from seq2seq.core.config import DecodeConfig, ModelConfig
from seq2seq.decoding.translator import Translator
from seq2seq.training.model import Transformer
from seq2seq.training.torch_backend import TorchBackend

ROOT = Path(__file__).resolve().parents[1]


def test_target_length_never_exceeds_the_position_table(tiny_checkpoint: Path) -> None:
    """A source as long as the model allows must not decode past max_positions."""
    torch.manual_seed(0)
    tokenizer = Tokenizer(tiny_checkpoint / "spm.model")
    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        d_model=16,
        n_heads=2,
        d_ff=32,
        encoder_layers=1,
        decoder_layers=1,
        max_positions=12,
        alignment_layer=0,
    )
    translator = Translator(TorchBackend(Transformer(config)), tokenizer)
    long_text = " ".join(SENTENCES * 3)
    result = translator.translate(long_text, DecodeConfig(beam_size=2, max_length_ratio=5.0))
    assert len(result.source_ids) + 1 <= config.max_positions
    assert len(result.target_ids) + 2 <= config.max_positions  # BOS + tokens + EOS fit the table


def test_word_alignment_rows_sum_to_one_and_offsets_point_into_the_texts(tiny_checkpoint: Path) -> None:
    from seq2seq.loading import load_translator

    translator = load_translator(tiny_checkpoint, "torch")
    source = "die Katze war sehr alt und schön heute ."
    result = translator.translate(source)
    for level in ("word", "subword"):
        alignment = translator.align(source, result, level=level)
        matrix = alignment.matrix
        assert matrix.shape == (len(alignment.target_tokens), len(alignment.source_tokens))
        assert np.allclose(matrix.sum(axis=1), 1.0)
        # Every token's offsets slice the text to its text (a bare "▁" covers its whitespace: `visible`).
        for token in alignment.source_tokens:
            assert source[token.start : token.end] == token.text
        for token in alignment.target_tokens:
            assert result.text[token.start : token.end] == token.text
        assert all(0 <= i < matrix.shape[1] and 0 <= j < matrix.shape[0] for i, j in alignment.links)
    assert [t.text for t in translator.align(source, result).source_tokens] == [w.text for w in words(source)]


def test_the_models_step_shift_is_the_default_reading(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import json
    import shutil

    from seq2seq.decoding.forced import align_pair
    from seq2seq.loading import load_translator

    shifted_dir = tmp_path / "shifted"
    shutil.copytree(tiny_checkpoint, shifted_dir)
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    (shifted_dir / "config.json").write_text(json.dumps(config | {"alignment_step_shift": True}))
    plain, shifted = load_translator(tiny_checkpoint, "torch"), load_translator(shifted_dir, "torch")
    source = "die Katze war sehr alt und schön heute ."
    result = plain.translate(source)
    default = shifted.align(source, result)
    assert default.step_shift and not plain.align(source, result).step_shift
    np.testing.assert_array_equal(default.matrix, plain.align(source, result, step_shift=True).matrix)
    assert not np.array_equal(default.matrix, plain.align(source, result).matrix)
    assert not shifted.align(source, result, step_shift=False).step_shift  # an explicit choice still wins
    # Forced alignment (crossalign align, /v1/align, eval --gold) reads the same default.
    forced = align_pair(shifted, source, result.text)
    assert forced.word.step_shift
    explicit = align_pair(plain, source, result.text, step_shift=True)
    np.testing.assert_array_equal(forced.word.matrix, explicit.word.matrix)


def test_align_rejects_layers_and_heads_the_model_does_not_have(tiny_checkpoint: Path) -> None:
    from seq2seq.loading import load_translator

    translator = load_translator(tiny_checkpoint, "torch")
    result = translator.translate("der Hund ist klein .")
    with pytest.raises(ValueError, match="layer"):
        translator.align("der Hund ist klein .", result, layer=7)
    with pytest.raises(ValueError, match="heads"):
        translator.align("der Hund ist klein .", result, heads=(99,))


@pytest.mark.parametrize(
    "command", [[], ["data", "prepare"], ["train"], ["translate"], ["eval"], ["export"], ["serve"]]
)
def test_every_command_has_help(command: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "usage: crossalign" in out.stdout


def test_eval_command_scores_with_sacrebleu_signatures(tmp_path: Path) -> None:
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("the dog is small .\nthe house is red .\n")
    ref.write_text("the dog is small .\nthe house is not red .\n")
    out = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "eval", "--hyp", str(hyp), "--ref", str(ref), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads(out.stdout)
    assert 0 < result["bleu"] < 100 and 0 < result["chrf"] < 100
    assert result["bleu_signature"].startswith("nrefs:1") and "nc:6" in result["chrf_signature"]


def test_a_bare_space_marker_covers_the_whitespace_it_stands_for() -> None:
    """The rule of `seq2seq.core.alignment.visible`: every token's offsets slice the text to its
    text, a piece that is only "▁" included. SentencePiece (the shipped model's) makes one
    before "(" and before a leading "„"; the translation side is rebuilt from pieces."""
    tokenizer = Tokenizer(ROOT / "models" / "de-en" / "spm.model")
    text = "„Hallo“ sagt er: Das Haus (rot) ist äußerst (1) klein."
    _, pieces, offsets = tokenizer.encode_with_offsets(text)
    tokens = [visible(Token(piece, start, end), text) for piece, (start, end) in zip(pieces, offsets)]
    bare = [token for piece, token in zip(pieces, tokens) if piece == SPACE_MARK]
    assert len(bare) >= 3  # the case this test is about: the tokenizer does make bare markers here
    assert all(text[t.start : t.end] == t.text for t in tokens)
    assert bare[0] == Token("", 0, 0)  # before the leading "„": no whitespace to cover
    assert all(t.text == " " and t.end == t.start + 1 for t in bare[1:])
    translation, target = pieces_with_offsets(["▁The", "▁house", "▁", "(", "red", ")", "▁is", "▁small", "."])
    assert translation == "The house (red) is small."
    shown = [visible(t, translation) for t in target]
    assert all(translation[t.start : t.end] == t.text for t in shown)
    assert shown[2] == Token(" ", 9, 10)
    assert [label(t.text) for t in shown[1:4]] == ["house", SPACE_MARK, "("]  # a heatmap labels it "▁"
