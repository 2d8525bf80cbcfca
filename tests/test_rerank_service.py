"""Reranking through the API: `rerank` (with `rerank_candidates`, `channel_weight`,
`rerank_temperature`) on /v1/translate, LibreTranslate's /translate and the explorer's routes,
against a real server (`python -m service.serve`, real onnxruntime).

On the shipped pair (models/de-en and models/en-de) a channel-reranked request must return
the channel's choice, computed here from the library alone: the search's 8-best and the
reverse model's log P(source | candidate) (seq2seq.decoding.rerank.channel_scores). On the toy
bundle, served in both directions and alone: bad values are 400s naming the field, a channel
without the reverse direction is a 400 naming it, and a reranked request's work (its
candidates, and the channel's pass once more) is pinned at `max_request_work` N and N + 1.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_service_server import free_port, start_server  # noqa: E402

from data.files import BUNDLE_FILE  # noqa: E402
from seq2seq.core.config import RerankOptions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models"
# Everyday German of the gold set (data/gold/de-en.gold.tsv): the first sentences, as written.
GOLD = [line.split("\t")[0] for line in (REPO / "data/gold/de-en.gold.tsv").read_text("utf-8").splitlines()[:12]]


def reversed_bundle(bundle: Path, out: Path) -> Path:
    """A copy of `bundle` served as the reverse direction (its bundle.json's `languages`
    swapped): the toy model as a stand-in en-de, so a server holds both directions."""
    shutil.copytree(bundle, out)
    manifest = json.loads((out / BUNDLE_FILE).read_text())
    languages = manifest["languages"]
    manifest["languages"] = {"source": languages["target"], "target": languages["source"]}
    (out / BUNDLE_FILE).write_text(json.dumps(manifest, indent=2))
    return out


@contextlib.contextmanager
def serving(models: Path, **settings: str) -> Iterator[str]:
    port = free_port()
    process = start_server(models, port, **settings)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=15)


def post(url: str, route: str, body: dict, data: bool = False) -> httpx.Response:
    if data:  # a LibreTranslate form
        return httpx.post(url + route, data=body, timeout=120)
    return httpx.post(url + route, json=body, timeout=120)


# --------------------------------------------------------------------------- the shipped pair


@pytest.fixture(scope="module")
def shipped() -> Iterator[str]:
    if not all((SHIPPED / pair / BUNDLE_FILE).is_file() for pair in ("de-en", "en-de")):
        pytest.fail("the shipped bundles models/de-en and models/en-de are part of the checkout")
    with serving(SHIPPED) as url:
        yield url


@pytest.fixture(scope="module")
def library():
    from seq2seq.loading import load_translator

    forward = load_translator(SHIPPED / "de-en", threads=1)
    forward.channel = load_translator(SHIPPED / "en-de", threads=1)
    return forward


def channels_choice(translator, sentence: str, options: RerankOptions) -> tuple[str, str]:
    """(the search's best of its candidates, the channel's choice among them), from the
    library's pieces alone: the n-best of a beam of the candidates, each scored by the search
    plus λ · the reverse model's log P(source | candidate) per piece."""
    from seq2seq.decoding.rerank import channel_scores

    wide = max(translator.decode_defaults.beam_size, options.candidates)
    config = replace(translator.decode_defaults, beam_size=wide, n_best=options.candidates)
    result = translator.translate_batch([sentence], config)[0]
    candidates = [result, *result.alternatives]
    texts = [c.text for c in candidates]
    channel = channel_scores(translator.channel.backend, translator.channel.tokenizer, sentence, texts)
    key = np.array([c.score for c in candidates]) + options.channel_weight * channel
    return texts[0], texts[int(np.argmax(key))]


@pytest.mark.parametrize("weight", [None, 1.5])
def test_a_channel_reranked_request_returns_the_channels_choice(shipped: str, library, weight: float | None) -> None:
    options = RerankOptions("channel") if weight is None else RerankOptions("channel", channel_weight=weight)
    asked = {"rerank": "channel"} | ({} if weight is None else {"channel_weight": weight})
    moved = 0
    for sentence in GOLD:
        answer = post(shipped, "/v1/translate", {"text": sentence, "source": "de", "target": "en", **asked})
        assert answer.status_code == 200, answer.text
        text = answer.json()["translations"][0]["text"]
        best, chosen = channels_choice(library, sentence, options)
        assert text == chosen, sentence
        moved += chosen != best
        # The LibreTranslate route, as an extension field, chooses the same.
        libre = post(shipped, "/translate", {"q": sentence, "source": "de", "target": "en", **asked})
        assert libre.json()["translatedText"] == text
    assert moved, "the channel never changed the search's choice: nothing was tested"


