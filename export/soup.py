"""A weight soup: one model whose weights are the weighted mean of models fine-tuned from a
common ancestor (Wortsman et al. 2022, "Model soups"; WiSE-FT interpolates a fine-tuned model
with the one it started from). Stage 10 is stage 9 fine-tuned on software messages: the two
lie 10% apart (relative L2) in one basin, and their mean can keep what each learnt at one
model's cost, where an ensemble of the two costs two models at every step.

    python -m export.soup --member models/de-en=0.5 --member STAGE9_BUNDLE=0.5 --out RUN/final

The first member gives everything but the weights (config, tokenizer, dictionary, training
config): the soup is written as a checkpoint directory that `crossalign export` and
`export/release.sh` (as RUN/final) take. A member whose embedding has fewer rows (a model from
before pieces were appended) adds nothing to the rows it lacks; those rows are the weighted
mean of the members that have them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from data.files import BUNDLE_FILE, CONFIG_FILE, DICTIONARY_RECORD_FILE, MEMBER_CARD_FILE, SOUP_FILE, WEIGHTS_FILE

EMBEDDING = "embedding.weight"


def parse_member(text: str) -> tuple[Path, float]:
    """`DIR` or `DIR=WEIGHT` (weight 1.0 when left out)."""
    path, _, weight = text.rpartition("=") if "=" in text else (text, "", "1")
    try:
        value = float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--member {text!r}: the weight after '=' must be a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--member {text!r}: weights are not negative")
    return Path(path), value


def soup_state(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """The weighted mean of `states` (same names and shapes, except that the embedding
    [vocab, d_model] may have fewer rows in some), in float32. Rows a member lacks are the
    mean of the members that have them, their weights renormalised."""
    if not states or len(states) != len(weights) or sum(weights) <= 0:
        raise ValueError("a soup needs members with weights that sum above 0")
    names = list(states[0])
    for index, state in enumerate(states[1:], start=1):
        if set(state) != set(names):
            raise ValueError(f"member {index + 1} has other parameters than member 1: not one architecture")
    soup: dict[str, torch.Tensor] = {}
    for name in names:
        shapes = [state[name].shape for state in states]
        # Only the embedding may have fewer rows in a member; every other shape is one architecture's.
        if any(shape[1:] != shapes[0][1:] or (name != EMBEDDING and shape != shapes[0]) for shape in shapes):
            raise ValueError(f"{name}: shapes {[tuple(s) for s in shapes]} differ: not one architecture")
        total = torch.zeros((max(shape[0] for shape in shapes), *shapes[0][1:]), dtype=torch.float64)
        mass = torch.zeros((total.shape[0],) + (1,) * (total.dim() - 1), dtype=torch.float64)
        for state, weight in zip(states, weights, strict=True):
            rows = state[name].shape[0]
            total[:rows] += weight * state[name].double()
            mass[:rows] += weight
        soup[name] = (total / mass.clamp_min(1e-12)).float()
    return soup


def member_record(path: Path, weight: float) -> dict:
    """What soup.json says of a member: its directory, weight, and the commit of a release
    rebuilt by `python -m export.releases extract` (its `.release-commit` stamp)."""
    record: dict = {"model": str(path), "weight": weight}
    stamp = path / ".release-commit"
    if stamp.is_file():
        record["commit"] = stamp.read_text().strip()
    return record


def write_soup(members: list[tuple[Path, float]], out: Path) -> Path:
    """Write the soup of `members` ((model directory, weight), the first giving all but the
    weights) into the checkpoint directory `out`; returns `out`."""
    for path, _ in members:
        if not (path / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"{path}: no {WEIGHTS_FILE}; a member is a bundle or a run's final/ directory")
    base = members[0][0]
    configs = [json.loads((path / CONFIG_FILE).read_text()) for path, _ in members]
    for path, config in zip((p for p, _ in members), configs, strict=True):
        for key in ("d_model", "n_heads", "d_ff", "encoder_layers", "decoder_layers", "source_lang", "target_lang"):
            if config.get(key) != configs[0].get(key):
                raise ValueError(f"{path}: {key} {config.get(key)!r} is not the first member's {configs[0].get(key)!r}")
    states = [torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True) for path, _ in members]
    soup = soup_state(states, [weight for _, weight in members])
    out.mkdir(parents=True, exist_ok=True)
    measured_anew = {WEIGHTS_FILE, BUNDLE_FILE, "MODEL_CARD.md"}
    for item in base.iterdir():
        # Everything of the first member but its weights and what a release measures anew.
        if item.is_file() and item.name not in measured_anew and item.suffix != ".onnx":
            shutil.copy2(item, out / item.name)
    manifest = base / BUNDLE_FILE
    if manifest.is_file() and "dictionary" in (record := json.loads(manifest.read_text())):
        (out / DICTIONARY_RECORD_FILE).write_text(json.dumps(record["dictionary"], indent=2) + "\n")
    if (base / "MODEL_CARD.md").is_file():
        shutil.copy2(base / "MODEL_CARD.md", out / MEMBER_CARD_FILE)
    torch.save(soup, out / WEIGHTS_FILE)
    record = {"members": [member_record(path, weight) for path, weight in members]}
    (out / SOUP_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.soup",
        description="average the weights of models fine-tuned from one ancestor into one checkpoint directory",
    )
    parser.add_argument(
        "--member",
        type=parse_member,
        action="append",
        required=True,
        metavar="DIR[=WEIGHT]",
        help="a bundle or checkpoint directory and its weight (repeat; the first gives config, tokenizer, dictionary)",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="checkpoint directory to write (RUN/final for export/release.sh)"
    )
    args = parser.parse_args(argv)
    try:
        out = write_soup(args.member, args.out)
    except (ValueError, FileNotFoundError) as error:
        print(f"export.soup: {error}", file=sys.stderr)
        return 2
    weights = ", ".join(f"{path}={weight:g}" for path, weight in args.member)
    print(f"soup of {weights} written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
