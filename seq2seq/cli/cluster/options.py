"""The cluster mode's flags (`crossalign translate --ray`) and their checks.

No Ray here: `crossalign translate` registers these flags on every run, and Ray is imported
only when `--ray` is given (seq2seq.cli.cluster.run).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from seq2seq.cli import batch

LOCAL = "auto"  # --ray auto: a local Ray on this machine
DEFAULT_SHARD_LINES = 10_000
# A small input is cut finer than --shard-lines: about this many shards per actor, so that
# every actor has work and the last shards end close together.
SHARDS_PER_ACTOR = 8
DEFAULT_ACTOR_CPUS = 1.0


@dataclass(frozen=True)
class ClusterOptions:
    """What `--ray` and its flags ask for."""

    address: str  # LOCAL, or the address of a running cluster's head (host:port)
    actors: int | None = None  # None: the cluster's CPUs / actor_cpus
    actor_cpus: float = DEFAULT_ACTOR_CPUS  # Ray CPUs per actor = its onnxruntime intra-op threads
    shard_lines: int | None = None  # None: DEFAULT_SHARD_LINES, fewer for a small input

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClusterOptions:
        return cls(args.ray, args.actors, args.actor_cpus or DEFAULT_ACTOR_CPUS, args.shard_lines)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The group `cluster (Ray Data)` of `crossalign translate`."""
    group = parser.add_argument_group(
        "cluster (Ray Data)",
        "translate files on a Ray cluster, or on a local Ray (the extra: pip install 'crossalign[cluster]'); "
        "-i is a file, a directory or a quoted glob of text, JSONL or Parquet (.parquet) shards, -o a "
        "directory that receives one output shard per input shard of --shard-lines, with a .done marker each",
    )
    group.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="run on Ray Data: `auto` starts a local Ray on this machine; ADDRESS (host:port, as "
        "`ray start --head` prints it) joins that cluster, from one of its nodes",
    )
    group.add_argument(
        "--actors",
        type=int,
        help="translators, each loading the model once (default: the cluster's CPUs / --actor-cpus)",
    )
    group.add_argument(
        "--actor-cpus",
        type=float,
        help=f"Ray CPUs per actor, which are its onnxruntime threads unless --threads says (default "
        f"{DEFAULT_ACTOR_CPUS:g})",
    )
    group.add_argument(
        "--shard-lines",
        type=int,
        help=f"lines per output shard, the unit that --resume keeps or redoes (default {DEFAULT_SHARD_LINES:,}; "
        f"a small input is cut into about {SHARDS_PER_ACTOR} shards per actor)",
    )


def problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the cluster flags, each naming the fix; none without them."""
    if args.ray is None:
        given = [flag for flag in ("actors", "actor_cpus", "shard_lines") if getattr(args, flag) is not None]
        return [f"--{flag.replace('_', '-')} needs --ray" for flag in given]
    found = []
    if not args.input:
        found.append("--ray reads files: give -i FILE, DIRECTORY or a quoted 'GLOB'")
    if not args.output:
        found.append("--ray writes its shards into a directory: give -o DIRECTORY")
    if args.format not in batch.OUTPUT_FORMATS:
        found.append(f"--ray translates lines: --format {', '.join(batch.OUTPUT_FORMATS)}")
    if args.heatmaps is not None:
        found.append("--heatmaps is not available with --ray (run the single-machine CLI for the maps' images)")
    if args.workers != 1:
        found.append("--workers is the single-machine mode: with --ray, --actors sets the translators")
    if args.actors is not None and args.actors < 1:
        found.append("--actors must be at least 1")
    if args.actor_cpus is not None and not args.actor_cpus > 0:
        found.append("--actor-cpus must be positive")
    if args.shard_lines is not None and args.shard_lines < 1:
        found.append("--shard-lines must be at least 1")
    return found