def test_the_explorer_maps_the_reranked_translation(shipped: str) -> None:
    sentence = GOLD[0]
    reranked = post(shipped, "/v1/translate", {"text": sentence, "source": "de", "rerank": "channel"}).json()
    maps = post(shipped, "/v1/attention", {"text": sentence, "source": "de", "target": "en", "rerank": "channel"})
    assert maps.json()["translation"] == reranked["translations"][0]["text"]
    query = {"q": sentence, "source": "de", "target": "en", "rerank": "channel"}
    assert httpx.get(shipped + "/v1/attention", params=query, timeout=60).json() == maps.json()


# --------------------------------------------------------------------------- the toy bundle


@pytest.fixture(scope="module")
def both_directions(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = tmp_path_factory.mktemp("rerank_models")
    shutil.copytree(tiny_bundle, models / "de-en")
    reversed_bundle(tiny_bundle, models / "en-de")
    return models


@pytest.fixture(scope="module")
def toy(both_directions: Path) -> Iterator[str]:
    with serving(both_directions) as url:
        yield url


TEXT = {"text": "der Hund ist klein .", "source": "de", "target": "en"}
FORM = {"q": "der Hund ist klein .", "source": "de", "target": "en"}


@pytest.mark.parametrize(
    "fields,named",
    [
        ({"rerank": "bogus"}, "rerank"),
        ({"rerank": "channel", "rerank_candidates": 1}, "rerank_candidates"),
        ({"rerank": "channel", "rerank_candidates": 9}, "rerank_candidates"),  # max_beam_size 8, + 1
        ({"rerank": "channel", "rerank_candidates": "8"}, "rerank_candidates"),  # JSON: a number
        ({"rerank": "channel", "channel_weight": -0.5}, "channel_weight"),
        ({"rerank": "channel", "channel_weight": 10.5}, "channel_weight"),  # MAX_CHANNEL_WEIGHT 10
        ({"rerank": "mbr", "rerank_temperature": 0}, "rerank_temperature"),
        ({"rerank": "mbr", "rerank_temperature": 100.5}, "rerank_temperature"),  # MAX_RERANK_TEMPERATURE 100
        ({"rerank": "mbr", "rerank_candidates": 8.5}, "rerank_candidates"),
    ],
)
def test_bad_rerank_values_are_400s_naming_the_field(toy: str, fields: dict, named: str) -> None:
    answer = post(toy, "/v1/translate", TEXT | fields)
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["error"]
    assert post(toy, "/v1/translate", TEXT).status_code == 200  # the server goes on


@pytest.mark.parametrize(
    "fields",
    [
        {"rerank": "channel", "rerank_candidates": 8},
        {"rerank": "channel", "rerank_candidates": 2},
        {"rerank": "channel", "channel_weight": 10},
        {"rerank": "mbr+channel", "channel_weight": 0, "rerank_temperature": 100},
        {"rerank": "mbr", "rerank_temperature": 0.01, "n_best": 3},
        {"rerank": "channel", "rerank_candidates": 2, "n_best": 3},  # the candidates raised to n_best
        {"rerank": "none"},
    ],
)
def test_the_edges_of_the_rerank_fields_are_taken(toy: str, fields: dict) -> None:
    answer = post(toy, "/v1/translate", TEXT | fields)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["translations"][0]["sentences"][0]["alternatives"]) == fields.get("n_best", 1) - 1


@pytest.mark.parametrize(
    "fields,same_as",
    [
        ({"channel_weight": 3.0, "rerank_candidates": 3}, {}),  # no mode: nothing is reranked
        ({"rerank": "none", "rerank_temperature": 50}, {}),
        ({"rerank": "mbr", "channel_weight": 3.0}, {"rerank": "mbr"}),  # mbr reads no λ
        ({"rerank": "channel", "rerank_temperature": 50}, {"rerank": "channel"}),  # the channel no temperature
    ],
)
def test_a_field_the_mode_does_not_read_is_left_unread(toy: str, fields: dict, same_as: dict) -> None:
    """As a form's or a query's unknown fields are: no schema can say which field needs which
    (and /v1/attention and /v1/heatmap take them as query parameters)."""
    answer, expected = (post(toy, "/v1/translate", TEXT | {"n_best": 2} | body) for body in (fields, same_as))
    assert answer.status_code == 200, answer.text
    assert answer.json() == expected.json()


