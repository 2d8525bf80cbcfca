"""File jobs against the synchronous answer, with the shipped model on a real server.

    python bench/file_jobs.py --models models --rounds 3

A 10-page DOCX (bench/documents.py's, from the gold set's German sentences) goes to `POST
/translate_file` both ways, alternated, best of `--rounds`: synchronously (the answer waits
for the translated file) and as a job (`async=true`: the time of the 202, then the status
polled every 0.1 s until `done`; a client that follows `Retry-After` learns of it up to that
many seconds later). The ratio job / synchronous is the price of the job mode. Then one-
sentence `/translate` requests sent one after another, alone and beside a running job: their
latency shows the job taking its fair turns rather than the model.

    git worktree add /tmp/base-filestore 8f99ef5
    python bench/file_jobs.py --models models --store --base /tmp/base-filestore --rounds 20

`--store` measures instead what a full store costs each request: two servers, one from the
base checkout `--base` and one from this one, each on its own directory holding the same
`--records` records (half stored files with their metadata, half finished jobs' records, as
a busy server keeps them for `file_ttl`), are asked in turn, alternating which goes first:
a job's status (`GET /translate_file/<id>`), a download and a one-line upload. The base
swept the whole store on every such request; this checkout sweeps in the background.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
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


def fill_store(directory: Path, records: int) -> str:
    """`records` records in `directory`: half stored files (metadata, file, sidecar), half
    the records of the done jobs that made them, kept for a day; a job's id to ask about."""
    directory.mkdir(mode=0o700, parents=True)
    expires, ids = time.time() + 86400, [f"bench{index:019d}" for index in range(records // 2)]
    for file_id in tqdm(ids, desc=f"filling {directory.name}", file=sys.stderr):
        (directory / file_id).write_bytes(b"The house is small.\n")
        (directory / f"{file_id}.alignment.jsonl").write_text('{"segment": 0, "links": "0-0"}\n')
        meta = {"name": "a.en.txt", "media_type": "text/plain", "key": None, "expires": expires}
        (directory / f"{file_id}.json").write_text(json.dumps(meta))
        answer = {"file_id": file_id, "name": "a.en.txt", "partial": False, "notes": {}, "report": {}}
        job = {"id": file_id, "state": "done", "name": "a.en.txt", "key": None, "segments_done": 1}
        job.update(segments_total=1, position=0, created=0.0, started=0.0, error="", error_status=0)
        (directory / f"{file_id}.job.json").write_text(json.dumps({**job, "answer": answer, "expires": expires}))
    return ids[0]


def store_requests(http: httpx.Client, job_id: str) -> dict[str, float]:
    """Seconds each request of a full store took: a job's status, a download, an upload."""
    times, line = {}, {"file": ("a.txt", SENTENCES[0].encode())}
    for name, send in (
        ("poll", lambda: http.get(f"/translate_file/{job_id}")),
        ("download", lambda: http.get(f"/download_file/{job_id}")),
        ("upload", lambda: http.post("/translate_file", files=line, data=FORM)),
    ):
        started = time.perf_counter()
        send().raise_for_status()
        times[name] = time.perf_counter() - started
    return times


def full_store(args: argparse.Namespace) -> None:
    """The base checkout against this one on a store of `args.records` records (module doc)."""
    work = Path(tempfile.mkdtemp(prefix="bench-file-store-"))
    trees = {"base": args.base.resolve(), "this": Path(__file__).resolve().parents[1]}
    servers, clients = {}, {}
    try:
        for name, tree in trees.items():
            job_id = fill_store(work / name, args.records)
            servers[name] = start_server(args.models, 5, args.threads, tree=tree, files_dir=str(work / name))
            clients[name] = httpx.Client(base_url=servers[name][1], timeout=120)
        for http in clients.values():
            store_requests(http, job_id)  # warm: the models, and this checkout's first sweep (its index)
        time.sleep(5)
        times: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
        for round_ in tqdm(range(args.rounds), desc="rounds", file=sys.stderr):
            for name in sorted(servers, reverse=bool(round_ % 2)):  # alternating which goes first
                times[name].append(store_requests(clients[name], job_id))
    finally:
        for http in clients.values():
            http.close()
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.records:,} records in the store, {args.rounds} rounds alternated; median (max) per request")
    for request in ("poll", "download", "upload"):
        base, this = ([round_[request] for round_ in times[name]] for name in ("base", "this"))
        base_ms, this_ms = statistics.median(base) * 1000, statistics.median(this) * 1000
        print(
            f"{request:9} base {base_ms:7.1f} ms ({max(base) * 1000:7.1f})   this {this_ms:6.1f} ms "
            f"({max(this) * 1000:6.1f})   {base_ms / this_ms:6.1f}x faster"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument("--gold", type=Path, default=Path("data/gold/de-en.gold.tsv"))
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many (a shared CPU is noisy)")
    parser.add_argument("--store", action="store_true", help="a full store's cost per request, base against this")
    parser.add_argument("--base", type=Path, default=Path("/tmp/base-filestore"), help="the base checkout (--store)")
    parser.add_argument("--records", type=int, default=10000, help="records in the store (--store)")
    args = parser.parse_args()
    if args.store:
        full_store(args)
        return 0
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
