"""Step 3 of the cluster mode: the actor that translates windows, one model load per actor.

Ray Data's `map_batches` builds one `TranslateWindows` per actor of the pool and calls it
with batches of windows (one row each: the shard, the window's first line and its raw
lines). A window goes through the batch CLI's own pipeline: its lines decoded and checked
one by one (`read_segments`: a bad line becomes a record with its error), split into
sentences, sorted, batched and joined (`run_windows`, the same `SentenceTranslator` as a
`--workers` process), and formatted by the CLI's `format_record`; what comes back is the
window's records as one string, its failed lines and its count of unused glossary terms.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

from seq2seq.cli import batch


class _Records:
    """The records a job writes, kept (a `batch.RecordSink`)."""

    def __init__(self) -> None:
        self.records: list[str] = []

    def write(self, records: list[str]) -> None:
        self.records += records


class TranslateWindows:
    """The `map_batches` callable: built once per actor, then called with batches of windows."""

    def __init__(self, spec: batch.EngineSpec, options: batch.JobOptions, input_format: str, max_chars: int):
        import ray

        # The actor's share of its node: as many intra-op threads as Ray CPUs (--actor-cpus),
        # unless --threads said otherwise.
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
        spec = dataclasses.replace(spec, threads=spec.threads or max(1, int(cpus)))
        self.worker = batch.SentenceTranslator.load(spec)
        self.engine = batch.InlineEngine(self.worker)
        # Failures go back with the records and are reported once, by the driver.
        self.options = dataclasses.replace(options, max_warnings=0, heatmaps=None)
        self.input_format, self.max_chars = input_format, max_chars

    def __call__(self, windows: Any) -> dict[str, list]:
        """`windows`: a pyarrow table with columns shard, first_line, lines, parquet, raw."""
        out: dict[str, list] = {"shard": [], "first_line": [], "records": [], "failed": [], "unused_terms": []}
        for row in windows.to_pylist():
            records, failed, unused = self.translate(row["raw"], row["first_line"], row["lines"], row["parquet"])
            out["shard"].append(row["shard"])
            out["first_line"].append(row["first_line"])
            out["records"].append(records)
            out["failed"].append(failed)
            out["unused_terms"].append(unused)
        return out

    def translate(self, raw: bytes, first_line: int, lines: int, parquet: bool) -> tuple[str, str, int]:
        """One window's records, joined; its failures as JSON `[[line, error], ...]`; and how
        many glossary terms its translations did not use (the driver's summary counts them)."""
        input_format = "jsonl" if parquet else self.input_format  # a Parquet row is read as a JSONL line
        segments = list(batch.read_segments(io.BytesIO(raw), input_format, self.max_chars, first_line))
        if len(segments) != lines:
            raise ValueError(f"a window of {lines} lines read as {len(segments)}: the input changed during the job")
        sink = _Records()
        translator = self.worker.translator
        summary = batch.run_windows(
            [segments], self.engine, translator.tokenizer, sink, self.options, translator.max_source_tokens
        )
        failures = json.dumps(list(zip(summary.failed_lines, summary.errors)))
        return "".join(sink.records), failures, summary.unused_terms
