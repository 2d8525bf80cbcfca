"""Search streams (`Translator.streams`, `onnx_backend.default_streams`): a batch split into
sub-batches searched at once, on real onnxruntime graphs, translates as the whole batch
does, each share on its own thread over the one-thread stream sessions."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.runs import plan_runs
from seq2seq.decoding.translator import TranslationResult, Translator
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import load_bundle_manifest
from seq2seq.runtime.onnx_backend import OnnxBackend, default_streams

SHIPPED_BUNDLE = Path(__file__).resolve().parents[1] / "models" / "de-en"
GOLD = Path(__file__).resolve().parents[1] / "data" / "gold" / "de-en.gold.tsv"


def spy_on_encode(monkeypatch: pytest.MonkeyPatch, backend: OnnxBackend) -> list[tuple[int, int]]:
    """Record (thread id, sentences) of every `encode` of `backend`: one per searched batch."""
    calls: list[tuple[int, int]] = []
    encode = backend.encode

    def recording(src_ids: np.ndarray, src_mask: np.ndarray):
        calls.append((threading.get_ident(), len(src_ids)))
        return encode(src_ids, src_mask)

    monkeypatch.setattr(backend, "encode", recording)
    return calls


def assert_same_results(actual: list[TranslationResult], expected: list[TranslationResult], exact: bool) -> None:
    assert [r.text for r in actual] == [r.text for r in expected]
    for mine, theirs in zip(actual, expected, strict=True):
        assert mine.target_ids == theirs.target_ids
        if exact:
            assert mine.score == theirs.score and mine.token_log_probs == theirs.token_log_probs
            assert np.array_equal(mine.attention, theirs.attention)
        else:  # fp32 MatMuls may round differently at another batch size or thread count
            assert mine.score == pytest.approx(theirs.score, abs=1e-4)
            np.testing.assert_allclose(mine.attention, theirs.attention, atol=1e-4)


@pytest.mark.parametrize("beam", [1, 4])
def test_two_streams_translate_the_shipped_int8_bundle_exactly_as_one_batch(beam: int) -> None:
    if "int8" not in load_bundle_manifest(SHIPPED_BUNDLE, verify=False).precisions:
        pytest.fail("the shipped bundle carries int8 graphs")
    sentences = [line.split("\t")[0] for line in GOLD.read_text(encoding="utf-8").splitlines()[:12]]
    one = load_translator(SHIPPED_BUNDLE, precision="int8", threads=2, streams=1, verify=False)
    two = load_translator(SHIPPED_BUNDLE, precision="int8", threads=2, verify=False)
    assert (one.streams, two.streams) == (1, 2)
    config = DecodeConfig(beam_size=beam, n_best=beam)
    whole, streamed = one.translate_batch(sentences, config), two.translate_batch(sentences, config)
    assert_same_results(streamed, whole, exact=True)  # calibrated int8 does not depend on the batch
    for mine, theirs in zip(streamed, whole, strict=True):
        assert [a.target_ids for a in mine.alternatives] == [a.target_ids for a in theirs.alternatives]


def test_two_streams_translate_the_tiny_fp32_bundle_as_one_batch(tiny_bundle: Path) -> None:
    from toy import SENTENCES

    one = load_translator(tiny_bundle, threads=2, streams=1, verify=False)
    two = load_translator(tiny_bundle, threads=2, streams=2, verify=False)
    config = DecodeConfig(beam_size=3, coverage_penalty=0.3)
    assert_same_results(two.translate_batch(SENTENCES, config), one.translate_batch(SENTENCES, config), exact=False)


def test_each_stream_searches_its_share_of_the_batch_on_its_own_thread(
    monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path
) -> None:
    from toy import SENTENCES

    translator = load_translator(tiny_bundle, threads=2, verify=False)
    assert translator.streams == 2 and translator.stream_backend is not translator.backend
    on_streams = spy_on_encode(monkeypatch, translator.stream_backend)
    on_whole = spy_on_encode(monkeypatch, translator.backend)
    results = translator.translate_batch(SENTENCES[:5], DecodeConfig(beam_size=2))
    assert len(results) == 5 and not on_whole
    assert sorted(size for _, size in on_streams) == [2, 3]  # dealt out in turn
    threads = {thread for thread, _ in on_streams}
    assert len(threads) == 2 and threading.get_ident() in threads  # one share on the caller's thread


def test_one_sentence_is_searched_whole_on_every_thread(monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path) -> None:
    from toy import SENTENCES

    translator = load_translator(tiny_bundle, threads=2, verify=False)
    on_streams = spy_on_encode(monkeypatch, translator.stream_backend)
    on_whole = spy_on_encode(monkeypatch, translator.backend)
    translator.translate(SENTENCES[0], DecodeConfig(beam_size=4))
    assert on_whole == [(threading.get_ident(), 1)] and not on_streams


def fewest_runs(lengths: list[int], beams: int, budget: int) -> int:
    """The least number of runs of consecutive sources sorted by length, each within the
    budget or a lone source: by dynamic programming over where the last run starts."""
    fewest = [0] + [len(lengths)] * len(lengths)  # fewest[j]: for the first j sources
    for end in range(1, len(lengths) + 1):
        for start in range(end):
            if end - start == 1 or lengths[end - 1] * (end - start) * beams <= budget:
                fewest[end] = min(fewest[end], fewest[start] + 1)
    return fewest[-1]


def test_a_batch_over_the_token_budget_is_cut_into_even_runs_not_a_lone_leftover() -> None:
    # 31 short sources and one long: a fill from the shortest gave 31 and then 1.
    assert plan_runs([5] * 31 + [40], 4, 4096) == [range(0, 16), range(16, 32)]
    assert plan_runs([30] * 32, 4, 4096) == [range(0, 32)]  # within budget: one run
    assert plan_runs([5, 6, 300], 4, 100) == [range(0, 2), range(2, 3)]  # over budget alone: alone
    assert plan_runs([], 4, 100) == []
    rng = np.random.default_rng(0)
    for _ in range(1500):
        lengths = sorted(rng.integers(1, 60, size=int(rng.integers(1, 40))).tolist())
        beams, budget = int(rng.choice([1, 2, 4])), int(rng.integers(1, 600))
        runs = plan_runs(lengths, beams, budget)
        assert [i for run in runs for i in run] == list(range(len(lengths)))
        assert all(len(run) == 1 or lengths[run[-1]] * len(run) * beams <= budget for run in runs)
        assert len(runs) == fewest_runs(lengths, beams, budget)


def test_a_batch_searched_in_runs_translates_as_one_batch(monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path) -> None:
    from toy import SENTENCES

    whole = load_translator(tiny_bundle, threads=1, max_batch_tokens=1 << 30, verify=False)
    cut = load_translator(tiny_bundle, threads=1, verify=False)
    config = DecodeConfig(beam_size=2)
    lengths = sorted(len(cut.encode_source(s)) for s in SENTENCES)
    cut.max_batch_tokens = lengths[-1] * 2 * (len(SENTENCES) // 2)  # room for half the batch
    searched = spy_on_encode(monkeypatch, cut.backend)
    assert_same_results(cut.translate_batch(SENTENCES, config), whole.translate_batch(SENTENCES, config), exact=False)
    assert [size for _, size in searched] == [len(run) for run in plan_runs(lengths, 2, cut.max_batch_tokens)]
    assert len(searched) == 2 and abs(searched[0][1] - searched[1][1]) <= 1


def test_a_failing_stream_fails_the_call(monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path) -> None:
    from toy import SENTENCES

    translator = load_translator(tiny_bundle, threads=2, verify=False)
    encode = translator.stream_backend.encode
    caller = threading.get_ident()

    def failing_off_the_caller(src_ids, src_mask):
        if threading.get_ident() != caller:
            raise RuntimeError("stream broke")
        return encode(src_ids, src_mask)

    monkeypatch.setattr(translator.stream_backend, "encode", failing_off_the_caller)
    with pytest.raises(RuntimeError, match="stream broke"):
        translator.translate_batch(SENTENCES[:4])


def test_streams_follow_the_threads_and_share_them_out(tiny_bundle: Path) -> None:
    assert [default_streams(threads) for threads in (1, 2, 3, 4)] == [1, 2, 2, 2]
    bundle = load_bundle_manifest(tiny_bundle, verify=False)
    alone = OnnxBackend.from_bundle(bundle, threads=1)
    assert alone.streams == 1 and alone.stream_backend is alone
    paired = OnnxBackend.from_bundle(bundle, threads=4)
    assert paired.streams == 2 and paired.stream_backend.streams == 1
    for session in (paired.stream_backend.encoder, paired.stream_backend.decoder):
        assert session.get_session_options().intra_op_num_threads == 2  # 4 threads shared by 2 streams
    assert paired.encoder.get_session_options().intra_op_num_threads == 4  # a batch searched whole
    with pytest.raises(ValueError, match="streams"):
        OnnxBackend.from_bundle(bundle, threads=2, streams=0)
    with pytest.raises(ValueError, match="streams"):
        Translator(alone, load_translator(tiny_bundle, verify=False).tokenizer, streams=0)


def test_small_int8_runs_share_the_streams_one_thread_decoder_session() -> None:
    """An int8 backend on two threads runs batch-1 steps on one thread (`SMALL_STEP_ROWS`),
    and its two streams run on one thread each: one session of the decoder serves both."""
    bundle = load_bundle_manifest(SHIPPED_BUNDLE, verify=False)
    if "int8" not in bundle.precisions:
        pytest.fail("the shipped bundle carries int8 graphs")
    backend = OnnxBackend.from_bundle(bundle, precision="int8", threads=2)
    assert backend.small_decoder is backend.stream_backend.decoder
    assert backend.small_decoder.get_session_options().intra_op_num_threads == 1
    assert backend.decoder.get_session_options().intra_op_num_threads == 2
    wider = OnnxBackend.from_bundle(bundle, precision="int8", threads=4)  # streams of two threads
    assert wider.small_decoder is not wider.stream_backend.decoder
    assert wider.small_decoder.get_session_options().intra_op_num_threads == 1


def test_the_batch_cli_writes_the_same_translations_with_and_without_streams(tiny_bundle: Path, tmp_path: Path) -> None:
    from toy import SENTENCES

    from seq2seq.cli import main as cli_main
    from seq2seq.cli.batch import EXIT_USAGE

    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    written = {}
    for streams in ("1", "2"):
        output = tmp_path / f"streams{streams}.txt"
        command = ["translate", "-m", str(tiny_bundle), "-i", str(source), "-o", str(output), "--threads", "2"]
        assert cli_main([*command, "--streams", streams, "--batch-size", "8"]) == 0
        written[streams] = output.read_text(encoding="utf-8").splitlines()
    assert len(written["1"]) == len(SENTENCES) and written["2"] == written["1"]
    assert cli_main(["translate", "-m", str(tiny_bundle), "-i", str(source), "--streams", "-1"]) == EXIT_USAGE


def test_the_service_setting_reaches_every_served_translator(tiny_bundle: Path) -> None:
    from service.compute.engine import load_engine

    for streams, expected in ((0, 2), (1, 1)):
        engine = load_engine(tiny_bundle, threads=2, streams=streams)
        try:
            (served,) = engine.models.values()
            assert served.translator.streams == expected
        finally:
            engine.close()
