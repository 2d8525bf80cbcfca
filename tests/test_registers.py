"""The release gate per register (export/registers.py): the kind of every gold pair, the
refusal of a model significantly worse on one register (p-values from sacreBLEU's paired
bootstrap, never written here), the pass of an equal one, the limits, and the command on
the shipped bundle with its cache."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from export import registers
from export.registers import (
    ALPHA,
    KINDS,
    Split,
    compare,
    gold_kinds,
    is_worse,
    read_kinds,
    refusals,
    register_table,
)
from seq2seq.analysis.aer import read_gold

ROOT = Path(__file__).resolve().parents[1]
GOLD = ROOT / "data" / "gold"
SHIPPED = ROOT / "models" / "de-en"


@pytest.fixture(scope="module")
def references() -> list[str]:
    """Real English sentences (the gold references) to score synthetic systems against."""
    return [pair.target for pair in read_gold(GOLD / "de-en.gold.tsv")]


def test_every_gold_pair_of_both_directions_has_one_kind() -> None:
    kinds = read_kinds()
    for name, german_side in (("de-en.gold.tsv", 0), ("en-de.gold.tsv", 1)):
        pairs = read_gold(GOLD / name)
        german = [(pair.source, pair.target)[german_side] for pair in pairs]
        assert len(gold_kinds(german, kinds, name)) == len(pairs)
        assert set(kinds) == {sentence.strip() for sentence in german}, "kinds.tsv lists a sentence not in the gold set"
    counts = Counter(kinds.values())
    assert set(counts) == set(KINDS)
    # The everyday register is large enough to tell a model's loss there from noise (issue #39).
    assert counts["everyday"] >= 180, counts


def test_a_gold_pair_without_a_kind_is_named() -> None:
    with pytest.raises(ValueError, match=r"pairs \[2\] have no kind"):
        gold_kinds(["Ich rufe dich morgen früh an.", "Ein neuer Satz."], read_kinds())


@pytest.mark.parametrize(
    "line, message",
    [
        ("everyday", "expected kind<TAB>German sentence"),
        ("poetry\tEin Satz.", "unknown kind 'poetry'"),
        ("news\tDas ist gut.", "'Das ist gut.' is listed twice"),
    ],
)
def test_kinds_reader_names_the_bad_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "kinds.tsv"
    path.write_text(f"# kinds\neveryday\tDas ist gut.\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3: {message}")):
        read_kinds(path)


def degraded(sentences: list[str]) -> list[str]:
    """A clearly worse system: every sentence loses its second half."""
    return [" ".join(s.split()[: max(1, len(s.split()) // 2)]) for s in sentences]


def test_a_system_clearly_worse_on_one_register_is_refused_there_only(references: list[str]) -> None:
    everyday, news = references[:80], references[80:160]
    baseline = {"everyday": degraded(everyday[:40]) + everyday[40:], "news": news}
    new = {"everyday": baseline["everyday"], "news": degraded(news)}
    results = [
        compare(f"gold {kind}", refs, {"new": new[kind], "old": baseline[kind]}, "new")
        for kind, refs in (("everyday", everyday), ("news", news))
    ]
    same, worse = results
    assert worse.scores["new"]["bleu"] < worse.scores["old"]["bleu"] - 10
    assert all(worse.comparisons[0].p_value[m] < ALPHA for m in ("bleu", "chrf"))
    assert same.comparisons[0].delta == {"bleu": 0.0, "chrf": 0.0}
    refused = refusals(results)
    assert [line.split(":")[0] for line in refused] == ["gold news", "gold news"]
    assert "BLEU" in refused[0] and "against old" in refused[0] and "chrF" in refused[1]


def test_equal_and_slightly_different_systems_pass(references: list[str]) -> None:
    refs = references[:120]
    baseline = degraded(refs[:60]) + refs[60:]
    # Identical output: sacreBLEU's bootstrap gives a zero difference a tiny p, so the sign decides.
    [identical] = compare("r", refs, {"new": baseline, "old": baseline}, "new").comparisons
    assert identical.delta == {"bleu": 0.0, "chrf": 0.0} and identical.p_value["bleu"] < ALPHA
    assert not is_worse(identical.delta["bleu"], identical.p_value["bleu"])
    # Two sentences a little worse out of 120: a loss, but not a significant one.
    nudged = list(baseline)
    nudged[70], nudged[71] = degraded(refs[70:72])
    result = compare("r", refs, {"new": nudged, "old": baseline}, "new")
    [comparison] = result.comparisons
    assert comparison.delta["bleu"] < 0 and comparison.p_value["bleu"] >= ALPHA
    assert refusals([result]) == []
    # Better than the baseline, significantly: no refusal either.
    better = compare("r", refs, {"new": refs, "old": baseline}, "new")
    assert better.comparisons[0].p_value["bleu"] < ALPHA and refusals([better]) == []


def test_p_is_never_rounded_across_the_level() -> None:
    assert registers.format_p(0.04995) == "0.04995" and registers.format_p(0.0504) == "0.050"
    assert registers.format_p(0.017) == "0.017" and registers.format_p(0.04995, alpha=0.01) == "0.050"


def test_the_significance_limit() -> None:
    assert not is_worse(-3.0, ALPHA)  # p at the level: not significant
    assert is_worse(-3.0, ALPHA - 1e-9)
    assert not is_worse(0.0, 0.001) and not is_worse(3.0, 0.001)
    assert is_worse(-0.01, 0.049, alpha=0.05) and not is_worse(-0.01, 0.049, alpha=0.01)


def test_table_marks_significant_losses_and_gains(references: list[str]) -> None:
    refs = references[:80]
    result = compare("gold news", refs, {"new": degraded(refs), "a": refs, "b": degraded(degraded(refs))}, "new")
    table = register_table([asdict(result)])
    header, rule, row = table.splitlines()
    assert header.startswith("| register | sentences | new BLEU / chrF | a BLEU / chrF | b BLEU / chrF |")
    assert "Δ BLEU (p) vs a" in header and "Δ chrF (p) vs b" in header
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:2] == ["gold news", "80"]
    assert cells[5].startswith("**-") and cells[7].startswith("*+"), cells  # worse than a, better than b


def test_registers_put_the_ding_splits_first_and_gold_by_kind() -> None:
    splits = [Split("valid", ("a", "b"), ("a", "b")), Split("gold", ("x", "y", "z"), ("x", "y", "z"))]
    found = registers.registers(splits, ["news", "everyday", "news"])
    assert [(r.name, r.rows) for r in found] == [
        ("Ding valid", (0, 1)),
        ("gold everyday", (1,)),
        ("gold news", (0, 2)),
    ]


def small_gold(tmp_path: Path) -> Path:
    """Two gold pairs of every kind, so the command runs in seconds."""
    kinds = read_kinds()
    lines = [line for line in (GOLD / "de-en.gold.tsv").read_text(encoding="utf-8").splitlines() if line]
    chosen = [next(line for line in lines if kinds[line.split("\t")[0]] == kind) for kind in KINDS]
    chosen += [next(line for line in reversed(lines) if kinds[line.split("\t")[0]] == kind) for kind in KINDS]
    path = tmp_path / "gold.tsv"
    path.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    return path


def test_the_command_on_the_shipped_bundle_caches_and_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    gold = small_gold(tmp_path)
    pairs = read_gold(gold)
    for name in ("valid", "test"):
        (data / f"{name}.tsv").write_text("".join(f"{p.source}\t{p.target}\tsentence\n" for p in pairs[:3]))
    cache, report = tmp_path / "cache", tmp_path / "registers.json"
    argv = ["--model", f"new={SHIPPED}", "--baseline", f"old={SHIPPED}", "--data", str(data), "--gold", str(gold)]
    argv += ["--cache", str(cache), "--json", str(report)]
    assert registers.main(argv) == 0
    record = json.loads(report.read_text())
    assert [r["register"] for r in record["registers"]] == ["Ding valid", "Ding test"] + [
        f"gold {label}" for label in KINDS.values()
    ]
    assert record["refusals"] == [] and record["baselines"] == ["old"]
    assert all(r["comparisons"][0]["delta"] == {"bleu": 0.0, "chrf": 0.0} for r in record["registers"])
    table = capsys.readouterr().out
    assert table.count("\n") == 2 + 2 + len(KINDS)
    # One bundle, three splits: three cached files, and a re-run translates nothing.
    assert len(list(cache.glob("*/*.json"))) == 3

    def no_translation(*args, **kwargs):
        raise AssertionError("translated although every translation is cached")

    monkeypatch.setattr("seq2seq.loading.translate_file", no_translation)
    assert registers.main(argv) == 0
    # A new bundle (another decoding, so another key) whose cached gold translations lost
    # their second halves: refused, naming its registers.
    worse = tmp_path / "worse"
    worse.mkdir()
    manifest = json.loads((SHIPPED / "bundle.json").read_text())
    manifest["decoding"]["beam_size"] = 3
    (worse / "bundle.json").write_text(json.dumps(manifest))
    for cached in cache.glob("*/*.json"):
        record = json.loads(cached.read_text())
        target = cache / registers.bundle_key(worse)[:16] / cached.name
        target.parent.mkdir(exist_ok=True)
        record["translations"] = ["Nothing."] * len(record["translations"])
        target.write_text(json.dumps(record))
    argv[1] = f"new={worse}"
    assert registers.main(argv) == 1
    refused = capsys.readouterr().err
    assert re.search(r"refused: gold \w+: BLEU -\d", refused), refused


def test_a_bundle_of_another_direction_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="translates en-de, not de-en"):
        registers.main(["--model", str(SHIPPED), "--baseline", str(ROOT / "models" / "en-de")])


def test_the_model_card_prints_the_register_table_and_the_gold_count(references: list[str]) -> None:
    from export.model_card import quality_section, registers_section

    refs = references[:60]
    result = compare("gold everyday", refs, {"new": refs, "shipped": degraded(refs)}, "new")
    record = {"model": "new", "baselines": ["shipped"], "alpha": ALPHA, "bootstrap_samples": 1000}
    record |= {"registers": [asdict(result)], "refusals": refusals([result])}
    section = registers_section(record)
    assert section.startswith("## Quality by register") and register_table(record["registers"]) in section
    assert "`shipped`" in section and "let this model ship" in section
    refused = registers_section(record | {"refusals": ["gold everyday: BLEU"]})
    assert "It refused this model: gold everyday: BLEU" in refused
    assert registers_section(None) == ""
    manifest = json.loads((SHIPPED / "data_manifest.json").read_text())
    quality = quality_section({"gold_bleu_beam4": 20.0, "gold_sentences": 341}, manifest)
    assert "| BLEU on the 341 gold sentences, beam 4 | 20.0 |" in quality and "(data/gold/, 341 pairs" in quality


@pytest.mark.parametrize("flag, value", [("--samples", "0"), ("--alpha", "0"), ("--alpha", "1")])
def test_a_bootstrap_without_resamples_or_a_level_outside_0_1_is_refused(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        registers.main(["--model", str(SHIPPED), flag, value])
    assert stopped.value.code == 2 and "--samples must be >= 1 and --alpha between 0 and 1" in capsys.readouterr().err
