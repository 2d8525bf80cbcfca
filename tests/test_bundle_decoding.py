"""A bundle's serving decoding (bundle.json `decoding`): every consumer that is not told
otherwise searches with it, and an explicit flag or request field still wins.

The tiny exported toy model (conftest's `tiny_bundle`) is copied and its bundle.json given
the decoding of a release that chose α 0.6 with neither coverage penalty nor repetition
guard (and beam 3, so that the beam is seen to come from it too). The real search runs
everywhere; `searches` records the DecodeConfig each call of it receives.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from toy import LEXICON, SENTENCES

import seq2seq.decoding.translator
from data.files import BUNDLE_FILE
from seq2seq.cli import build_parser
from seq2seq.cli import main as cli_main
from seq2seq.cli.translate import check_resume_options, fill_unset_options, job_file, job_options
from seq2seq.core.config import DecodeConfig
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import BundleError, load_bundle_manifest, parse_decoding, set_decoding
from service.app import create_app
from service.settings import Settings

CHOSEN = {
    "beam_size": 3,
    "length_penalty": 0.6,
    "coverage_penalty": 0.0,
    "no_repeat_ngram_size": 0,
    "dictionary_hints": True,  # the tiny bundle has no hint pieces: recorded and carried, not applied
    "hint_max_count": 5,
    "term_bonus": 1.5,
}
# What flags and request fields ask for instead: none of it is CHOSEN's or DecodeConfig's.
ASKED = {
    "beam_size": 2,
    "length_penalty": 1.5,
    "coverage_penalty": 0.3,
    "no_repeat_ngram_size": 3,
    "dictionary_hints": False,
    "hint_max_count": 1,
    "term_bonus": 3.0,
}


def flags(settings: dict) -> list[str]:
    """The command-line flags that ask for `settings` (a switch as --name / --no-name)."""
    return [
        (f"--{name.replace('_', '-')}" if value else f"--no-{name.replace('_', '-')}")
        if isinstance(value, bool)
        else f"--{name.replace('_', '-')}={value}"
        for name, value in settings.items()
    ]


FLAGS = flags(ASKED)


def with_decoding(tiny_bundle: Path, root: Path, decoding: object) -> Path:
    """A copy of the tiny bundle as `root/models/de-en` whose `decoding` is `decoding` (None: no
    section, a bundle from before it). bundle.json is not hashed, so the copy stays valid."""
    bundle = root / "models" / "de-en"
    shutil.copytree(tiny_bundle, bundle)
    manifest = json.loads((bundle / BUNDLE_FILE).read_text())
    manifest.pop("decoding", None)
    if decoding is not None:
        manifest["decoding"] = decoding
    (bundle / BUNDLE_FILE).write_text(json.dumps(manifest, indent=2))
    return bundle


@pytest.fixture
def chosen(tiny_bundle: Path, tmp_path: Path) -> Path:
    return with_decoding(tiny_bundle, tmp_path, CHOSEN)


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[DecodeConfig]:
    """The DecodeConfig of every search the Translator runs in this process (the search itself runs)."""
    seen: list[DecodeConfig] = []
    search = seq2seq.decoding.translator.beam_search

    def recording(backend: Any, src_ids: Any, src_mask: Any, config: DecodeConfig, *rest: Any) -> Any:
        seen.append(config)
        return search(backend, src_ids, src_mask, config, *rest)

    monkeypatch.setattr(seq2seq.decoding.translator, "beam_search", recording)
    return seen


def settings_of(configs: list[DecodeConfig]) -> list[dict]:
    """The distinct search settings of `configs` (one, when every search got the same)."""
    return [dict(s) for s in {tuple(c.search_settings.items()) for c in configs}]


# --------------------------------------------------------------------------- the section


def test_the_section_is_read_over_decodeconfigs_defaults() -> None:
    assert parse_decoding(None) == DecodeConfig()  # a bundle from before the section
    assert parse_decoding(CHOSEN).search_settings == CHOSEN
    # A newer exporter's keys are ignored; a setting left out keeps DecodeConfig's; 4.0 is 4.
    newer = parse_decoding({"length_penalty": 0.6, "beam_size": 4.0, "temperature": 0.7})
    assert newer == DecodeConfig(length_penalty=0.6) and isinstance(newer.beam_size, int)


@pytest.mark.parametrize(
    "section, message",
    [
        ({"beam_size": 0}, "decoding.beam_size must be an integer >= 1, not 0"),
        ({"beam_size": 2.5}, "decoding.beam_size must be an integer >= 1, not 2.5"),
        ({"length_penalty": "0.6"}, 'decoding.length_penalty must be a number >= 0, not "0.6"'),
        ({"coverage_penalty": -0.2}, "decoding.coverage_penalty must be a number >= 0, not -0.2"),
        ({"no_repeat_ngram_size": True}, "decoding.no_repeat_ngram_size must be an integer >= 0, not true"),
        ({"term_bonus": 11}, "decoding.term_bonus must be at most 10.0, not 11"),
        ([4, 1.0], "decoding must be an object of search settings, not [4, 1.0]"),
    ],
)
def test_a_bad_section_is_a_clear_error_everywhere(
    tiny_bundle: Path, tmp_path: Path, section: object, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    bundle = with_decoding(tiny_bundle, tmp_path, section)
    with pytest.raises(BundleError, match="damaged bundle") as error:
        load_bundle_manifest(bundle)
    assert message in str(error.value)
    with pytest.raises(BundleError, match="bundle.json: decoding"):
        load_translator(bundle, "torch")  # the torch backend reads the same section
    source = tmp_path / "in.txt"
    source.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    with caplog.at_level(logging.ERROR):
        assert cli_main(["translate", "-m", str(bundle), "-i", str(source)]) == 1
    assert message in caplog.text
    # The service names it in one line and serves nothing else here: it does not start.
    app = create_app(Settings(models=bundle.parent, threads=1))
    named = "no model bundle could be loaded: de-en: .*" + message[:20]
    with pytest.raises(RuntimeError, match=named), TestClient(app):
        pass


def test_the_export_and_the_release_write_the_section(tiny_bundle: Path, chosen: Path, tmp_path: Path) -> None:
    from export.exporter import export_model
    from export.model_card import decoding_line

    # An export records DecodeConfig's; a re-export keeps the bundle's, as it keeps its quality.json.
    assert json.loads((tiny_bundle / BUNDLE_FILE).read_text())["decoding"] == DecodeConfig().search_settings
    again = tmp_path / "again"
    export_model(chosen, again, parity_sentences=SENTENCES[:1])
    assert load_bundle_manifest(again).decode_defaults.search_settings == CHOSEN
    # release.sh records what it chose on valid; the card says so.
    released = DecodeConfig(length_penalty=1.5, coverage_penalty=0.3, no_repeat_ngram_size=3)
    assert set_decoding(again, released) == released.search_settings
    assert load_bundle_manifest(again).decode_defaults == released
    line = decoding_line({"decoding": released.search_settings})
    assert "length penalty 1.5" in line and "coverage penalty 0.3" in line and "no repeated 3-gram" in line
    assert "bundle.json `decoding`" in line
    # A release from before the section recorded beam and alpha only.
    assert "coverage" not in decoding_line({"decoding": {"beam_size": 4, "length_penalty": 1.0}})


def test_the_shipped_bundle_records_what_it_serves() -> None:
    shipped = Path(__file__).resolve().parents[1] / "models" / "de-en"
    if not (shipped / BUNDLE_FILE).is_file():
        pytest.skip("models/de-en is not shipped")
    manifest = json.loads((shipped / BUNDLE_FILE).read_text())
    decoding = parse_decoding(manifest["decoding"])
    # Its figures: beam 4, alpha as metrics.decoding says, beta 0.2; the guard chosen on valid since.
    assert decoding.beam_size == manifest["metrics"]["decoding"]["beam_size"] == 4
    assert decoding.length_penalty == manifest["metrics"]["decoding"]["length_penalty"]
    assert (decoding.coverage_penalty, decoding.no_repeat_ngram_size) == (0.2, 4)


# --------------------------------------------------------------------------- the library and the CLIs


def test_the_translator_holds_the_bundles_defaults_on_either_backend(
    chosen: Path, tiny_bundle: Path, tmp_path: Path, searches: list[DecodeConfig]
) -> None:
    for backend in ("onnx", "torch"):
        translator = load_translator(chosen, backend)
        assert translator.decode_defaults.search_settings == CHOSEN
        translator.translate_batch(SENTENCES[:2])  # no config: the bundle's
        assert settings_of(searches) == [CHOSEN]
        searches.clear()
    old = with_decoding(tiny_bundle, tmp_path / "old", None)
    assert load_translator(old).decode_defaults == DecodeConfig()


def test_translate_decodes_with_the_bundles_settings_unless_flags_say_otherwise(
    chosen: Path, tmp_path: Path, searches: list[DecodeConfig], caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        assert cli_main(["translate", "-m", str(chosen), "-i", str(source), "-o", str(tmp_path / "a.txt")]) == 0
    assert settings_of(searches) == [CHOSEN]
    assert "decoding: beam_size=3 length_penalty=0.6 coverage_penalty=0.0 no_repeat_ngram_size=0" in caplog.text
    searches.clear()
    assert cli_main(["translate", "-m", str(chosen), "-i", str(source), "-o", str(tmp_path / "b.txt"), *FLAGS]) == 0
    assert settings_of(searches) == [ASKED]
    searches.clear()
    # One flag overrides its setting only; the others stay the bundle's.
    command = ["translate", "-m", str(chosen), "-i", str(source), "-o", str(tmp_path / "c.txt"), "--beam-size", "1"]
    assert cli_main(command) == 0
    assert settings_of(searches) == [CHOSEN | {"beam_size": 1}]


def test_translate_help_says_where_the_defaults_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["translate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "GNMT alpha (default: the bundle's, else 1.0)" in help_text
    assert "0 = off (default: the bundle's, else 4)" in help_text


def test_an_old_bundle_decodes_with_decodeconfigs_defaults(
    tiny_bundle: Path, tmp_path: Path, searches: list[DecodeConfig]
) -> None:
    old = with_decoding(tiny_bundle, tmp_path, None)
    source = tmp_path / "in.txt"
    source.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    assert cli_main(["translate", "-m", str(old), "-i", str(source), "-o", str(tmp_path / "out.txt")]) == 0
    assert settings_of(searches) == [DecodeConfig().search_settings]


def test_eval_measures_the_bundles_settings_and_says_so(
    chosen: Path, tmp_path: Path, searches: list[DecodeConfig], capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{' '.join(LEXICON.get(w, w) for w in s.split())}\n" for s in SENTENCES))
    command = ["eval", "--model", str(chosen), "--test", str(pairs), "--json"]
    assert cli_main(command) == 0
    assert settings_of(searches) == [CHOSEN]
    assert json.loads(capsys.readouterr().out)["decoding"] == CHOSEN  # what the figures were measured with
    searches.clear()
    assert cli_main([*command, *FLAGS]) == 0
    assert settings_of(searches) == [ASKED] and json.loads(capsys.readouterr().out)["decoding"] == ASKED


def test_a_resumed_job_keeps_the_decoding_it_ran_with(
    chosen: Path, tmp_path: Path, searches: list[DecodeConfig]
) -> None:
    """A job that ran with other settings than the bundle's (started with flags, or by a
    version that ignored the section) and was interrupted goes on with them when its command
    is repeated without flags; a new job gets the bundle's."""
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    whole, out = tmp_path / "whole.txt", tmp_path / "out.txt"
    one = ["--batch-size", "1"]  # a resumed run then computes exactly what the first run did
    assert cli_main(["translate", "-m", str(chosen), "-i", str(source), "-o", str(whole), *one, *FLAGS]) == 0
    searches.clear()

    def parse(*more: str) -> argparse.Namespace:
        argv = ["translate", "-m", str(chosen), "-i", str(source), "-o", str(out), "--resume", *more]
        args = build_parser(argv).parse_args(argv)
        fill_unset_options(args)
        return args

    job_file(out).write_text(json.dumps(job_options(parse(*FLAGS))))
    assert {name: getattr(parse(), name) for name in ASKED} == ASKED and check_resume_options(parse()) == []
    # Asking for the bundle's settings now would change the job: refused, naming them.
    assert len(check_resume_options(parse(*flags(CHOSEN)))) == len(CHOSEN)
    out.write_text("".join(whole.read_text(encoding="utf-8").splitlines(keepends=True)[:2]), encoding="utf-8")
    assert cli_main(["translate", "-m", str(chosen), "-i", str(source), "-o", str(out), "--resume", *one]) == 0
    assert settings_of(searches) == [ASKED] and out.read_text() == whole.read_text()
    assert {name: getattr(parse(), name) for name in CHOSEN} == CHOSEN  # finished: a new job gets the bundle's


