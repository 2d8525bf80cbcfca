"""The releases a new model is compared with, rebuilt from git history.

Every shipped bundle was committed whole (`models/<direction>/`), so an earlier release is the
bundle as it stood at its release commit. The register gate (a new model must not be
significantly worse than the release it replaces on any kind of sentence) and the ensemble
of our own stages both need earlier releases beside the shipped one; home caches do not
survive between sessions, so they are rebuilt from the commits named here:

    python -m export.releases extract de-en/stage7 --out ~/.cache/crossalign/bundles/stage7
    python -m export.releases list

The commit is the last one that touched the bundle while it was that stage (stage 7's graphs
were re-exported by lever 23; stage 9's decoding gained the term bonus; stage 10 and en-de
stage 3 their rebuilt dictionaries and calibrations).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Release:
    direction: str  # "de-en" or "en-de": the bundle's folder under models/
    stage: str  # the name the training docs give it
    commit: str  # the last commit at which models/<direction>/ was this stage


RELEASES: dict[str, Release] = {
    release.direction + "/" + release.stage: release
    for release in (
        Release("de-en", "stage7", "3222764afba36f016e7452b0ccaf82a61bf9c799"),
        Release("de-en", "stage9", "7756369944187e25d6a7849e4e7a99807f1792ad"),
        Release("de-en", "stage10", "968b8d7d481724609c8ef633f5d38bd7cdb5406a"),
        Release("de-en", "stage12", "6b53dae2720023764efa11e12b7d3e3cf55bc2ec"),  # the soup of stages 10 and 9
        Release("en-de", "stage1", "51d2064de6c2470d861872e635195c85e5776e4c"),
        Release("en-de", "stage2", "6165a007695e4e63d6fc5093fa2dcb1c3dab503a"),
        Release("en-de", "stage3", "968b8d7d481724609c8ef633f5d38bd7cdb5406a"),
    )
}


def extract(name: str, out: Path, repo: Path = REPO) -> Path:
    """Write release `name` (a key of RELEASES) into `out` as a bundle directory, from git
    history; an `out` that already holds a bundle of that commit is left as it is."""
    if name not in RELEASES:
        raise SystemExit(f"unknown release {name!r}: one of {', '.join(RELEASES)}")
    release = RELEASES[name]
    stamp = out / ".release-commit"
    if stamp.is_file() and stamp.read_text().strip() == release.commit:
        return out
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", release.commit, f"models/{release.direction}"],
        check=True,
        capture_output=True,
    ).stdout
    out.mkdir(parents=True, exist_ok=True)
    prefix = f"models/{release.direction}/"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix) and "/" not in member.name[len(prefix) :]:
                (out / member.name[len(prefix) :]).write_bytes(tar.extractfile(member).read())
    stamp.write_text(release.commit + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m export.releases", description="earlier release bundles, rebuilt from git history"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the known releases and their commits")
    take = commands.add_parser("extract", help="write one release's bundle into a directory")
    take.add_argument("name", help="direction/stage, e.g. de-en/stage7 (see `list`)")
    take.add_argument("--out", type=Path, required=True, help="the bundle directory to write")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, release in RELEASES.items():
            print(f"{name}\t{release.commit}")
        return
    print(extract(args.name, args.out.expanduser()), file=sys.stderr)


if __name__ == "__main__":
    main()
