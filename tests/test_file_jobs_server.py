"""File jobs on a real server (`python -m service.serve`, the tiny onnxruntime bundle, API keys
on): a file over `file_sync_chars` is answered 202 and completes, its progress counted call by
call, its DOCX read back by python-docx as the synchronous tests read theirs; a small file
keeps LibreTranslate's synchronous answer; the upload's key guards the status and the
download; and stopping the server with a job running is prompt, the job's record saying so
to the next server on the same directory."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sample_documents import BOLD, ITALIC, LINK, PLAIN, docx_view, make_docx, plain
from test_service_server import free_port, serving, start_server
from toy import toy_pairs

KEYS = {"X-API-Key": "k1"}
SETTINGS = {"file_sync_chars": "300", "max_request_work": "400", "api_keys": "k1,k2"}


@pytest.fixture(scope="module")
def http(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    files = tmp_path_factory.mktemp("files")
    with (
        serving(tiny_bundle.parent, files_dir=str(files), **SETTINGS) as (url, _),
        httpx.Client(base_url=url, timeout=120, headers=KEYS) as client,
    ):
        yield client


def long_text(count: int) -> bytes:
    """`count` toy sentences, one a line (~20 characters each)."""
    return "".join(source + "\n" for source, _ in toy_pairs(count, seed=5)).encode()


def translations(http: httpx.Client, texts: list[str]) -> list[str]:
    """The server's translation of each text, one request each (the calls are kept small here)."""
    answers = [http.post("/translate", json={"q": text, "source": "de", "target": "en"}) for text in texts]
    return [answer.json()["translatedText"] for answer in answers]


def upload(http: httpx.Client, name: str, data: bytes, **fields: str) -> httpx.Response:
    return http.post("/translate_file", files={"file": (name, data)}, data={"source": "de", "target": "en", **fields})


def poll(http: httpx.Client, job: dict, seen: list | None = None, headers: dict | None = None) -> dict:
    """The job's status once finished, polled every 20 ms (each status is added to `seen`)."""
    deadline = time.monotonic() + 120
    while True:
        answer = http.get(job["status_url"], headers=headers)
        assert answer.status_code == 200, answer.text
        found = answer.json()
        if seen is not None:
            seen.append(found)
        if found["state"] in ("done", "failed"):
            return found
        assert int(answer.headers["Retry-After"]) >= 1
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


def test_a_large_file_is_a_job_that_completes_with_its_progress(http: httpx.Client) -> None:
    data = long_text(150)
    answer = upload(http, "lang.txt", data)
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert answer.headers["Location"] == job["status_url"] and job["segments_total"] == 150
    seen: list[dict] = []
    done = poll(http, job, seen)
    assert done["state"] == "done" and done["segments_done"] == 150, done
    counts = [found["segments_done"] for found in seen]
    assert counts == sorted(counts)  # progress only grows
    partway = [found for found in seen if found["state"] == "running" and 0 < found["segments_done"] < 150]
    assert partway, counts  # model calls of 100 characters: the progress bar moves
    lines = http.get(done["translatedFileUrl"]).text.splitlines()
    sources = data.decode().splitlines()
    assert len(lines) == 150 and lines[:8] == translations(http, sources[:8])


def test_a_docx_job_reads_as_the_synchronous_answer_and_keeps_its_key(http: httpx.Client) -> None:
    texts = [plain(BOLD), plain(ITALIC), plain(LINK), *PLAIN]
    translated = dict(zip(texts, translations(http, texts)))
    synchronous = upload(http, "bericht.docx", make_docx())  # under 300 characters: LibreTranslate's answer
    assert synchronous.status_code == 200 and synchronous.json()["translatedFileUrl"]
    answer = upload(http, "bericht.docx", make_docx(), **{"async": "true"})
    assert answer.status_code == 202, answer.text
    job = answer.json()
    other = {"X-API-Key": "k2"}
    refused = http.get(job["status_url"], headers=other)
    assert refused.status_code == 403 and "another API key" in refused.json()["error"]
    done = poll(http, job)
    assert done["state"] == "done" and done["report"] == synchronous.json()["report"]
    assert http.get(done["translatedFileUrl"], headers=other).status_code == 403
    download = http.get(done["translatedFileUrl"])
    assert 'filename="bericht.en.docx"' in download.headers["content-disposition"]
    assert download.content == http.get(synchronous.json()["translatedFileUrl"]).content
    source, out = docx_view(make_docx()), docx_view(download.content)
    assert out["body"] == [translated[text] for text in source["body"]]
    assert any(bold and text.strip() for text, bold, _, _ in out["runs"]) and out["links"][0][0] == LINK[3]


def test_stopping_the_server_stops_a_running_job_promptly(tiny_bundle: Path, tmp_path: Path) -> None:
    files, log = tmp_path / "files", tmp_path / "serve.log"
    settings = {**SETTINGS, "files_dir": str(files), "max_request_work": "100"}
    port = free_port()
    process = start_server(tiny_bundle.parent, port, log=log, log_level="info", **settings)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=60, headers=KEYS) as http:
            job = upload(http, "lang.txt", long_text(2000)).json()
            deadline = time.monotonic() + 60
            while http.get(job["status_url"]).json()["segments_done"] == 0:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        stopping = time.monotonic()
        process.terminate()
        process.wait(timeout=30)
    seconds = time.monotonic() - stopping
    output = log.read_text()
    assert seconds < 3, f"shutdown took {seconds:.1f} s"
    assert "graceful shutdown exceeded" not in output and "Finished server process" in output, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    record = json.loads((files / f"{job['job_id']}.job.json").read_text())
    assert record["state"] == "failed" and 0 < record["segments_done"] < 2000
    with serving(tiny_bundle.parent, **settings) as (url, _):  # the next server, on the same directory
        stopped = httpx.get(job["status_url"].replace(job["status_url"].split("/translate_file")[0], url), headers=KEYS)
        assert stopped.status_code == 200 and stopped.json()["state"] == "failed"
        assert stopped.json()["error"] == "the server shut down while the job ran; upload the file again"
