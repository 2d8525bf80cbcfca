"""A document is an attack surface: the limits and bad input of `POST /translate_file` and
`GET /download_file`, over the scripted echo engine (fast; the same routes on a real
server are in test_documents.py): byte, character, ZIP size, ratio and path-name limits,
XML entities, files that are not what their extension says (400 naming the format, never
500), partial handling reported, downloads that expire and need the upload's key, and
nothing written outside the service's directory."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import docx
import pytest
from echo_backend import make_client
from fastapi.testclient import TestClient
from sample_documents import zip_with

from seq2seq.documents.files import Limits, format_of, read_document
from seq2seq.documents.formats.limits import check_zip
from service.compute.engine import TranslatorEngine


def small_docx(*paragraphs: str, field: bool = False) -> bytes:
    document = docx.Document()
    for text in paragraphs:
        paragraph = document.add_paragraph(text)
        if field:  # a simple field (a page number) in the paragraph: kept as it was
            paragraph._p.append(
                paragraph._p.makeelement(
                    "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}fldSimple",
                    {"{http://schemas.openxmlformats.org/wordprocessingml/2006/main}instr": "PAGE"},
                )  # fmt: skip
            )
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@pytest.fixture
def files_dir(tmp_path: Path) -> Path:
    return tmp_path / "files"


def client_for(engine: TranslatorEngine, files_dir: Path, **settings: object) -> TestClient:
    return make_client(engine, files_dir=str(files_dir), **settings)


def upload(client: TestClient, name: str, data: bytes, **fields: str) -> object:
    return client.post("/translate_file", files={"file": (name, data)}, data={"source": "de", "target": "en", **fields})


def test_a_translated_file_is_kept_in_the_service_directory_and_reports_what_it_kept(
    echo_engine: TranslatorEngine, files_dir: Path, tmp_path: Path
) -> None:
    with client_for(echo_engine, files_dir) as client:
        answer = upload(client, "a.docx", small_docx("a b c", "d e", field=True))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["partial"] is True and body["notes"] == {"fields": 2} and body["name"] == "a.en.docx"
        file_id = body["translatedFileUrl"].rsplit("/", 1)[1]
        assert sorted(p.name for p in files_dir.iterdir()) == sorted(
            [file_id, f"{file_id}.json", f"{file_id}.alignment.jsonl"]
        )
        out = docx.Document(io.BytesIO(client.get(f"/download_file/{file_id}").content))
        assert [p.text for p in out.paragraphs] == ["a b c", "d e"]
        assert len(out.element.body.findall(".//{*}fldSimple")) == 2  # the fields, where they stood
    assert list(tmp_path.iterdir()) == [files_dir]


@pytest.mark.parametrize(
    ("name", "data", "status", "message"),
    [
        ("a.docx", b"not a zip at all", 400, "not a valid DOCX file"),
        ("a.pptx", zip_with({"ppt/x.xml": b"<x/>"}), 400, "not a valid PPTX file"),
        ("a.odt", zip_with({"mimetype": b"text/plain", "content.xml": b"<x/>"}), 400, "not a valid ODT file"),
        ("a.docx", zip_with({"../../etc/evil": b"x"}), 400, "unsafe path name"),
        ("a.docx", zip_with({"word/document.xml": b"\0" * (4 << 20)}), 413, "zip bomb"),
        ("a.xlf", b'<!DOCTYPE x [<!ENTITY a "aaaa">]><xliff version="1.2">&a;</xliff>', 400, "entity"),
        ("a.xlf", b"<xliff><unclosed></xliff>", 400, "not a valid XLIFF file"),
        ("a.srt", b"1\nno timing here\n", 400, "not a valid SRT file"),
        ("a.html", b"\xff\xfe<p>a</p>", 400, "not UTF-8"),
        ("a.pdf", b"%PDF-1.4", 400, "unsupported file format '.pdf'"),
        ("noextension", b"a b", 400, "unsupported file format"),
    ],
)
def test_bad_files_are_4xx_naming_the_format(
    echo_engine: TranslatorEngine, files_dir: Path, name: str, data: bytes, status: int, message: str
) -> None:
    with client_for(echo_engine, files_dir) as client:
        answer = upload(client, name, data)
    assert answer.status_code == status and message in answer.json()["error"], answer.text


def test_size_and_character_limits(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir, file_max_bytes=4096, file_char_limit=10) as client:
        big = upload(client, "a.txt", b"a b\n" * 2000)
        assert big.status_code == 413 and "4096 bytes" in big.json()["error"]
        wordy = upload(client, "a.txt", b"a b c d e f g h\n")
        assert wordy.status_code == 413 and "15 characters" in wordy.json()["error"]
        missing = client.post("/translate_file", data={"source": "de", "target": "en"})
        assert missing.status_code == 400
        no_source = client.post("/translate_file", files={"file": ("a.txt", b"a")}, data={"target": "en"})
        assert no_source.status_code == 400 and "source" in no_source.json()["error"]


def test_downloads_expire_and_are_deleted(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir, file_ttl=0.5, file_sweep_s=0.1) as client:
        url = upload(client, "a.txt", b"a b\nc\n").json()["translatedFileUrl"]
        assert client.get(url).content == b"a b\nc\n"
        time.sleep(0.7)
        gone = client.get(url)
        assert gone.status_code == 404 and "expired" in gone.json()["error"]
        deadline = time.monotonic() + 10  # deleted by the background sweep, every file_sweep_s
        while list(files_dir.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(files_dir.iterdir()) == []
        assert client.get("/download_file/..%2F..%2Fetc%2Fpasswd").status_code == 404
        assert client.get("/download_file/" + "A" * 24).status_code == 404


def test_downloads_need_the_uploads_key(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir, api_keys="k1,k2") as client:
        assert upload(client, "a.txt", b"a b\n").status_code == 403
        url = upload(client, "a.txt", b"a b\n", api_key="k1").json()["translatedFileUrl"]
        assert client.get(url).status_code == 403
        assert client.get(url, headers={"X-API-Key": "k2"}).status_code == 403
        assert client.get(url, params={"api_key": "k1"}).content == b"a b\n"
        assert client.get("/frontend/settings").json()["keyRequired"] is True


def test_zip_checks_and_formats_in_the_library() -> None:
    limits = Limits(max_unzipped_bytes=1000, max_entries=2)
    with pytest.raises(ValueError, match="entries"):
        check_zip(zip_with({"a": b"1", "b": b"2", "c": b"3"}), "docx", limits)
    with pytest.raises(ValueError, match="expands to"):
        check_zip(zip_with({"a": b"x" * 2000}, zipfile.ZIP_STORED), "docx", limits)
    assert format_of("Bericht.DOCX").name == "docx" and format_of("x", "htm").name == "html"
    document = read_document(b"a b\n\nc\r\n", format_of("a.txt"))
    assert document.write([None, None, None]) == b"a b\n\nc\r\n"


@pytest.mark.parametrize("name", ["a.docx", "a.pptx"])
def test_a_translated_office_file_is_the_same_bytes_whenever_it_is_written(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sample_documents import make_docx, make_pptx

    make = make_docx if name.endswith("docx") else make_pptx

    def translated(upload: bytes) -> bytes:
        document = read_document(upload, format_of(name))
        return document.write([None] * len(document.segments))

    first = translated(make())
    later = time.time() + 3600  # python-docx/-pptx stamp entries with the clock: an hour on,
    monkeypatch.setattr(time, "time", lambda: later)  # for the upload and the translation
    second_upload = make()
    assert translated(second_upload) == first
    with zipfile.ZipFile(io.BytesIO(first)) as written:
        assert {entry.date_time for entry in written.infolist()} == {(1980, 1, 1, 0, 0, 0)}