# --------------------------------------------------------------------------- the service


@pytest.fixture
def client(chosen: Path) -> TestClient:
    with TestClient(create_app(Settings(models=chosen.parent, threads=1)), raise_server_exceptions=False) as client:
        yield client


def test_the_service_decodes_with_the_bundles_settings_and_shows_them(
    client: TestClient, searches: list[DecodeConfig]
) -> None:
    text = SENTENCES[0]
    assert client.get("/health").json()["models"][0]["decoding"] == CHOSEN
    requests = [
        ("POST", "/v1/translate", {"json": {"text": text}}),
        ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en"}}),
        ("GET", "/v1/heatmap", {"params": {"q": text, "format": "svg"}}),
        ("POST", "/v1/attention", {"json": {"text": text}}),
        ("GET", "/v1/attention", {"params": {"q": text}}),
    ]
    for method, route, request in requests:
        assert client.request(method, route, **request).status_code == 200, route
        assert settings_of(searches) == [CHOSEN], route
        searches.clear()
    # LibreTranslate's alternatives widen the bundle's beam (to alternatives + 1) and nothing else.
    answer = client.post("/translate", json={"q": text, "source": "de", "target": "en", "alternatives": 3})
    assert answer.status_code == 200 and settings_of(searches) == [CHOSEN | {"beam_size": 4}]


