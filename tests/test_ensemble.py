"""The ensemble backend (seq2seq/runtime/ensemble.py): members' probabilities averaged behind
the one search, their caches stacked on the layer axis, the alignment of one member; and
ensemble directories (`ensemble.json`) loaded like bundles."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from toy import SENTENCES

from data.files import ENSEMBLE_FILE
from export.exporter import export_model
from seq2seq.core.backend import DecoderCache
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.search import pad_batch
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import BundleError, decode_defaults, read_ensemble, write_ensemble
from seq2seq.runtime.ensemble import EnsembleBackend, EnsembleError, log_mean_exp

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sibling_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with every weight nudged: a second member that agrees with the first on
    the vocabulary but not on the probabilities."""
    work = tmp_path_factory.mktemp("sibling")
    checkpoint = work / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    state = torch.load(checkpoint / "model.pt", map_location="cpu")
    generator = torch.Generator().manual_seed(7)
    for name, value in state.items():
        if value.is_floating_point():
            state[name] = value + 0.05 * torch.randn(value.shape, generator=generator, dtype=value.dtype)
    torch.save(state, checkpoint / "model.pt")
    export_model(checkpoint, work / "bundle", parity_sentences=SENTENCES)
    return work / "bundle"


def test_log_mean_exp_is_the_log_of_the_mean_probability_and_keeps_a_piece_one_member_rules_out():
    a = np.log(np.array([[0.5, 0.3, 0.2]], dtype=np.float32))
    b = np.log(np.array([[0.1, 0.1, 0.8]], dtype=np.float32))
    np.testing.assert_allclose(np.exp(log_mean_exp([a, b])), [[0.3, 0.2, 0.5]], rtol=1e-6)
    ruled_out = np.array([[0.0, -np.inf, -np.inf]], dtype=np.float32)
    mixed = log_mean_exp([ruled_out, b])
    np.testing.assert_allclose(np.exp(mixed), [[0.55, 0.05, 0.4]], rtol=1e-6)
    both_out = log_mean_exp([ruled_out, ruled_out])
    assert both_out[0, 0] == 0.0 and np.isneginf(both_out[0, 1:]).all()


def test_an_ensemble_of_a_model_with_itself_translates_exactly_as_the_model(tiny_bundle: Path, tmp_path: Path):
    single = load_translator(tiny_bundle, threads=1)
    doubled = load_translator(write_ensemble(tmp_path / "twice", [tiny_bundle, tiny_bundle]), threads=1)
    config = DecodeConfig(beam_size=3, alignment=AlignmentOptions())
    for one, two in zip(single.translate_batch(SENTENCES, config), doubled.translate_batch(SENTENCES, config)):
        assert one.text == two.text and one.target_ids == two.target_ids
        assert one.score == two.score  # log(mean(p, p)) == log(p): zero tolerance
        np.testing.assert_array_equal(one.alignment.word.matrix, two.alignment.word.matrix)


def test_each_step_averages_the_members_probabilities_and_stacks_their_caches(tiny_bundle: Path, sibling_bundle):
    first, second = (load_translator(b, threads=1, streams=1).backend for b in (tiny_bundle, sibling_bundle))
    ensemble = EnsembleBackend([first, second], alignment=1)
    src_ids, src_mask = pad_batch([[5, 6, 7, 3], [8, 3]], first.pad_id)
    cross_k, cross_v = ensemble.encode(src_ids, src_mask)
    layers = first.config.decoder_layers
    assert cross_v.shape[0] == 2 * layers
    tokens = np.full((2, 1), first.bos_id, dtype=np.int64)
    out = ensemble.step(tokens, src_mask, DecoderCache.start(cross_k, cross_v), need_attention=True)
    alone = [
        member.step(tokens, src_mask, DecoderCache.start(*member.encode(src_ids, src_mask)), need_attention=True)
        for member in (first, second)
    ]
    expected = np.log((np.exp(alone[0].log_probs) + np.exp(alone[1].log_probs)) / 2)
    np.testing.assert_allclose(out.log_probs, expected, atol=1e-5)
    np.testing.assert_array_equal(out.cache.self_v[:layers], alone[0].cache.self_v)
    np.testing.assert_array_equal(out.cache.self_v[layers:], alone[1].cache.self_v)
    np.testing.assert_array_equal(out.cross_weights, alone[1].cross_weights)  # the alignment member's map
    forced = ensemble.teacher_force(src_ids, src_mask, np.array([[5, 6], [7, 0]]))
    forced_alone = [m.teacher_force(src_ids, src_mask, np.array([[5, 6], [7, 0]])) for m in (first, second)]
    np.testing.assert_allclose(forced.log_probs, log_mean_exp([f.log_probs for f in forced_alone]), atol=1e-6)
    np.testing.assert_array_equal(forced.cross, forced_alone[1].cross)


def test_a_sibling_ensemble_translates_with_the_one_search_and_reports_the_lead_members_map(
    tiny_bundle: Path, sibling_bundle: Path, tmp_path: Path
):
    ensemble = load_translator(write_ensemble(tmp_path / "pair", [tiny_bundle, sibling_bundle]), threads=1)
    config = DecodeConfig(beam_size=2, alignment=AlignmentOptions())
    results = ensemble.translate_batch(SENTENCES[:4], config)
    lead = load_translator(tiny_bundle, threads=1, streams=1).backend
    for result in results:
        assert result.text and result.alignment is not None
        # The map is the lead member's: its attention, teacher-forced on the ensemble's translation.
        src_ids, src_mask = pad_batch([result.source_ids + [lead.eos_id]], lead.pad_id)
        forced = lead.teacher_force(src_ids, src_mask, np.array([result.target_ids], dtype=np.int64))
        np.testing.assert_allclose(result.attention, forced.cross[:, 0], atol=1e-4)


