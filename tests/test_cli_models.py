"""Which model `crossalign translate` runs: found wherever it runs, picked by language, its
own decoding in the log, and the reverse model a reranking reads.

The models directory is found by one rule for the CLI and the service (--models, then
CROSSALIGN_MODELS, ./models with a bundle, the shipped models); --source/--target pick a
direction among two exports of the tiny model (`two_models`), `auto` by the input's
language; `--rerank channel` on the tiny bundle, used as both directions, chooses what the
library's channel reranking of the n-best chooses.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import pytest
from toy import SENTENCES

from seq2seq.cli import build_parser
from seq2seq.cli import main as cli_main
from seq2seq.cli.translate import (
    check_resume_options,
    fill_unset_options,
    job_file,
    job_options,
)
from seq2seq.core.config import RerankOptions
from seq2seq.decoding.rerank import channel_scores, rerank_order
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import set_decoding, write_ensemble
from seq2seq.runtime.models import MODELS_ENV, SHIPPED_MODELS, default_models_dir

ENGLISH = "the dog is small ."


def logged_model(caplog: pytest.LogCaptureFixture) -> str:
    """The model directory's name the last run logged as chosen."""
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("model: ")]
    assert lines, caplog.text
    return Path(lines[-1].split()[1]).name


def logged_decoding(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().removeprefix("decoding: ") for r in caplog.records if r.getMessage().startswith("decoding:")]


# --------------------------------------------------------------------------- where the models are


