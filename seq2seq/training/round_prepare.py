"""Here, before a GPU round's one call (`python -m seq2seq.training.gpu_round prepare`): every
CPU step, so a session that is lent a GPU runs one command and then the call it prints.

1. The data: the shipped de-en model's (`DATA_DIR`, docs/training.md "More sentences:
   translated software messages"), rebuilt when missing (`crossalign data catalogs`, then
   `data prepare` with the student's tokenizer; minutes); with `--hints` / `--links` its
   hint candidates and word links too, when missing (the student's recipe uses them when
   the data has them; eflomal over the whole corpus is slow).
2. `pack`: the data and the served-size student into `PACK_DIR` (ignored by git, so it
   travels only as a carried path).
3. models/ moved aside (`aside_dir`): the release bundles are ~86 MB, the round needs none
   of them, and the tree that travels may hold 64 MiB. `restore` moves them back.
4. The tree that travels measured the way the device tool counts it (its README,
   "Limits"): tracked files and untracked files git does not ignore, `shared/` when the
   checkout has one, and the carried paths; over `TREE_BYTES`, it names the largest files.
5. The device call printed: its command, carry and timeout_s, and what to run after it.

The device sends the checkout the session was started in, so run this there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from seq2seq.training.round_files import pack

MiB = 1024 * 1024
TREE_BYTES = 64 * MiB  # the working tree that travels, carried paths included
CACHE = Path("~/.cache/crossalign").expanduser()
DATA_DIR = CACHE / "data" / "ding8k-po"
CATALOGS = CACHE / "catalogs" / "de"
STUDENT = Path("models/de-en")
PACK_DIR = "work/gpu"  # relative to the checkout; work/ is ignored
TIMEOUT_S = 600  # the device's cap on one command; the round's own deadline is 8.5 minutes
DEVICE_COMMAND = (
    'PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30 python3 -m seq2seq.training.gpu_round run --pack {pack} --out "$OUT"'
)


def checkout_root() -> Path:
    found = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip())


def aside_dir(repo: Path) -> Path:
    """Where `prepare` puts the checkout's models/ (outside it, one folder per checkout)."""
    return CACHE / "models-aside" / re.sub(r"[^A-Za-z0-9._-]", "_", str(repo.resolve()).strip("/"))


def data_commands(data_dir: Path, tokenizer: Path, hints: bool, links: bool) -> list[list[str]]:
    """The commands that build what `data_dir` lacks of the round's data."""
    cli = [sys.executable, "-m", "seq2seq.cli", "data"]
    commands = []
    if not (data_dir / "train.tsv").is_file():
        if not CATALOGS.is_dir():
            commands.append(cli + ["catalogs", "--out", str(CATALOGS)])
        commands.append(
            cli
            + ["prepare", "--out", str(data_dir), "--tokenizer", str(tokenizer), "--max-phrases", "-1"]
            + ["--extra-corpus", f"gettext:{CATALOGS}"]
        )
    if links and not (data_dir / "eflomal.train.pharaoh").is_file():
        commands.append(
            [sys.executable, "-m", "export.eflomal_baseline", "--seed", "1", "--train", str(data_dir / "train.tsv")]
            + ["--train-out", str(data_dir / "eflomal.train.pharaoh")]
        )
    if hints and not (data_dir / "hints.train.jsonl").is_file():
        commands.append(cli + ["hints", "--data-dir", str(data_dir)])
    return commands


def travelling_files(repo: Path, carry: list[str]) -> dict[str, int]:
    """Every file the device tool sends from `repo` with `carry`, and its bytes: the tracked and
    the untracked-not-ignored files in the working tree (a link as a link), `shared/` when
    the checkout has one, and every file under the carried paths. Nested repositories travel
    without their files (git lists them as folders)."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8", "surrogateescape")
    sizes = {}
    for name in filter(None, listed.split("\0")):
        path = repo / name
        if path.is_symlink():
            sizes[name] = len(os.readlink(path))
        elif path.is_file():
            sizes[name] = path.stat().st_size
    for root in ["shared", *carry]:
        base = repo / root
        for path in [base] if base.is_file() else sorted(base.rglob("*")):
            if path.is_file() and not path.is_symlink():
                sizes[str(path.relative_to(repo))] = path.stat().st_size
    return sizes


def check_tree(repo: Path, carry: list[str]) -> int:
    """The bytes that travel; raises naming the largest files when they exceed TREE_BYTES."""
    sizes = travelling_files(repo, carry)
    total = sum(sizes.values())
    if total > TREE_BYTES:
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:8]
        named = ", ".join(f"{name} ({size / MiB:.1f} MiB)" for name, size in largest)
        raise ValueError(
            f"the tree that travels is {total / MiB:.1f} MiB, over {TREE_BYTES / MiB:.1f} MiB; largest: {named}"
        )
    return total


def device_call(pack_dir: str) -> dict:
    """The arguments of the device tool's `run` for the round."""
    return {"command": DEVICE_COMMAND.format(pack=pack_dir), "carry": [pack_dir], "timeout_s": TIMEOUT_S}