def test_request_fields_override_the_bundles_settings(client: TestClient, searches: list[DecodeConfig]) -> None:
    fields = {"beam_size": 2, "no_repeat_ngram_size": 3}  # the search settings a request may set
    text = SENTENCES[0]
    for method, route, request in [
        ("POST", "/v1/translate", {"json": {"text": text, **fields}}),
        ("POST", "/v1/heatmap", {"json": {"q": text, "format": "svg", **fields}}),
        ("GET", "/v1/attention", {"params": {"q": text, **fields}}),
    ]:
        assert client.request(method, route, **request).status_code == 200, route
        assert settings_of(searches) == [CHOSEN | fields], route
        searches.clear()
    # null is left out: the bundle's.
    assert client.post("/v1/translate", json={"text": text, "beam_size": None}).status_code == 200
    assert settings_of(searches) == [CHOSEN]


def test_a_default_beam_over_the_servers_limit_asks_for_a_beam(chosen: Path) -> None:
    with TestClient(create_app(Settings(models=chosen.parent, threads=1, max_beam_size=2))) as client:
        refused = client.post("/v1/translate", json={"text": SENTENCES[0]})
        assert refused.status_code == 400
        assert "the model's default beam_size (3) is over this server's limit (2)" in refused.json()["error"]
        assert client.post("/v1/translate", json={"text": SENTENCES[0], "beam_size": 2}).status_code == 200
