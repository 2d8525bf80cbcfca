"""Files end to end on a real server (`python -m service.serve`, the tiny onnxruntime bundle):
documents made in the tests (tests/sample_documents.py) with bold, italic, underline, colour
and links mid-sentence go through `POST /translate_file` and `GET /download_file/<id>`, and
come back in their own library (python-docx, python-pptx, odfdo, lxml, markdown-it-py) with
the same paragraphs, cues and slides, every link and formatted span kept, every segment
translated, and each marked paragraph's text equal to the translation of its plain text.
Then `crossalign translate -i in.docx -o out.docx` and `crossalign align --markup`.
"""

from __future__ import annotations

import html.parser
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from lxml import etree
from sample_documents import (
    BOLD,
    HTML_PAGE,
    ITALIC,
    LINK,
    MARKDOWN,
    PLAIN,
    SRT,
    XLIFF,
    docx_view,
    make_docx,
    make_odt,
    make_pptx,
    odt_view,
    plain,
    pptx_view,
)
from test_service_server import serving

from seq2seq.core.alignment import words

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def http(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> httpx.Client:
    files = tmp_path_factory.mktemp("files")
    with (
        serving(tiny_bundle.parent, files_dir=str(files)) as (url, _),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        client.files_dir = files  # type: ignore[attr-defined]
        yield client


@pytest.fixture(scope="module")
def translations(http: httpx.Client) -> dict[str, str]:
    """The server's translation of every plain sentence the documents hold."""
    texts = [plain(BOLD), plain(ITALIC), plain(LINK), *PLAIN]
    answer = http.post("/translate", json={"q": texts, "source": "de", "target": "en"}).json()
    return dict(zip(texts, answer["translatedText"]))


def round_trip(http: httpx.Client, name: str, data: bytes) -> tuple[dict, bytes]:
    response = http.post("/translate_file", files={"file": (name, data)}, data={"source": "de", "target": "en"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["translatedFileUrl"].startswith(str(http.base_url).rstrip("/") + "/download_file/")
    download = http.get(answer["translatedFileUrl"])
    assert download.status_code == 200, download.text
    stem, extension = name.rsplit(".", 1)
    assert f'filename="{stem}.en.{extension}"' in download.headers["content-disposition"]
    report = answer["report"]
    assert report["translated"] >= 0.95 * report["segments"] > 0 and report["failed"] == 0
    return answer, download.content


def test_docx(http: httpx.Client, translations: dict[str, str]) -> None:
    source = docx_view(make_docx())
    answer, data = round_trip(http, "bericht.docx", make_docx())
    out = docx_view(data)
    assert len(out["body"]) == len(source["body"]) and len(out["cells"]) == len(source["cells"])
    # Each marked paragraph reads as its plain sentence's translation.
    assert out["body"] == [translations[text] for text in source["body"]]
    assert out["header"] == [translations[PLAIN[0]]] and out["cells"][0] == translations[PLAIN[1]]
    # Every formatted span is kept, on some words of the translation.
    assert any(bold and text.strip() for text, bold, _, _ in out["runs"])
    assert any(italic and underline and text.strip() for text, _, italic, underline in out["runs"])
    assert [address for address, _ in out["links"]] == [LINK[3]] and out["links"][0][1].strip()
    assert answer["report"]["tags"] >= 3 and not answer["partial"]


def test_pptx(http: httpx.Client, translations: dict[str, str]) -> None:
    source = pptx_view(make_pptx())
    _, data = round_trip(http, "folien.pptx", make_pptx())
    out = pptx_view(data)
    assert out["slides"] == source["slides"] == 3 and len(out["texts"]) == len(source["texts"])
    assert out["texts"] == [translations[text] for text in source["texts"]]
    assert out["notes"] == [translations[PLAIN[1]]] * 3
    assert any(bold and text.strip() for text, bold, _ in out["runs"])
    assert any(italic and text.strip() for text, _, italic in out["runs"])
    assert [address for address, _ in out["links"]] == [LINK[3]]


def test_odt(http: httpx.Client, translations: dict[str, str], tmp_path: Path) -> None:
    source = odt_view_of(make_odt(tmp_path / "in.odt"), tmp_path / "source.odt")
    _, data = round_trip(http, "brief.odt", (tmp_path / "in.odt").read_bytes())
    out = odt_view_of(data, tmp_path / "out.odt")
    assert len(out["paragraphs"]) == len(source["paragraphs"]) == 3
    assert out["paragraphs"] == [translations[text] for text in source["paragraphs"]]
    assert out["headers"] == [translations[PLAIN[0]]]
    assert sorted(style for style, text in out["spans"] if text.strip()) == ["Emphasis", "Strong_20_Emphasis"]
    assert [href for href, _ in out["links"]] == [LINK[3]] and out["links"][0][1].strip()


def odt_view_of(data: bytes, path: Path) -> dict:
    path.write_bytes(data)
    return odt_view(path)


class Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.alts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self.hrefs += [value for name, value in attrs if name == "href"]
        self.alts += [value for name, value in attrs if name == "alt"]


def test_html(http: httpx.Client, translations: dict[str, str]) -> None:
    _, data = round_trip(http, "seite.html", HTML_PAGE.encode())
    page = data.decode()
    found = Elements()
    found.feed(page)
    assert found.tags.count("p") == 3 and {"b", "i", "a"} <= set(found.tags) and found.hrefs == [LINK[3]]
    assert found.alts == [translations[PLAIN[1]]]  # an image's text translated in its tag
    assert "<script>if (a < b) { x = '</p>'; }</script><pre>der Hund</pre>" in page  # kept as written
    assert f"<title>{translations[PLAIN[0]]}</title>" in page


def test_native_inline_html_translates_attributes_beside_its_one_segment(
    http: httpx.Client, translations: dict[str, str]
) -> None:
    text = f'<img alt="{PLAIN[1]}" src="x.png">{PLAIN[0]}'
    answer = http.post("/v1/translate", json={"text": text, "source": "de", "format": "html"})
    assert answer.status_code == 200, answer.text
    (record,) = answer.json()["translations"]
    found = Elements()
    found.feed(record["marked_text"])
    assert found.alts == [translations[PLAIN[1]]]  # the same translation as the sentence alone
    assert record["plain_source"] == PLAIN[0] and record["text"] == translations[PLAIN[0]]
    assert record["marked_text"].endswith(translations[PLAIN[0]])


def test_srt(http: httpx.Client, translations: dict[str, str]) -> None:
    _, data = round_trip(http, "film.srt", SRT.encode())
    cues = data.decode().strip().split("\n\n")
    assert len(cues) == 3
    assert [cue.split("\n")[1] for cue in cues] == [cue.split("\n")[1] for cue in SRT.strip().split("\n\n")]
    assert "<b>" in cues[0] and "</b>" in cues[0] and "<i>" in cues[1]
    assert len(cues[1].split("\n")) == 4  # two text lines, as the cue had
    assert cues[2].split("\n")[2] == translations[PLAIN[0]]


def test_markdown_keeps_code(http: httpx.Client, translations: dict[str, str]) -> None:
    from markdown_it import MarkdownIt

    _, data = round_trip(http, "liesmich.md", MARKDOWN.encode())
    text = data.decode()
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    assert "```python\nder Hund ist klein .\n```" in text and "`der Hund`" in text
    assert text.startswith(f"# {translations[PLAIN[0]]}\n")
    inline = [t for t in tokens if t.type == "inline"]
    kinds = {child.type for t in inline for child in t.children}
    assert {"strong_open", "em_open", "link_open", "code_inline"} <= kinds
    assert any(child.attrs.get("href") == LINK[3] for t in inline for child in t.children)
    assert sum(t.type == "tr_open" for t in tokens) == 2


def test_xliff(http: httpx.Client) -> None:
    answer, data = round_trip(http, "strings.xlf", XLIFF.encode())
    root = etree.fromstring(data)
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    units = root.findall(".//x:trans-unit", ns)
    targets = [unit.find("x:target", ns) for unit in units]
    assert targets[0] is not None and targets[0].find("x:g", ns).get("id") == "b"
    assert targets[1].find("x:x", ns).get("id") == "br" and targets[1].get("state") == "needs-review-translation"
    assert targets[2] is None  # translate="no"
    assert root.find("x:file", ns).get("target-language") == "en"


def test_alignment_sidecar_and_settings(http: httpx.Client) -> None:
    answer, _ = round_trip(http, "bericht.docx", make_docx())
    sidecar = http.get(answer["translatedFileUrl"], params={"alignment": "true"})
    assert sidecar.status_code == 200 and sidecar.headers["content-type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in sidecar.text.splitlines()]
    assert len(records) == answer["report"]["segments"] and all("links" in r and "segment" in r for r in records)
    settings = http.get("/frontend/settings").json()
    assert ".docx" in settings["supportedFilesFormat"] and settings["filesTranslation"] is True
    written = sorted(p.name for p in http.files_dir.iterdir())  # type: ignore[attr-defined]
    assert written and all(name.split(".")[0] in answer["translatedFileUrl"] or len(name) >= 24 for name in written)


def test_a_file_report_counts_flagged_segments_and_unsupported_tags_the_sidecar_names(http: httpx.Client) -> None:
    """The report's new counts agree with what the sidecar names, segment by segment (issue 42;
    the shipped model's reproduction of the issue's example: tests/test_shipped_models.py)."""
    text = "Wir fahren **morgen früh** mit dem [Zug](https://bahn.de) nach Berlin.\n\n**der Hund** ist klein .\n"
    answer, _ = round_trip(http, "reise.md", text.encode())
    report = answer["report"]
    sidecar = http.get(answer["translatedFileUrl"], params={"alignment": "true"})
    records = [json.loads(line) for line in sidecar.text.splitlines()]
    assert len(records) == report["segments"] == 2
    assert all(isinstance(r["untranslated"], list) and isinstance(r["tags_unsupported"], list) for r in records)
    assert report["segments_untranslated"] == sum(bool(r["untranslated"]) for r in records)
    assert report["tags_unsupported"] == sum(len(r["tags_unsupported"]) for r in records)
    assert report["tags_unsupported"] >= report["tags_approximated"]
    for record in records:
        source_words = [w.text for w in words(record["source"])]
        assert all(word in source_words for word in record["untranslated"])
        for tag in record["tags_unsupported"]:
            assert tag["source"] in record["source"] and tag["placed_on"] in record["translation"]


def test_cli_translates_a_docx_and_aligns_markup(tiny_bundle: Path, tmp_path: Path) -> None:
    from seq2seq.loading import load_translator

    (tmp_path / "in.docx").write_bytes(make_docx())
    cli("translate", "-m", tiny_bundle, "-i", tmp_path / "in.docx", "-o", tmp_path / "out.docx", "--alignment")
    translator = load_translator(tiny_bundle, threads=1)
    out = docx_view((tmp_path / "out.docx").read_bytes())
    assert out["body"][1] == translator.translate(plain(BOLD)).text
    assert any(bold and text.strip() for text, bold, _, _ in out["runs"]) and out["links"][0][0] == LINK[3]
    sidecar = (tmp_path / "out.docx.alignment.jsonl").read_text().splitlines()
    assert len(sidecar) == 7 and json.loads(sidecar[1])["source"] == plain(BOLD)
    (tmp_path / "pairs.tsv").write_text(
        f"{BOLD[0]}<b>{BOLD[1]}</b>{BOLD[2]}\t{translator.translate(plain(BOLD)).text}\n"
    )
    marked = cli(
        "align", "--model", tiny_bundle, "-i", tmp_path / "pairs.tsv", "--markup", "html", "--format", "marked"
    )
    assert "<b>" in marked and "</b>" in marked
    assert marked.replace("<b>", "").replace("</b>", "").strip() == translator.translate(plain(BOLD)).text


def cli(*args: object) -> str:
    """`crossalign ...` in a fresh interpreter, one thread; its stdout (it must succeed)."""
    run = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *map(str, args), "--threads", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout
