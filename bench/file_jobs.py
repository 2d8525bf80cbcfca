"""File jobs against the synchronous answer, with the shipped model on a real server.

    python bench/file_jobs.py --models models --rounds 3

A 10-page DOCX (bench/documents.py's, from the gold set's German sentences) goes to `POST
/translate_file` both ways, alternated, best of `--rounds`: synchronously (the answer waits
for the translated file) and as a job (`async=true`: the time of the 202, then the status
polled every 0.1 s until `done`; a client that follows `Retry-After` learns of it up to that
many seconds later). The ratio job / synchronous is the price of the job mode. Then one-
sentence `/translate` requests sent one after another, alone and beside a running job: their
latency shows the job taking its fair turns rather than the model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from documents import ten_pages  # noqa: E402
from service_load import SENTENCES, start_server  # noqa: E402

from seq2seq.analysis.aer import read_gold  # noqa: E402

FORM = {"source": "de", "target": "en"}


def synchronous(http: httpx.Client, data: bytes) -> float:
    started = time.perf_counter()
    answer = http.post("/translate_file", files={"file": ("bericht.docx", data)}, data=FORM)
    answer.raise_for_status()
    assert http.get(answer.json()["translatedFileUrl"]).status_code == 200
    return time.perf_counter() - started


def as_job(http: httpx.Client, data: bytes, poll_s: float = 0.1) -> tuple[float, float]:
    """(seconds until the 202, seconds until the status said `done`)."""
    started = time.perf_counter()
    answer = http.post("/translate_file", files={"file": ("bericht.docx", data)}, data={**FORM, "async": "true"})
    accepted = time.perf_counter() - started
    assert answer.status_code == 202, answer.text
    while (status := http.get(answer.json()["status_url"]).json())["state"] not in ("done", "failed"):
        time.sleep(poll_s)
    assert status["state"] == "done", status
    return accepted, time.perf_counter() - started


def sentence_latencies(url: str, stop: threading.Event, count: int) -> list[float]:
    """One-sentence /translate requests one after another until `stop` (or `count` of them)."""
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=120) as http:
        while not stop.is_set() and len(times) < count:
            started = time.perf_counter()
            body = {"q": SENTENCES[len(times) % len(SENTENCES)], **FORM}
            http.post("/translate", json=body).raise_for_status()
            times.append(time.perf_counter() - started)
    return times


def describe(times: list[float]) -> str:
    return f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms (n={len(times)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument("--gold", type=Path, default=Path("data/gold/de-en.gold.tsv"))
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many (a shared CPU is noisy)")
    args = parser.parse_args()
    data = ten_pages([pair.source for pair in read_gold(args.gold)])
    # Synchronous whatever the size, unless the upload asks for a job.
    process, url = start_server(args.models, 5, args.threads, file_sync_chars="1000000")
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            sync_times, job_times, accepted_times = [], [], []
            for _ in tqdm(range(args.rounds), desc="rounds", file=sys.stderr):
                sync_times.append(synchronous(http, data))
                accepted, done = as_job(http, data)
                accepted_times.append(accepted)
                job_times.append(done)
            alone = sentence_latencies(url, threading.Event(), 40)
            stop, beside = threading.Event(), []
            worker = threading.Thread(target=lambda: beside.extend(sentence_latencies(url, stop, 1000)))
            worker.start()
            as_job(http, data)
            stop.set()
            worker.join()
    finally:
        process.terminate()
        process.wait(timeout=30)
    sync_s, job_s = min(sync_times), min(job_times)
    print(f"10-page DOCX, {len(data)} bytes, best of {args.rounds}")
    print(f"synchronous answer:          {sync_s:6.2f} s")
    print(f"job (202, polled at 0.1 s):  {job_s:6.2f} s  (202 after {min(accepted_times) * 1000:.0f} ms)")
    print(f"ratio job / synchronous:     {job_s / sync_s:6.2f}x")
    print(f"one sentence, alone:         {describe(alone)}")
    print(f"one sentence, beside a job:  {describe(beside)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