def test_the_ensemble_writes_only_pieces_every_member_knows(tiny_bundle: Path):
    member = load_translator(tiny_bundle, threads=1, streams=1).backend

    class Smaller:  # the same model, as if trained with two pieces fewer
        def __init__(self, inner):
            from dataclasses import replace

            self.inner, self.config = inner, replace(inner.config, vocab_size=inner.config.vocab_size - 2)
            self.bos_id, self.eos_id, self.pad_id = inner.bos_id, inner.eos_id, inner.pad_id
            self.cross_per_sentence = inner.cross_per_sentence

        def encode(self, *args):
            return self.inner.encode(*args)

        def step(self, *args, **kwargs):
            out = self.inner.step(*args, **kwargs)
            out.log_probs = out.log_probs[:, : self.config.vocab_size]
            return out

    ensemble = EnsembleBackend([member, Smaller(member)])
    src_ids, src_mask = pad_batch([[5, 6, 3]], member.pad_id)
    out = ensemble.step(
        np.full((1, 1), member.bos_id), src_mask, DecoderCache.start(*ensemble.encode(src_ids, src_mask)), False
    )
    assert out.log_probs.shape[1] == member.config.vocab_size
    assert np.isneginf(out.log_probs[:, -2:]).all() and np.isfinite(out.log_probs[:, :-2]).all()
    last = member.config.vocab_size - 2  # a piece the smaller member has no row for
    with pytest.raises(EnsembleError, match="no piece"):
        ensemble.encode(*pad_batch([[last, 3]], member.pad_id))
    ensemble.encode(*pad_batch([[last - 1, 3]], member.pad_id))  # its last own piece is read


def test_members_that_cannot_be_searched_together_are_refused_naming_why(tiny_bundle: Path):
    member = load_translator(tiny_bundle, threads=1, streams=1).backend

    class OtherLanguages:
        def __init__(self, inner):
            from dataclasses import replace

            self.config = replace(inner.config, source_lang="fr")
            self.bos_id, self.eos_id, self.pad_id = inner.bos_id, inner.eos_id, inner.pad_id
            self.cross_per_sentence = inner.cross_per_sentence

    with pytest.raises(EnsembleError, match="member 1: languages"):
        EnsembleBackend([member, OtherLanguages(member)])
    with pytest.raises(EnsembleError, match="at least two"):
        EnsembleBackend([member])
    with pytest.raises(EnsembleError, match="alignment member 2"):
        EnsembleBackend([member, member], alignment=2)


def test_ensemble_json_is_checked_at_n_and_n_plus_one(tiny_bundle: Path, tmp_path: Path):
    def spec(directory: Path, value) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ENSEMBLE_FILE).write_text(json.dumps(value))
        return directory

    member = str(tiny_bundle)
    with pytest.raises(BundleError, match="at least two"):
        read_ensemble(spec(tmp_path / "one", {"members": [member]}))
    assert len(read_ensemble(spec(tmp_path / "two", {"members": [member, member]})).members) == 2
    assert read_ensemble(spec(tmp_path / "last", {"members": [member, member], "alignment": 1})).alignment == 1
    with pytest.raises(BundleError, match="alignment"):
        read_ensemble(spec(tmp_path / "past", {"members": [member, member], "alignment": 2}))
    with pytest.raises(BundleError, match="no such member"):
        read_ensemble(spec(tmp_path / "missing", {"members": [member, str(tmp_path / "nowhere")]}))
    with pytest.raises(BundleError, match="decoding.beam_size"):
        read_ensemble(spec(tmp_path / "bad", {"members": [member, member], "decoding": {"beam_size": 0}}))
    with pytest.raises(BundleError, match="unreadable"):
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / ENSEMBLE_FILE).write_text("{")
        read_ensemble(tmp_path / "broken")


def test_an_ensemble_serves_its_own_decoding_else_its_alignment_members(tiny_bundle: Path, tmp_path: Path):
    moved = tmp_path / "elsewhere" / "de-en"
    shutil.copytree(tiny_bundle, moved)
    plain = write_ensemble(tmp_path / "plain", [moved, tiny_bundle], alignment=1)
    assert decode_defaults(plain) == decode_defaults(tiny_bundle)
    assert json.loads((plain / ENSEMBLE_FILE).read_text())["members"][0] == "../elsewhere/de-en"  # relative
    own = write_ensemble(tmp_path / "own", [tiny_bundle, moved], decoding={"beam_size": 2, "length_penalty": 0.5})
    assert decode_defaults(own).beam_size == 2 and load_translator(own, threads=1).decode_defaults.length_penalty == 0.5


def test_the_command_line_translates_with_an_ensemble_directory(tiny_bundle: Path, tmp_path: Path):
    ensemble = write_ensemble(tmp_path / "pair", [tiny_bundle, tiny_bundle])
    found = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "translate", "-m", str(ensemble), "--threads", "1", SENTENCES[0]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == load_translator(tiny_bundle, threads=1).translate(SENTENCES[0]).text
