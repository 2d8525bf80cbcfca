"""The repetition guard (`DecodeConfig.no_repeat_ngram_size`, seq2seq/decoding/repeats.py): which
pieces it bans, that a guarded search is the search of a model that never repeats (greedy
and beam 4, with and without the decoder graph's TopK), that it changes nothing where
nothing repeats, and that the CLIs and the HTTP service pass it on and refuse bad values.

The stuttering decoder below likes to say its last piece again, so unguarded searches
repeat; its twin bans the repeats in its own log-probs (a plain Python loop over each
prefix, independent of the vectorised guard), and the guarded search must equal the
unguarded search of the twin, scores and all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from batch_toy import toy_sentences, translate
from echo_backend import make_client
from fastapi.testclient import TestClient
from scripted_backend import EOS, A, B, ScriptedBackend, lp, plain, sources

from seq2seq.cli import build_parser
from seq2seq.cli import main as cli_main
from seq2seq.cli.translate import check_resume_options, fill_unset_options, job_file, job_options
from seq2seq.core.backend import DecoderCache, StepOutput
from seq2seq.core.config import DecodeConfig, ModelConfig
from seq2seq.decoding import candidates, repeats
from seq2seq.decoding.repeats import repeated_ngram_bans
from seq2seq.decoding.search import beam_search, greedy_search, pad_batch
from seq2seq.loading import load_translator
from service.compute.engine import TranslatorEngine

PAD, UNK, BOS = 0, 1, 2


def repeats_of(prefix: list[int], n: int) -> set[int]:
    """The pieces that would repeat an n-gram of `prefix`, by the definition."""
    context = tuple(prefix[len(prefix) - n + 1 :]) if n > 1 else ()
    return {prefix[i + n - 1] for i in range(len(prefix) - n + 1) if tuple(prefix[i : i + n - 1]) == context}


def has_repeated_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


class StutterBackend:
    """A fake model whose next piece depends on its last one (a fixed random table per
    sentence) with a bonus for saying it again; EOS grows likelier with length. The prefix
    is kept in the 'KV cache' (as the scripted backend does), so a wrongly reordered guard
    history and a wrongly reordered cache would disagree. `bans_itself` = n: the repeats
    of n-grams get -inf in its own log-probs. `ranks`: it answers `top_k` like the graph's
    TopK, over every piece (PAD and BOS included), before anything is banned."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS
    cross_per_sentence = False
    vocab = 40
    config = ModelConfig(
        vocab_size=vocab, d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=2, max_positions=64
    )

    def __init__(self, stutter: float = 3.0, bans_itself: int = 0, ranks: bool = False, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.logits = rng.normal(0.0, 1.5, (self.vocab, self.vocab))  # [last piece, next piece]
        self.stutter, self.bans_itself, self.ranks = stutter, bans_itself, ranks

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross = np.broadcast_to(src_ids[None, :, None, :, None], (2, *src_ids.shape[:1], 2, src_ids.shape[1], 1))
        return cross.astype(np.float32), cross.astype(np.float32)

    def step(
        self, tokens, src_mask, cache: DecoderCache, need_attention, top_k=0, need_self_attention=False
    ) -> StepOutput:
        rows = tokens.shape[0]
        new = np.broadcast_to(tokens[None, :, None, :, None], (2, rows, 2, 1, 1)).astype(np.float32)
        history = np.concatenate([cache.self_k, new], axis=3)  # (L, N, H, P+1, 1): BOS + prefix
        prefixes = history[0, :, 0, 1:, 0].astype(np.int64)  # (N, P)
        sentence = cache.cross_k[0, :, 0, 0, 0].astype(np.int64)  # its first source piece
        last = history[0, :, 0, -1, 0].astype(np.int64)
        # The table's row moves on with the position, so only the bonus makes it go round.
        logits = self.logits[(last + sentence + 7 * prefixes.shape[1]) % self.vocab]
        logits[np.arange(rows), last] += self.stutter
        logits[:, EOS] += prefixes.shape[1] - 6.0
        log_probs = (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).astype(np.float32)
        for row in range(rows) if self.bans_itself else ():
            log_probs[row, sorted(repeats_of(prefixes[row].tolist(), self.bans_itself))] = -np.inf
        top = None
        if top_k and self.ranks:
            ids = np.argsort(-log_probs, axis=1, kind="stable")[:, :top_k]
            top = (np.take_along_axis(log_probs, ids, axis=1), ids)
        weights = np.broadcast_to(src_mask / src_mask.sum(axis=1, keepdims=True), (2, 2, rows, src_mask.shape[1]))
        return StepOutput(
            log_probs,
            DecoderCache(cache.cross_k, cache.cross_v, history, history.copy()),
            weights.transpose(0, 2, 1, 3).astype(np.float32) if need_attention else None,
            top,
        )


SENTENCES = ([5, 6, 7, EOS], [9, 4, EOS], [11, 12, 13, 14, 15, EOS], [20, EOS], [31, 8, 8, EOS])


def search(backend: StutterBackend, config: DecodeConfig) -> list[list]:
    return beam_search(backend, *pad_batch([list(s) for s in SENTENCES], PAD), config)


def assert_same(actual: list[list], expected: list[list]) -> None:
    for mine, theirs in zip(actual, expected, strict=True):
        assert [h.tokens for h in mine] == [h.tokens for h in theirs]
        for a, b in zip(mine, theirs, strict=True):
            assert (a.score, a.log_prob, a.token_log_probs) == (b.score, b.log_prob, b.token_log_probs)
            assert np.array_equal(a.attention, b.attention)


# --------------------------------------------------------------------------- the bans


def test_bans_are_the_pieces_that_followed_the_last_n_minus_1_before() -> None:
    history = np.array([[4, 5, 4, 5, 4], [4, 4, 4, 4, 4], [4, 5, 6, 7, 8], [7, 5, 7, 6, 7]])
    for n, expected in (
        (1, [{4, 5}, {4}, {4, 5, 6, 7, 8}, {5, 6, 7}]),
        (2, [{5}, {4}, set(), {5, 6}]),
        (3, [{5}, {4}, set(), set()]),
        (4, [{5}, {4}, set(), set()]),
        (5, [set(), {4}, set(), set()]),
        (6, [set(), set(), set(), set()]),  # no 6-gram yet
    ):
        rows, tokens = repeated_ngram_bans(history, n)
        found = [set(tokens[rows == row].tolist()) for row in range(len(history))]
        assert found == expected == [repeats_of(h.tolist(), n) for h in history], n
    rows, tokens = repeated_ngram_bans(np.zeros((3, 0), dtype=np.int64), 2)  # the first step
    assert rows.shape == tokens.shape == (0,)


def test_greedy_guard_on_the_scripted_decoder() -> None:
    # Sentence 9 says A (p .6) forever: EOS has .01, B .39.
    # n = 2: A A, then A would repeat (A, A): B; A; then A and B would repeat (A, A), (A, B): EOS.
    # n = 3: A A A, B (A A A), A, A, then A and B would repeat (A, A, A), (A, A, B): EOS.
    src = sources([9, EOS])
    [unguarded] = greedy_search(ScriptedBackend(), *src, plain())
    assert unguarded.tokens == [A] * 14  # only the length limit ends it
    for n, tokens, probabilities in (
        (2, [A, A, B, A], [0.7, 0.6, 0.39, 0.6, 0.01]),
        (3, [A, A, A, B, A, A], [0.7, 0.6, 0.6, 0.39, 0.6, 0.6, 0.01]),
    ):
        [guarded] = greedy_search(ScriptedBackend(), *src, plain(no_repeat_ngram_size=n))
        assert guarded.tokens == tokens
        assert guarded.token_log_probs == [lp(p) for p in probabilities]  # the model's own, not renormalised
        assert guarded.log_prob == sum(lp(p) for p in probabilities)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("beam,ranks", [(1, False), (4, False), (4, True)], ids=["greedy", "beam4", "beam4-topk"])
def test_guarded_search_is_the_search_of_a_model_that_never_repeats(
    monkeypatch: pytest.MonkeyPatch, n: int, beam: int, ranks: bool
) -> None:
    config = DecodeConfig(beam_size=beam, n_best=beam, no_repeat_ngram_size=n)
    off = dataclasses.replace(config, no_repeat_ngram_size=0)
    unguarded = search(StutterBackend(ranks=ranks), off)
    assert sum(has_repeated_ngram(h.tokens, n) for hyps in unguarded for h in hyps) >= 3  # it does stutter

    banned, reranked = [], []
    ban, rerank = repeats.RepeatGuard.ban, candidates.RowBest.reranked

    def checked_ban(self: repeats.RepeatGuard, log_probs: np.ndarray) -> np.ndarray:
        before = np.isneginf(log_probs)
        rows = ban(self, log_probs)
        added = np.isneginf(log_probs) & ~before
        # Exactly the pieces that repeat an n-gram of each row's own prefix, nothing else.
        for row, prefix in enumerate(self.history.tolist()):
            assert set(np.flatnonzero(added[row]).tolist()) == repeats_of(prefix, n) - set(np.flatnonzero(before[row]))
        assert rows.tolist() == sorted({r for r, p in enumerate(self.history.tolist()) if repeats_of(p, n)})
        banned.append(int(added.sum()))
        return rows

    with monkeypatch.context() as patched:
        patched.setattr(repeats.RepeatGuard, "ban", checked_ban)
        patched.setattr(candidates.RowBest, "reranked", lambda *a: reranked.append(1) or rerank(*a))
        guarded = search(StutterBackend(ranks=ranks), config)
    assert sum(banned) > 0
    assert bool(reranked) == ranks  # the graph's TopK saw the banned pieces: those rows were ranked afresh
    assert not any(has_repeated_ngram(h.tokens, n) for hyps in guarded for h in hyps)
    assert_same(guarded, search(StutterBackend(bans_itself=n), off))


def test_guard_changes_nothing_where_nothing_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    # A decoder without the stutter bonus, whose beams never come to repeat a 4-gram: the
    # same hypotheses and scores, and the graph's TopK serves every step it served without
    # the guard (no row is ranked afresh).
    config = DecodeConfig(beam_size=4, n_best=4)
    rank = candidates.Candidates.rank.__func__
    used: dict[int, list[bool]] = {0: [], 4: []}
    results = {}
    for n, calls in used.items():

        def spy(cls: type, *args: object, calls: list[bool] = calls) -> candidates.Candidates:
            calls.append(args[-1] is not None)  # ranked from the TopK
            return rank(cls, *args)

        with monkeypatch.context() as patched:
            patched.setattr(candidates.Candidates, "rank", classmethod(spy))
            results[n] = search(
                StutterBackend(stutter=0.0, ranks=True), dataclasses.replace(config, no_repeat_ngram_size=n)
            )
    assert not any(has_repeated_ngram(h.tokens, 4) for hyps in results[0] for h in hyps)
    assert_same(results[4], results[0])
    assert used[0] == used[4] and sum(used[4]) > 0
    # And the scripted sentences, which end before a trigram could repeat.
    for sentence in ([7, 6, EOS], [8, EOS], [10, EOS]):
        guarded = beam_search(
            ScriptedBackend(), *sources(sentence), plain(beam_size=2, n_best=2, no_repeat_ngram_size=3)
        )
        assert_same(guarded, beam_search(ScriptedBackend(), *sources(sentence), plain(beam_size=2, n_best=2)))


@pytest.mark.parametrize("seed", range(3))
def test_ranking_rows_afresh_after_bans_equals_ranking_all_candidates(seed: int) -> None:
    """A TopK taken before the guard banned some of its pieces, with those rows ranked
    afresh (`RowBest.reranked`), ranks as all K·V candidates do."""
    rng = np.random.default_rng(seed)
    for k, vocab in ((2, 30), (4, 50)):
        sentences = 30
        log_probs = rng.normal(-4.0, 2.0, size=(sentences * k, vocab)).astype(np.float32)
        scores = rng.normal(-3.0, 1.0, size=sentences * k)
        top_ids = np.argsort(-log_probs, axis=1, kind="stable")[:, : 2 * k + 3]
        row_best = candidates.RowBest.of(np.take_along_axis(log_probs, top_ids, 1), top_ids, 2 * k, (0, 2))
        banned = log_probs.copy()
        banned[:, [0, 2]] = -np.inf
        rows = np.flatnonzero(rng.random(sentences * k) < 0.3)
        banned[rows, top_ids[rows, rng.integers(0, 3, size=len(rows))]] = -np.inf  # among each row's best
        ranked = candidates.Candidates.rank(scores, banned, k, eos_id=3, row_best=row_best.reranked(rows, banned))
        sums, beams, tokens = candidates.rank_all(scores, banned, k, np.arange(sentences))
        assert np.array_equal(ranked.scores, sums) and np.array_equal(ranked.tokens, tokens)
        assert np.array_equal(ranked.rows, beams + (np.arange(sentences) * k)[:, None])


def test_config_validation() -> None:
    assert DecodeConfig(no_repeat_ngram_size=0).no_repeat_ngram_size == 0
    assert DecodeConfig(no_repeat_ngram_size=3).no_repeat_ngram_size == 3
    with pytest.raises(ValueError, match="no_repeat_ngram_size must be >= 0"):
        DecodeConfig(no_repeat_ngram_size=-1)


# --------------------------------------------------------------------------- command lines


def test_the_cli_option_reaches_the_search(batch_model_dir: Path, tmp_path: Path) -> None:
    lines = toy_sentences(16, seed=5)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    translator = load_translator(batch_model_dir, "torch")
    outputs = {}
    for n in (0, 2):
        out = tmp_path / f"out.{n}.txt"
        assert translate(batch_model_dir, "-i", source, "-o", out, "--beam-size", "2", "--no-repeat-ngram-size", n) == 0
        outputs[n] = out.read_text(encoding="utf-8").splitlines()
        expected = translator.translate_batch(lines, DecodeConfig(beam_size=2, no_repeat_ngram_size=n))
        assert outputs[n] == [r.text for r in expected]
        assert any(has_repeated_ngram(r.target_ids, 2) for r in expected) == (n == 0)
    assert outputs[0] != outputs[2]
    # eval takes the same flag (the same decoding arguments as translate).
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\tx\n" for s in lines), encoding="utf-8")
    saved = tmp_path / "eval.txt"
    command = ["eval", "--model", str(batch_model_dir), "--backend", "torch", "--test", str(pairs), "--beam-size", "2"]
    assert cli_main([*command, "--no-repeat-ngram-size", "2", "--save-hyp", str(saved), "--json"]) == 0
    assert saved.read_text(encoding="utf-8").splitlines() == outputs[2]


@pytest.mark.parametrize("command", ["translate", "eval"])
def test_the_cli_refuses_a_negative_size(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main([command, "--no-repeat-ngram-size", "-1"])
    assert exit_.value.code == 2
    assert "--no-repeat-ngram-size: must be >= 0 (0 = off), not -1" in capsys.readouterr().err


def test_a_resumed_job_keeps_its_guard_setting(batch_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    command = ["translate", "-m", str(batch_model_dir), "-o", str(out), "--resume"]

    def parse(*more: str) -> argparse.Namespace:
        args = build_parser([*command, *more]).parse_args([*command, *more])
        fill_unset_options(args)
        return args

    off, on = parse("--no-repeat-ngram-size", "0"), parse("--no-repeat-ngram-size", "3")
    job_file(out).write_text(json.dumps(job_options(on)))
    assert check_resume_options(on) == [] and "no_repeat_ngram_size: 3" in check_resume_options(off)[0]
    assert parse().no_repeat_ngram_size == 3  # unset: the job's own
    # Written before the guard: those runs decoded without it, and resume so.
    job_file(out).write_text(json.dumps({k: v for k, v in job_options(off).items() if k != "no_repeat_ngram_size"}))
    assert check_resume_options(off) == [] and len(check_resume_options(on)) == 1
    assert parse().no_repeat_ngram_size == 0 and check_resume_options(parse()) == []
    job_file(out).unlink()
    assert parse().no_repeat_ngram_size == DecodeConfig.no_repeat_ngram_size  # a new job: the default


def test_an_old_interrupted_job_resumes_as_it_ran(batch_model_dir: Path, tmp_path: Path) -> None:
    """End to end: a job started before the guard (its job file has no such field) and
    interrupted, resumed by repeating its command, ends as an uninterrupted run without
    the guard."""
    lines = toy_sentences(16, seed=5)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole = tmp_path / "whole.txt"
    assert translate(batch_model_dir, "-i", source, "-o", whole, "--beam-size", "2", "--no-repeat-ngram-size", 0) == 0
    out = tmp_path / "out.txt"
    command = ["-i", source, "-o", out, "--beam-size", "2", "--resume"]
    out.write_text("".join(whole.read_text(encoding="utf-8").splitlines(keepends=True)[:5]), encoding="utf-8")
    args = build_parser(["translate"]).parse_args(
        ["translate", "-m", str(batch_model_dir), "--backend", "torch", *map(str, command)]
    )
    fill_unset_options(args)
    old = {k: v for k, v in job_options(args).items() if k != "no_repeat_ngram_size"}
    job_file(out).write_text(json.dumps(old))
    assert translate(batch_model_dir, *command) == 0
    assert out.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")
    # A new job gets the default guard, which changes these lines: the resume did not.
    fresh = tmp_path / "fresh.txt"
    assert translate(batch_model_dir, "-i", source, "-o", fresh, "--beam-size", "2") == 0
    assert DecodeConfig.no_repeat_ngram_size == 0 or fresh.read_text() != whole.read_text()


# --------------------------------------------------------------------------- the service


@pytest.fixture(scope="module")
def client(echo_engine: TranslatorEngine) -> TestClient:
    with make_client(echo_engine) as client:
        yield client


def test_the_service_field_reaches_the_search(client: TestClient) -> None:
    # The echo backend copies its source: "a a a a" comes back as it is, unless the guard
    # forbids the piece bigram (a, a) a second time.
    text = "a a a a"
    said = {}
    for n in (0, 2):
        answer = client.post("/v1/translate", json={"text": text, "no_repeat_ngram_size": n})
        assert answer.status_code == 200, answer.text
        said[n] = answer.json()["translations"][0]["text"]
        heatmap = client.get("/v1/heatmap", params={"q": text, "format": "svg", "no_repeat_ngram_size": n})
        assert heatmap.status_code == 200, heatmap.text
        labels = [e.text for e in ET.fromstring(heatmap.content).iter("{http://www.w3.org/2000/svg}text")]
        assert labels.count("a") == (8 if n == 0 else 4 + said[n].split().count("a"))  # source and target axes
    # Guarded: a, a, then not a again but the next best piece (<unk>, shown as nothing), then a.
    assert said == {0: text, 2: "a a a"}


@pytest.mark.parametrize("value", [-1, 11, "3", 2.5])
@pytest.mark.parametrize(
    "method,route",
    [("POST", "/v1/translate"), ("POST", "/v1/attention"), ("GET", "/v1/heatmap"), ("POST", "/v1/heatmap")],
)
def test_the_service_refuses_bad_sizes(client: TestClient, method: str, route: str, value: object) -> None:
    if method == "GET":
        if isinstance(value, str):
            return  # a query is text: "3" is 3
        response = client.get(route, params={"q": "a", "no_repeat_ngram_size": value})
    else:
        response = client.post(
            route, json={"text" if "heatmap" not in route else "q": "a", "no_repeat_ngram_size": value}
        )
    assert response.status_code == 400, response.text
    assert "no_repeat_ngram_size" in response.json()["error"]


def test_the_api_document_states_the_range(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("TranslateRequest", "HeatmapRequest", "AttentionRequest"):
        field = schemas[name]["properties"]["no_repeat_ngram_size"]
        (integer,) = [option for option in field["anyOf"] if option["type"] == "integer"]
        assert (integer["minimum"], integer["maximum"]) == (0, 10)
        # Left out, it is the served model's own (its bundle's), not a fixed number.
        assert field.get("default") is None and "the served model's own" in field["description"]
