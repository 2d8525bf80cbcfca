"""Weight soups (export/soup.py): the weighted mean of models fine-tuned from one ancestor,
written as a checkpoint directory that exports and releases like a trained one, with a model
card that says what it averages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SHIPPED_BUNDLE = REPO / "models" / "de-en"


def perturbed_copy(checkpoint: Path, out: Path, seed: int, vocab_rows: int | None = None) -> Path:
    """A copy of `checkpoint` whose weights moved by seeded noise (a sibling fine-tune), its
    embedding cut to `vocab_rows` rows if given (a model from before pieces were appended)."""
    shutil.copytree(checkpoint, out)
    state = torch.load(out / "model.pt", map_location="cpu", weights_only=True)
    generator = torch.Generator().manual_seed(seed)
    state = {name: tensor + 0.1 * torch.randn(tensor.shape, generator=generator) for name, tensor in state.items()}
    if vocab_rows is not None:
        state["embedding.weight"] = state["embedding.weight"][:vocab_rows].clone()
    torch.save(state, out / "model.pt")
    return out


def test_the_soup_is_the_weighted_mean_and_lacking_rows_come_from_the_members_that_have_them() -> None:
    from export.soup import soup_state

    a = {"embedding.weight": torch.full((4, 2), 1.0), "w": torch.tensor([0.0, 4.0])}
    b = {"embedding.weight": torch.full((3, 2), 5.0), "w": torch.tensor([8.0, 0.0])}
    soup = soup_state([a, b], [3.0, 1.0])
    assert torch.equal(soup["w"], torch.tensor([2.0, 3.0]))
    # Rows 0-2: (3*1 + 1*5) / 4; row 3, which b lacks: a's alone.
    assert torch.equal(soup["embedding.weight"], torch.tensor([[2.0, 2.0]] * 3 + [[1.0, 1.0]]))
    assert all(tensor.dtype == torch.float32 for tensor in soup.values())
    with pytest.raises(ValueError, match="w: shapes"):
        soup_state([a, b | {"w": torch.zeros(3)}], [1.0, 1.0])
    with pytest.raises(ValueError, match="other parameters"):
        soup_state([a, {"w": b["w"], "embedding.weight": b["embedding.weight"], "x": b["w"]}], [1.0, 1.0])
    with pytest.raises(ValueError, match="sum above 0"):
        soup_state([a, b], [0.0, 0.0])


def test_a_soup_of_two_siblings_loads_translates_and_records_its_members(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from toy import SENTENCES

    from seq2seq.loading import load_translator

    first = perturbed_copy(tiny_checkpoint, tmp_path / "first", seed=1)
    second = perturbed_copy(tiny_checkpoint, tmp_path / "second", seed=2, vocab_rows=20)
    (second / ".release-commit").write_text("968b8d7d481724609c8ef633f5d38bd7cdb5406a\n")  # from export.releases
    (first / "MODEL_CARD.md").write_text("# card\n\n## Training\n\n- 900 steps\n\n### Training curve\n\n## Data\n")
    out = tmp_path / "run" / "final"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "export.soup",
            "--member",
            f"{first}=0.75",
            "--member",
            f"{second}=0.25",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    soup = torch.load(out / "model.pt", map_location="cpu", weights_only=True)
    a, b = (torch.load(path / "model.pt", map_location="cpu", weights_only=True) for path in (first, second))
    name = "decoder_layers.0.cross_attention.w_q.weight"
    assert torch.allclose(soup[name], 0.75 * a[name] + 0.25 * b[name], atol=1e-6)
    rows = a["embedding.weight"].shape[0]
    assert soup["embedding.weight"].shape[0] == rows
    assert torch.allclose(soup["embedding.weight"][20:], a["embedding.weight"][20:])  # only the first has them
    # A checkpoint directory like a trained one: the model loads and translates, with a map.
    result = load_translator(out, "torch").translate(SENTENCES[0])
    assert result.target_tokens and result.attention.shape[2:] == (
        len(result.target_tokens) + 1,
        len(result.source_tokens) + 1,
    )
    assert (out / "spm.model").is_file() and not (out / "MODEL_CARD.md").exists()
    record = json.loads((out / "soup.json").read_text())
    assert [(Path(m["model"]).name, m["weight"]) for m in record["members"]] == [("first", 0.75), ("second", 0.25)]
    assert "commit" not in record["members"][0] and record["members"][1]["commit"].startswith("968b8d7d48")
    assert (out / "member_card.md").read_text().startswith("# card")


def test_members_that_are_not_one_architecture_are_refused_in_one_line(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from export.soup import main

    first = perturbed_copy(tiny_checkpoint, tmp_path / "first", seed=1)
    other = perturbed_copy(tiny_checkpoint, tmp_path / "other", seed=2)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"decoder_layers": config["decoder_layers"] + 1}))

    def soup(*members: str) -> tuple[int, str]:
        """The command in this process (the subprocess run above covers its start): status, stderr."""
        arguments = ["--out", str(tmp_path / "out")]
        for member in members:
            arguments += ["--member", member]
        try:
            status = main(arguments)
        except SystemExit as stop:  # argparse's refusals
            status = stop.code
        return status, capsys.readouterr().err

    status, said = soup(str(first), str(other))
    assert status == 2 and "decoder_layers" in said and len(said.strip().splitlines()) == 1
    status, said = soup(str(first), str(tmp_path / "nowhere"))
    assert status == 2 and "no model.pt" in said
    status, said = soup(f"{first}=half")
    assert status == 2 and "must be a number" in said
    assert not (tmp_path / "out").exists()


def test_a_soups_card_names_its_members_and_carries_its_first_members_training(tmp_path: Path) -> None:
    from export.model_card import write_card

    bundle, run, data = tmp_path / "de-en", tmp_path / "run", tmp_path / "data"
    for directory in (bundle, run / "final", data):
        directory.mkdir(parents=True)
    shipped = json.loads((SHIPPED_BUNDLE / "bundle.json").read_text())
    shutil.copy2(SHIPPED_BUNDLE / "config.json", bundle / "config.json")
    shutil.copy2(SHIPPED_BUNDLE / "training_curve.png", run / "final" / "training_curve.png")
    shutil.copy2(SHIPPED_BUNDLE / "MODEL_CARD.md", run / "final" / "member_card.md")
    members = [
        {"model": str(Path.home() / "bundles" / "de-en-stage10"), "weight": 1.0, "commit": "968b8d7d481724609c8e"},
        {"model": "B/de-en-stage9", "weight": 1.0},
    ]
    (run / "final" / "soup.json").write_text(json.dumps({"members": members}))
    (data / "manifest.json").write_text((SHIPPED_BUNDLE / "data_manifest.json").read_text())
    card = write_card(bundle, run, data, shipped["metrics"], "python -m export.soup --member ...").read_text()
    assert "A weight soup" in card and "`B/de-en-stage9`, weight 0.50\n" in card
    assert "`~/bundles/de-en-stage10`, weight 0.50 (the release bundle of commit 968b8d7d48)" in card
    assert "python -m export.soup --member ..." in card
    # The member's training section, one heading level down, its curve beside the card.
    assert "### How its first member was trained" in card and "#### Training curve" in card
    assert (bundle / "training_curve.png").read_bytes() == (SHIPPED_BUNDLE / "training_curve.png").read_bytes()
    assert card.count("\n## Training") == 1 and "\n## Data and license" in card
    assert "trained (guided) to align" in card


def test_the_export_of_a_soup_records_how_its_term_index_was_built(tiny_bundle: Path, tmp_path: Path) -> None:
    """A rebuilt term index is described in its bundle's manifest (`dictionary`); a soup of the
    bundle keeps the record beside the index, and the soup's export writes it again."""
    from toy import SENTENCES

    from data.dictionary import write_term_index
    from export.exporter import export_model
    from seq2seq.runtime.bundle import load_bundle_manifest, set_dictionary_file

    bundle = Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))
    write_term_index([("hund", 1, "dog")], bundle / "dictionary.tsv.gz")
    described = {"indexed_forms": 1, "sense": {"rule": "evidence"}, "data": "toy"}
    set_dictionary_file(bundle, described)
    soup = write_soup_of(bundle, tmp_path / "soup")
    assert json.loads((soup / "dictionary.json").read_text()) == described
    export_model(soup, tmp_path / "models" / "de-en", parity_sentences=SENTENCES[:1])
    assert load_bundle_manifest(tmp_path / "models" / "de-en").manifest["dictionary"] == described
    # A bundle whose index was never rebuilt has no record, and its soup none to write.
    plain = write_soup_of(Path(tiny_bundle), tmp_path / "plain")
    assert not (plain / "dictionary.json").exists()


def write_soup_of(bundle: Path, out: Path) -> Path:
    from export.soup import write_soup

    return write_soup([(bundle, 1.0), (bundle, 1.0)], out)