@pytest.mark.parametrize(
    "fields,named",
    [
        ({"rerank": "bogus"}, "rerank"),
        ({"rerank": "mbr", "rerank_candidates": "x"}, "rerank_candidates"),
        ({"rerank": "channel", "channel_weight": "11"}, "channel_weight"),
        ({"rerank": "channel", "rerank_candidates": "9"}, "rerank_candidates"),
    ],
)
def test_libretranslate_forms_and_json_take_the_extension(toy: str, fields: dict, named: str) -> None:
    for form in (True, False):
        body = FORM | fields if form else FORM | {k: _json_value(v) for k, v in fields.items()}
        answer = post(toy, "/translate", body, data=form)
        assert answer.status_code == 400, answer.text
        assert named in answer.json()["error"]
    good = post(toy, "/translate", FORM | {"rerank": "mbr", "rerank_candidates": "3", "channel_weight": ""}, data=True)
    assert good.status_code == 200, good.text  # a form's empty field is unset
    same = post(toy, "/translate", FORM | {"rerank": "mbr", "rerank_candidates": 3})
    assert good.json()["translatedText"] == same.json()["translatedText"]


def _json_value(value: str) -> object:
    """A form's text as the JSON value it stands for ("2" -> 2), or the text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def test_a_channel_without_the_reverse_direction_is_a_400_naming_it(tiny_bundle: Path) -> None:
    with serving(tiny_bundle) as url:  # de-en alone
        for route, body in (("/v1/translate", TEXT), ("/translate", FORM), ("/v1/attention", TEXT)):
            for mode in ("channel", "mbr+channel"):
                answer = post(url, route, body | {"rerank": mode})
                assert answer.status_code == 400, answer.text
                assert "rerank" in answer.json()["error"] and "en->de" in answer.json()["error"]
            assert post(url, route, body | {"rerank": "mbr"}).status_code == 200
        # The document offers no channel mode where no direction has its reverse.
        schema = httpx.get(url + "/openapi.json", timeout=30).json()["components"]["schemas"]
        modes = next(v for v in schema["TranslateRequest"]["properties"]["rerank"]["anyOf"] if "enum" in v)["enum"]
        assert modes == ["none", "mbr"]


def test_a_reranked_request_counts_its_candidates_and_the_channels_pass(both_directions: Path) -> None:
    text = "der Hund ist klein ."  # 20 characters
    rows = max(4, 8) + 8  # the beam widened to the 8 candidates, and the channel's pass over each
    limit = rows * len(text)  # 320
    pinned = [  # (body, characters x the rows they cost = limit + 0 or + 1 or more)
        ({"rerank": "channel", "text": text}, True),  # 16 x 20 = 320
        ({"rerank": "channel", "text": text + "."}, False),  # 16 x 21
        ({"rerank": "mbr", "text": text * 2}, True),  # no channel: 8 x 40 = 320
        ({"rerank": "mbr", "text": text * 2 + "."}, False),  # 8 x 41
        ({"text": text * 4}, True),  # a plain search, beam 4: 4 x 80 = 320
        ({"text": text * 4 + "."}, False),
    ]
    with serving(both_directions, max_request_work=str(limit)) as url:
        for body, fits in pinned:
            answer = post(url, "/v1/translate", {"source": "de", "target": "en", "alignment": False} | body)
            assert answer.status_code == (200 if fits else 413), (body, answer.text)
            if not fits:
                assert "beam rows" in answer.json()["error"]
        over = {"source": "de", "target": "en", "rerank": "channel"}
        assert "16 beam rows" in post(url, "/v1/translate", over | {"text": text + "."}).json()["error"]
        # The stream and LibreTranslate's route are bounded alike.
        assert post(url, "/v1/translate/stream", over | {"text": text + "."}).status_code == 413
        libre = {"source": "de", "target": "en", "rerank": "channel"}
        assert post(url, "/translate", libre | {"q": text + "."}).status_code == 413
        assert post(url, "/translate", libre | {"q": text}).status_code == 200