def test_the_models_directory_is_found_by_one_rule_wherever_a_command_runs(
    tiny_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.settings import Settings

    monkeypatch.delenv(MODELS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert SHIPPED_MODELS.is_dir()
    assert default_models_dir() == SHIPPED_MODELS  # nothing here: the models beside the package
    assert Settings().models == SHIPPED_MODELS  # the service follows the same rule
    (tmp_path / "models").mkdir()
    assert default_models_dir() == SHIPPED_MODELS  # ./models without a bundle is not a models directory
    shutil.copytree(tiny_bundle, tmp_path / "models" / "de-en")
    assert default_models_dir() == Path("models")  # a bundle here: this one
    monkeypatch.setenv(MODELS_ENV, str(tmp_path / "elsewhere"))
    assert default_models_dir() == tmp_path / "elsewhere"  # the service's setting, named
    assert Settings().models == tmp_path / "elsewhere"


def test_translate_runs_the_shipped_model_from_any_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv(MODELS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no models/ here: the shipped ones are found all the same
    caplog.set_level(logging.INFO)
    assert cli_main(["translate", "Das Haus ist klein."]) == 0
    assert capsys.readouterr().out.strip()
    assert logged_model(caplog) == "de-en"
    shipped = load_translator(SHIPPED_MODELS / "de-en").decode_defaults
    # The bundle's own, not DecodeConfig's, and the batch default's reranking: the shipped
    # models hold the reverse direction, so the channel reads the beam's own candidates.
    reranked = f" rerank=channel rerank_candidates={shipped.beam_size} channel_weight={RerankOptions.channel_weight}"
    assert logged_decoding(caplog) == [shipped.settings_text() + reranked]


@pytest.mark.parametrize(
    ("flags", "chosen"),
    [
        ((), "de-en"),
        (("--source", "en"), "en-de"),
        (("--target", "de"), "en-de"),
        (("--source", "de", "--target", "en"), "de-en"),
        (("--source", "auto"), "en-de"),  # the input is English
        (("--source", "auto", "--target", "de"), "en-de"),
    ],
)
def test_source_and_target_pick_the_direction(
    two_models: Path,
    tmp_path: Path,
    flags: tuple[str, ...],
    chosen: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    assert cli_main(["translate", "--models", str(two_models), *flags, ENGLISH]) == 0
    assert logged_model(caplog) == chosen
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_the_models_directory_may_come_from_the_environment(
    two_models: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(MODELS_ENV, str(two_models))
    caplog.set_level(logging.INFO)
    assert cli_main(["translate", "--source", "en", ENGLISH]) == 0
    assert logged_model(caplog) == "en-de"


@pytest.mark.parametrize(
    ("flags", "text", "said"),
    [
        (("--source", "fr"), "Bonjour", "no model translates fr -> any in"),
        (("--source", "de", "--target", "fr"), "Hallo", "no model translates de -> fr in"),
        (("--source", "auto"), "Le chat est sur la table et il dort.", "the text looks like French"),
    ],
)
def test_a_direction_that_is_not_there_is_one_line_naming_the_flags(
    two_models: Path, flags: tuple[str, ...], text: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["translate", "--models", str(two_models), *flags, text]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert said in captured.err and "--source" in captured.err


# --------------------------------------------------------------------------- the decoding logged


def test_the_decoding_logged_is_the_loaded_models_own(
    tiny_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bundle with its own decoding, an ensemble with its own and one without (its reporting
    member's): each run logs what its Translator's `decode_defaults` are; a missing model
    logs no decoding at all."""
    tuned = shutil.copytree(tiny_bundle, tmp_path / "tuned")
    set_decoding(tuned, dataclasses.replace(load_translator(tuned).decode_defaults, beam_size=3, length_penalty=0.6))
    own = write_ensemble(tmp_path / "own", [tiny_bundle, tuned], decoding={"beam_size": 2, "coverage_penalty": 0.0})
    members = write_ensemble(tmp_path / "members", [tuned, tiny_bundle], alignment=0)
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO)
    for model, beam in ((tuned, 3), (own, 2), (members, 3)):
        caplog.clear()
        assert cli_main(["translate", "-m", str(model), SENTENCES[0]]) == 0
        assert logged_decoding(caplog) == [load_translator(model).decode_defaults.settings_text()], model
        assert logged_decoding(caplog)[0].startswith(f"beam_size={beam} "), model
    caplog.clear()
    assert cli_main(["translate", "-m", str(tmp_path / "nowhere"), SENTENCES[0]]) == 2
    assert logged_decoding(caplog) == []


# --------------------------------------------------------------------------- reranking


def reranked_best(model: Path, sources: list[str], options: RerankOptions) -> list[str]:
    """What the library's channel reranking picks, computed here step by step: the search's
    n-best of `options.candidates`, each scored by the channel (`model` read back), reordered."""
    translator = load_translator(model)
    config = dataclasses.replace(
        translator.decode_defaults, beam_size=options.candidates, n_best=options.candidates, return_attention=False
    )
    best = []
    for source in sources:
        found = translator.translate_batch([source], config)[0]
        texts = [found.text] + [alternative.text for alternative in found.alternatives]
        scores = [found.score] + [alternative.score for alternative in found.alternatives]
        channel = channel_scores(translator.backend, translator.tokenizer, source, texts)
        best.append(texts[int(rerank_order(texts, scores, options, channel)[0])])
    return best


def test_rerank_channel_chooses_the_channel_reranked_n_bests_best(
    tiny_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = list(SENTENCES)
    options = RerankOptions("channel", candidates=8, channel_weight=5.0)
    rerank = ["--rerank", "channel", "--channel-model", str(tiny_bundle), "--channel-weight", "5"]
    assert cli_main(["translate", "-m", str(tiny_bundle), *rerank, *sources]) == 0
    chosen = capsys.readouterr().out.splitlines()
    assert chosen == reranked_best(tiny_bundle, sources, options)
    assert cli_main(["translate", "-m", str(tiny_bundle), *sources]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert chosen != plain  # the channel changed some choice: the flags reached the search

    # `crossalign eval` reranks the same way, and says so beside its scores.
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{source}\t{source}\n" for source in sources), encoding="utf-8")
    saved = tmp_path / "hyp.txt"
    command = ["eval", "--model", str(tiny_bundle), "--test", str(test), "--save-hyp", str(saved), "--json"]
    assert cli_main([*command, *rerank]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert saved.read_text(encoding="utf-8").splitlines() == chosen
    assert scores["decoding"]["rerank"]["mode"] == "channel" and scores["decoding"]["rerank"]["channel_weight"] == 5.0


@pytest.mark.parametrize("command", ["translate", "eval"])
def test_a_channel_rerank_without_a_reverse_model_is_one_line_naming_channel_model(
    tiny_bundle: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    test = tmp_path / "test.tsv"
    test.write_text(f"{SENTENCES[0]}\t{ENGLISH}\n", encoding="utf-8")
    given = ["-m", str(tiny_bundle), SENTENCES[0]] if command == "translate" else ["--model", str(tiny_bundle)]
    given += ["--test", str(test)] if command == "eval" else []
    # tiny_bundle's models directory holds de-en alone: no en-de to read back with.
    assert cli_main([command, *given, "--rerank", "mbr+channel"]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and captured.out == ""
    assert "--channel-model DIR" in captured.err and "(en->de)" in captured.err


def test_the_job_file_records_the_reranking_and_a_resume_checks_it(tiny_bundle: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.txt"

    def parsed(*flags: str):
        argv = ["translate", "-m", str(tiny_bundle), "-o", str(output), "--resume", *flags]
        args = build_parser(argv).parse_args(argv)
        fill_unset_options(args)
        return args

    first = parsed("--rerank", "channel", "--channel-model", str(tiny_bundle))
    recorded = job_options(first)["rerank"]
    assert recorded == {
        "mode": "channel",
        "candidates": RerankOptions.candidates,
        "channel_weight": RerankOptions.channel_weight,
        "channel_model": str(tiny_bundle.resolve()),
    }
    assert RerankOptions.channel_weight == 2.0  # chosen on valid by bench/rerank.py
    output.write_text("")
    job_file(output).write_text(json.dumps(job_options(first)))
    assert check_resume_options(first) == []
    differences = check_resume_options(
        parsed("--rerank", "channel", "--channel-model", str(tiny_bundle), "--channel-weight", "3")
    )
    assert len(differences) == 1 and differences[0].startswith("rerank:")
    assert check_resume_options(parsed("--rerank", "none"))[0].startswith("rerank: {'mode': 'channel'")
    # Left at its default (auto), a resumed job goes on reranking as its first run did, though
    # the tiny bundle's folder holds no reverse model a fresh run would find.
    assert check_resume_options(parsed()) == []
    job_file(output).write_text(json.dumps(job_options(parsed("--rerank", "none"))))
    assert parsed().rerank == "none"  # and one that did not rerank goes on without


def test_translate_reranks_by_default_where_the_reverse_model_is_there(
    two_models: Path, tiny_bundle: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """`--rerank auto`: the channel over the beam's own candidates (no wider search) when the
    other direction's bundle is beside the model; none without one, or with a beam of one."""
    sources = list(SENTENCES)
    model = two_models / "de-en"  # en-de beside it is the same weights, so it reads back as the test does
    beam = load_translator(model).decode_defaults.beam_size
    caplog.set_level(logging.INFO)
    given = ["translate", "--models", str(two_models), "--source", "de", "--channel-weight", "5"]
    assert cli_main([*given, *sources]) == 0
    chosen = capsys.readouterr().out.splitlines()
    assert logged_decoding(caplog)[-1].endswith(f" rerank=channel rerank_candidates={beam} channel_weight=5.0")
    assert chosen == reranked_best(model, sources, RerankOptions("channel", candidates=beam, channel_weight=5.0))
    assert cli_main([*given, "--rerank", "none", *sources]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert plain == [load_translator(model).translate(source).text for source in sources]
    assert chosen != plain  # the default reranked some choice
    assert "rerank=" not in logged_decoding(caplog)[-1]

    for alone in (["-m", str(tiny_bundle)], [*given[1:], "--beam-size", "1"]):
        caplog.clear()
        assert cli_main(["translate", *alone, *sources]) == 0
        assert capsys.readouterr().out.splitlines()
        assert "rerank=" not in logged_decoding(caplog)[-1], alone


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--rerank-candidates", "1", "rerank candidates must be 2 to 32, not 1"),
        ("--rerank-candidates", "33", "rerank candidates must be 2 to 32, not 33"),
        ("--rerank-candidates", "x", "invalid int value: 'x'"),
        ("--channel-weight", "-0.5", "the channel weight must be >= 0, not -0.5"),
    ],
)
def test_rerank_values_are_refused_when_parsing_by_rerankoptions_own_rule(
    flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser(["translate"]).parse_args(["translate", flag, value, "Hallo"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert len(error.splitlines()) == 1 and f"argument {flag}: {said}" in error
    for bound in ("2", "32"):  # the limits themselves are taken
        assert build_parser(["translate"]).parse_args(
            ["translate", "--rerank-candidates", bound]
        ).rerank_candidates == int(bound)
