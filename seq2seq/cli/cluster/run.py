"""Step 2 of the cluster mode, and its run: join Ray, stream the shards through the actor
pool, write each shard as its windows come back, and report as the batch CLI does.

Only this module (and the actors it starts) imports Ray; `crossalign translate --ray`
imports it lazily (seq2seq/cli/translate.py), so no other path ever loads Ray.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field

import ray
from ray.data import ActorPoolStrategy, Dataset, TaskPoolStrategy

from seq2seq.cli import UsageError, batch
from seq2seq.cli.cluster.actor import TranslateWindows
from seq2seq.cli.cluster.inputs import (
    InputError,
    InputFile,
    Shard,
    cut_windows,
    find_inputs,
    plan_shards,
    read_shard,
    sample_lines,
)
from seq2seq.cli.cluster.inputs import shard_windows as windows_per_shard
from seq2seq.cli.cluster.options import LOCAL, ClusterOptions
from seq2seq.cli.cluster.shards import (
    OutputError,
    Plan,
    completed,
    load_plan,
    remove_partials,
    write_record,
    write_shard,
)

log = logging.getLogger("crossalign.translate")


@dataclass
class _Tally:
    """The run's count of lines, from every shard: those written before (--resume) and now."""

    lines: int = 0
    now: int = 0  # lines written by this run
    failed: int = 0
    unused_terms: int = 0  # glossary terms not used, this run's
    warned: int = 0
    failed_lines: list[str] = field(default_factory=list)  # NAME:LINE, this run's