def prepare(
    repo: Path,
    data_dir: Path = DATA_DIR,
    student: Path = STUDENT,
    pack_dir: str = PACK_DIR,
    hints: bool = False,
    links: bool = False,
) -> dict:
    """Steps 1-4 of the module docstring in `repo`; returns the device call (step 5) with the
    tree's bytes. Run again (after a failed call, say), it finds models/ already aside and
    reads the student from there."""
    models, aside = repo / "models", aside_dir(repo)
    if models.exists() and aside.exists():
        raise ValueError(f"{aside} exists: an earlier prepare moved models/ there; `gpu_round restore` first")
    if not student.is_absolute():
        in_models = student.parts[0] == "models" and not models.exists() and aside.exists()
        student = aside.joinpath(*student.parts[1:]) if in_models else repo / student
    for command in data_commands(data_dir, student / "spm.model", hints, links):
        print("$", " ".join(command), flush=True)
        subprocess.run(command, cwd=repo, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    ignored = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", pack_dir], check=False)
    if ignored.returncode != 0:
        raise ValueError(f"{pack_dir} is not ignored by git: the call carries it, so git must ignore it")
    pack(data_dir, repo / pack_dir, student)
    if models.exists():
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(models, aside)
    call = device_call(pack_dir)
    call["tree_bytes"] = check_tree(repo, call["carry"])
    return call


def restore(repo: Path) -> Path | None:
    """models/ back into `repo` from where `prepare` moved it; None if nothing was aside."""
    aside = aside_dir(repo)
    if not aside.exists():
        return None
    if (repo / "models").exists():
        raise ValueError(f"{repo / 'models'} exists beside {aside}: compare them and move one by hand")
    shutil.move(aside, repo / "models")
    return repo / "models"


def add_prepare_arguments(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "prepare", help="here: every CPU step before the device call, which it prints (run it in the checkout)"
    )
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help=f"rebuilt when missing (default {DATA_DIR})")
    parser.add_argument("--student", type=Path, default=STUDENT, help=f"the served-size model (default {STUDENT})")
    parser.add_argument("--pack", default=PACK_DIR, help=f"the carried folder, in the checkout (default {PACK_DIR})")
    parser.add_argument("--hints", action="store_true", help="build the data's hint candidates when missing")
    parser.add_argument("--links", action="store_true", help="build its word links when missing (eflomal: slow)")


def prepare_command(args: argparse.Namespace) -> int:
    repo = checkout_root()
    try:
        call = prepare(repo, args.data_dir, args.student, args.pack, args.hints, args.links)
    except (ValueError, subprocess.CalledProcessError) as error:
        print(f"gpu_round prepare: {error}", file=sys.stderr)
        return 1
    tree = call.pop("tree_bytes")
    print(f"\nthe tree that travels: {tree / MiB:.1f} MiB of {TREE_BYTES // MiB}; models/ is at {aside_dir(repo)}")
    print("\nNow call the device tool's `run` with exactly:\n" + json.dumps(call, indent=1))
    print(
        "\nThen, whatever it returned:\n"
        "  python -m seq2seq.training.gpu_round restore\n"
        f"  python -m seq2seq.training.gpu_round unpack --parts FILES_AT --pack {args.pack} "
        "--out ~/.cache/crossalign/runs/gpu-1\n"
        "round.json (in FILES_AT) has every phase's figures, or the phase that failed and its traceback: "
        "a failure in the preflight leaves time for a second call."
    )
    return 0


def restore_command() -> int:
    restored = restore(checkout_root())
    print(restored if restored else "nothing was aside")
    return 0