def main(args: argparse.Namespace, spec: batch.EngineSpec, recorded: dict) -> int:
    """`crossalign translate --ray`: `spec` is what each actor loads (the model, the decoding),
    `recorded` the options that decide the records (as the CLI's job file keeps them: a resume
    must use the same). UsageError for what the user can fix: inputs, output, the address."""
    cluster = ClusterOptions.from_args(args)
    files, plan = _inputs(args, recorded)
    try:
        windows = [cut_windows(file, plan.first_window, plan.window) for file in files]
    except (InputError, OSError) as error:
        raise UsageError(
            f"cannot read the input: {error}; give -i FILE, DIRECTORY or 'GLOB' of readable files"
        ) from error
    try:
        started = connect(cluster.address)
    except Exception as error:  # noqa: BLE001 - ConnectionError, RuntimeError, ...: Ray says which
        raise UsageError(
            f"cannot join the Ray cluster at {cluster.address} ({_first_line(error)}): start it with `ray start "
            "--head` and give the address it prints, or --ray auto for a local Ray"
        ) from error
    try:
        actors = cluster.actors or max(1, int(ray.cluster_resources().get("CPU", 1.0) // cluster.actor_cpus))
        if not plan.windows_per_shard:
            lines = sum(window.lines for cut in windows for window in cut)
            per_shard = windows_per_shard(lines, actors, cluster.shard_lines, plan.window)
            plan = Plan(plan.first_window, plan.window, per_shard)
            write_record(args.output, recorded, plan)
        shards = plan_shards(files, windows, plan.windows_per_shard)
        return _translate(args, _absolute(spec), cluster, shards, actors)
    finally:
        if started:
            ray.shutdown()


def sample(args: argparse.Namespace, count: int) -> list[str]:
    """Texts of the first input file's first `count` lines: what `--source auto` detects."""
    try:
        file = find_inputs(args.input, exclude=args.output)[0]
        raw = sample_lines(file, count)
    except (InputError, OSError) as error:
        raise UsageError(
            f"cannot read the input: {error}; give -i FILE, DIRECTORY or 'GLOB' of readable files"
        ) from error
    input_format = "jsonl" if file.parquet else args.input_format
    lines = [batch.decode_line(r, n, input_format, args.max_chars) for n, r in enumerate(raw, start=1)]
    return [line.source for line in lines if not line.error and not line.blank]


def _absolute(spec: batch.EngineSpec) -> batch.EngineSpec:
    """`spec` with absolute model paths: an actor's working directory is not the driver's."""
    channel = spec.channel.resolve() if spec.channel is not None else None
    return dataclasses.replace(spec, model=spec.model.resolve(), channel=channel)


def _inputs(args: argparse.Namespace, recorded: dict) -> tuple[list[InputFile], Plan]:
    """The input files and how to cut them: the resumed run's plan, or a new one whose shard
    size is chosen once the cluster's size is known (`windows_per_shard` 0)."""
    try:
        plan = load_plan(args.output, recorded, args.resume)
    except OutputError as error:
        raise UsageError(str(error)) from error
    try:
        files = find_inputs(args.input, exclude=args.output)
    except InputError as error:
        raise _unreadable(error) from error
    if plan is None:
        plan = Plan(min(args.flush_lines, args.batch_size), args.flush_lines, 0)
    return files, plan


def connect(address: str) -> bool:
    """Join Ray: a local instance for LOCAL, else the cluster at `address`. True when this
    run started the connection (and so ends it); a process that is already connected (a
    test, a notebook) keeps its own."""
    if ray.is_initialized():
        return False
    if address == LOCAL:
        ray.init(address="local", include_dashboard=False)
    else:
        ray.init(address=address)
    return True


def _translate(
    args: argparse.Namespace, spec: batch.EngineSpec, cluster: ClusterOptions, shards: list[Shard], actors: int
) -> int:
    """Run the shards still to do and write them; the exit status of the whole job."""
    remove_partials(args.output)
    tally, todo = _Tally(), []
    for shard in shards:
        failed = completed(args.output, shard, args.format)
        if failed is None:
            todo.append(shard)
        else:
            tally.lines, tally.failed = tally.lines + shard.lines, tally.failed + len(failed)
    if len(todo) < len(shards):
        log.info("resuming %s: %d of %d shards already written", args.output, len(shards) - len(todo), len(shards))
    log.info("%d shards to translate on %d actors of %g CPUs", len(todo), min(actors, len(todo)), cluster.actor_cpus)
    started = time.monotonic()
    try:
        if todo:
            _write_shards(args, _dataset(args, spec, cluster, todo, actors), todo, tally)
    except KeyboardInterrupt:
        log.warning("interrupted after %d lines; rerun with --resume -o %s to continue", tally.lines, args.output)
        return batch.EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - a task failed for good, the cluster went away, ...
        log.error("the job stopped: %s: %s", type(error).__name__, _first_line(error))
        return batch.EXIT_FATAL
    return _finish(tally, time.monotonic() - started)


def _dataset(
    args: argparse.Namespace, spec: batch.EngineSpec, cluster: ClusterOptions, todo: list[Shard], actors: int
) -> Dataset:
    """Shards -> their windows, read on this node -> records, translated by the actor pool."""
    options = batch.JobOptions(
        output_format=args.format,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        flush_lines=args.flush_lines,
    )
    # One block per shard, so that each is one task of the pool and the actors share them out.
    shards = ray.data.from_items([{"shard": shard.to_json()} for shard in todo], override_num_blocks=len(todo))
    # Read where the driver runs, so the inputs need only be on this machine; one task at a
    # time, no CPU reserved: reading is light, and every concurrent task would cost a process.
    node = ray.get_runtime_context().get_node_id()
    windows = shards.flat_map(
        _read, compute=TaskPoolStrategy(size=1), num_cpus=0, label_selector={"ray.io/node-id": node}
    )
    return windows.map_batches(
        TranslateWindows,
        batch_size=1,  # a window per call: it is already as many lines as the CLI sorts together
        batch_format="pyarrow",
        # Ray Data restarts a dead actor and retries its task (its defaults for actor pools),
        # so a killed actor costs the shard's time, never its lines.
        compute=ActorPoolStrategy(size=min(actors, len(todo)), max_tasks_in_flight_per_actor=1),
        num_cpus=cluster.actor_cpus,
        fn_constructor_kwargs={
            "spec": spec,
            "options": options,
            "input_format": args.input_format,
            "max_chars": args.max_chars,
        },
    )


def _read(row: dict) -> list[dict]:
    """A shard's row -> one row per window with its raw lines (runs as a Ray task)."""
    shard = Shard.from_json(row["shard"])
    return [
        {
            "shard": shard.index,
            "first_line": window.first_line,
            "lines": window.lines,
            "parquet": shard.file.parquet,
            "raw": raw,
        }
        for window, raw in read_shard(shard)
    ]


def _write_shards(args: argparse.Namespace, dataset: Dataset, todo: list[Shard], tally: _Tally) -> None:
    """Write each shard as soon as all its windows are back (in any order)."""
    by_index = {shard.index: shard for shard in todo}
    back: dict[int, dict[int, dict]] = {}
    written = 0
    for row in dataset.iter_rows():
        shard = by_index[row["shard"]]
        windows = back.setdefault(shard.index, {})
        windows[row["first_line"]] = row
        if len(windows) < len(shard.windows):
            continue
        del back[shard.index]
        parts = [windows[window.first_line] for window in shard.windows]
        records = "".join(part["records"] for part in parts)
        failures = [(line, error) for part in parts for line, error in json.loads(part["failed"])]
        tally.unused_terms += sum(part["unused_terms"] for part in parts)
        if records.count("\n") != shard.lines:  # one record per line, each ending its line
            raise RuntimeError(f"{shard.output_name(args.format)}: {records.count(chr(10))} records for {shard.lines}")
        write_shard(args.output, shard, args.format, records, [line for line, _ in failures])
        _count(tally, shard, failures)
        written += 1
        log.info(
            "%s written (%d of %d shards): lines %d-%d, %d failed",
            shard.output_name(args.format),
            written,
            len(todo),
            shard.first_line,
            shard.first_line + shard.lines - 1,
            len(failures),
        )
    if back:
        raise RuntimeError(f"{len(back)} shards came back incomplete")


def _count(tally: _Tally, shard: Shard, failures: list[tuple[int, str]], max_warnings: int = 20) -> None:
    tally.lines += shard.lines
    tally.now += shard.lines
    tally.failed += len(failures)
    for line, error in failures:
        tally.failed_lines.append(f"{shard.file.name}:{line}")
        if tally.warned < max_warnings:
            log.warning("%s:%d: %s", shard.file.name, line, error)
            tally.warned += 1
            if tally.warned == max_warnings:
                log.warning("further bad lines are not reported here; see the output records")


def _finish(tally: _Tally, elapsed: float) -> int:
    """Log the summary and return the exit status, as the single-machine CLI does."""
    rate = tally.now / elapsed if elapsed > 0 else 0.0
    log.info(
        "%d lines (%d translated now, %d failed) in %.1f s, %.1f lines/s",
        tally.lines,
        tally.now,
        tally.failed,
        elapsed,
        rate,
    )
    if tally.unused_terms:
        log.warning("%d glossary terms not used in the translations", tally.unused_terms)
    if tally.failed:
        shown = ", ".join(tally.failed_lines[:10]) + (" ..." if len(tally.failed_lines) > 10 else "")
        log.warning("%d of %d lines failed%s", tally.failed, tally.lines, f" ({shown})" if shown else "")
        return batch.EXIT_SOME_FAILED
    return batch.EXIT_OK


def _unreadable(error: Exception) -> UsageError:
    return UsageError(f"cannot read the input: {error}; give -i a readable FILE, DIRECTORY or quoted 'GLOB'")


def _first_line(error: BaseException) -> str:
    """The first line of a Ray error (its message goes on with the remote traceback)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
