"""Write the release bundle's MODEL_CARD.md and training-curve plot.

    python -m export.model_card --bundle models/de-en --run work/release \
        --data work/ding8k --metrics metrics.json

`--metrics` is the JSON that `crossalign eval --json` prints (test split BLEU/chrF); more
files can be merged in (e.g. an int8 comparison). Torch-free.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from data.files import CONFIG_FILE, MEMBER_CARD_FILE, SOUP_FILE
from export.registers import register_table
from seq2seq.core.config import SEARCH_FIELDS

QUALITY_LABELS = {
    "test_bleu_beam4": "BLEU, beam 4",
    "test_chrf_beam4": "chrF, beam 4",
    "test_bleu_greedy": "BLEU, greedy",
    "test_chrf_greedy": "chrF, greedy",
    "test_length_ratio_beam4": "length ratio (hypothesis / reference), beam 4",
    "gold_bleu_beam4": "BLEU on the {gold} gold sentences, beam 4",
    "gold_chrf_beam4": "chrF on the {gold} gold sentences, beam 4",
    "gold_length_ratio_beam4": "length ratio on the gold sentences, beam 4",
    "gold_aer_default_map": "alignment error rate (AER), default map",
    "gold_precision_default_map": "alignment precision, default map",
    "gold_recall_default_map": "alignment recall, default map",
    "gold_aer_eflomal_baseline": "AER of eflomal (statistical baseline), same gold set",
}


def read_history(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines() if line.strip()]


def joined_history(runs: list[Path]) -> list[dict]:
    """The validation entries of runs that continue one another as one curve, every entry
    naming its stage (1, 2, ...). A run started `--init-from` the previous one's weights is a
    new stage: its steps and minutes count on from the end of the previous run. A run without
    `init_from` resumed a checkpoint of the previous one (a cooldown branch): the same stage,
    its steps and minutes already counting on, the previous run's entries from its first step
    on (where that run went on past the branch point) left out."""
    joined: list[dict] = []
    stage = 0
    for run in runs:
        entries = read_history(run)
        config = read_train_config(run)
        branch = bool(joined and entries and config) and not config.get("init_from")
        if branch:
            joined = [entry for entry in joined if entry["step"] < entries[0]["step"]]
        else:
            stage += 1
        step_offset = 0 if branch or not joined else joined[-1]["step"]
        minute_offset = 0.0 if branch or not joined else joined[-1]["minutes"]
        joined += [
            entry
            | {
                "step": entry["step"] + step_offset,
                "stage": stage,
                "minutes": round(entry["minutes"] + minute_offset, 2),
            }
            for entry in entries
        ]
    return joined


def read_train_config(run: Path) -> dict:
    path = run / "train_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


LANGUAGE_NAMES = {"de": "German", "en": "English"}


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def plot_curve(history: list[dict], out: Path, direction: str = "de-en") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, loss_axis = plt.subplots(figsize=(7, 4), dpi=110)
    loss_axis.plot(steps, [h["train_loss"] for h in history], label="train loss (label-smoothed)", color="#1f77b4")
    loss_axis.plot(steps, [h["valid_loss"] for h in history], label="valid loss (NLL)", color="#ff7f0e")
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("loss per target token")
    bleu_axis = loss_axis.twinx()
    bleu_axis.plot(
        steps,
        [h.get("valid_bleu", 0) for h in history],
        label="valid BLEU (greedy)",
        color="#2ca02c",
        marker="o",
        markersize=3,
    )
    bleu_axis.set_ylabel("BLEU")
    lines = loss_axis.get_lines() + bleu_axis.get_lines()
    for before, after in zip(history, history[1:]):
        if after.get("stage", 1) != before.get("stage", 1):
            loss_axis.axvline(before["step"], color="#888888", linestyle=":", linewidth=1)
            loss_axis.annotate(
                f"stage {after['stage']}",
                (before["step"], loss_axis.get_ylim()[1]),
                fontsize=8,
                color="#555555",
                ha="left",
                va="top",
                xytext=(3, -3),
                textcoords="offset points",
            )
    loss_axis.legend(lines, [line.get_label() for line in lines], loc="center right", fontsize=8)
    loss_axis.set_title(f"crossalign {direction} training curve")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def guided_line(train_config: dict, config: dict) -> str:
    if not train_config.get("guided_alignment"):
        return ""
    return (
        f"\n- Guided alignment (Garg et al. 2019): head {train_config['guided_head']} of decoder layer "
        f"{config['alignment_layer']} supervised with eflomal's grow-diag-final links of the training corpus "
        f"(`{Path(train_config['guided_alignment']).name}`), loss weight {train_config['guided_weight']}."
    )


def write_card(
    bundle: Path,
    run: Path,
    data: Path,
    metrics: dict,
    command: str,
    notes: str = "",
    earlier_runs: tuple[Path, ...] = (),
    registers: dict | None = None,
) -> Path:
    """Write `bundle/MODEL_CARD.md` and `bundle/training_curve.png`; returns the card's path.

    The curve joins `earlier_runs` (oldest first) and `run`, the stages of one model;
    `registers` is the register gate's JSON (`python -m export.registers --json`), if it ran.
    """
    config = json.loads((bundle / CONFIG_FILE).read_text())
    source, target = config.get("source_lang", "de"), config.get("target_lang", "en")
    manifest = json.loads((data / "manifest.json").read_text())
    soup_dir = run / "final"
    if (soup_dir / SOUP_FILE).is_file():
        # A weight soup (export/soup.py) was not trained: its card says what it averages and
        # carries its first member's training section and curve.
        member_card = (soup_dir / MEMBER_CARD_FILE).read_text()
        shutil.copy2(soup_dir / "training_curve.png", bundle / "training_curve.png")
        training = soup_section(json.loads((soup_dir / SOUP_FILE).read_text()), member_card, command)
        train_config = {"guided_alignment": "Guided alignment" in member_card}
    else:
        history = joined_history([*earlier_runs, run])
        plot_curve(history, bundle / "training_curve.png", f"{source}-{target}")
        train_config = json.loads((run / "train_config.json").read_text())
        training = training_section(history, train_config, config, manifest, command)
    card = (
        INTRODUCTION.format(
            direction=f"{source}-{target}",
            article="An" if language_name(source)[0] in "AEIOU" else "A",
            source=language_name(source),
            target=language_name(target),
            corpora=corpora_named(manifest),
        )
        + quality_section(metrics, manifest, language_name(source), language_name(target), f"{source}-{target}")
        + registers_section(registers)
        + model_section(config)
        + training
        + notes_section(notes)
        + data_section(manifest)
        + limitations_section(train_config, language_name(source), language_name(target))
    )
    path = bundle / "MODEL_CARD.md"
    path.write_text(card)
    return path


INTRODUCTION = """# crossalign {direction} — model card

{article} {source}→{target} transformer trained by crossalign on {corpora}; every translation
comes with its cross-attention alignment map.

"""


def decoding_line(metrics: dict) -> str:
    """The search the figures were measured with: the bundle's `decoding`, which it serves (a
    release before the section recorded beam and length penalty only)."""
    decoding = metrics.get("decoding")
    if not decoding:
        return ""
    parts = [
        f"beam {decoding['beam_size']}",
        f"length penalty {decoding['length_penalty']} (chosen on the valid split; the release script's "
        "`valid_length_penalty.jsonl`)",
    ]
    if "coverage_penalty" in decoding:
        parts.append(f"coverage penalty {decoding['coverage_penalty']}")
    if "no_repeat_ngram_size" in decoding:
        n = decoding["no_repeat_ngram_size"]
        parts.append(f"no repeated {n}-gram of pieces" if n else "no repetition guard")
    if decoding.get("dictionary_hints"):
        parts.append(f"dictionary hints for source words seen at most {decoding.get('hint_max_count')} times")
    if decoding.get("term_bonus"):
        parts.append(
            f"a term bonus of {decoding['term_bonus']} per glossary-term piece (no figure here has a glossary)"
        )
    served = (
        " The bundle serves these (bundle.json `decoding`): a translation that does not set them gets them."
        if set(SEARCH_FIELDS) <= set(decoding)
        else ""
    )
    return f"\nDecoding: {', '.join(parts)}.{served}\n"


def precision_line(metrics: dict, direction: str = "de-en") -> str:
    """Which graphs the figures are of, and the other precision's figures (release.sh GRAPHS=int8)."""
    fp32 = metrics.get("fp32")
    if metrics.get("graphs") != "int8" or not fp32:
        return ""
    return (
        "\nThe bundle serves **int8 graphs** (the MatMul weights quantized to int8, their inputs with "
        "activation scales calibrated once on the valid sources, so a translation does not depend on what "
        "else is in its batch: export/calibrate.py), and the "
        f"figures above are theirs. The fp32 graphs of the same weights measure test BLEU "
        f"{fp32['test_bleu_beam4']} / chrF {fp32['test_chrf_beam4']} (greedy {fp32['test_bleu_greedy']} / "
        f"{fp32['test_chrf_greedy']}), gold BLEU {fp32['gold_bleu_beam4']} / chrF {fp32['gold_chrf_beam4']}, "
        f"gold AER {fp32['gold_aer_default_map']}; int8 ships because it loses at most 0.3 test BLEU and is "
        "faster (docs/performance.md, lever 3). Only one precision fits the bundle budget; "
        f"`crossalign export models/{direction} --in-place --graphs int8 fp32` rebuilds the fp32 graphs from "
        "model.pt (needs torch).\n"
    )


def quality_section(
    metrics: dict, manifest: dict, source: str = "German", target: str = "English", direction: str = "de-en"
) -> str:
    gold = metrics.get("gold_sentences", "?")  # every release records it
    quality_rows = "\n".join(
        f"| {label.format(gold=gold)} | {metrics[key]} |" for key, label in QUALITY_LABELS.items() if key in metrics
    )
    signatures = "\n".join(
        f"{name}: {metrics[name]}" for name in ("bleu_signature", "chrf_signature") if name in metrics
    )
    return f"""## Measured quality (held-out test split, {metrics.get("test_sentences", manifest["counts"]["test"]["total"])} sentences)

| metric | value |
|---|---|
{quality_rows}

sacreBLEU signatures:

```
{signatures}
```

AER is measured on the project's hand-aligned gold set (data/gold/, {gold} pairs, sure and
possible links) with the bundle's default alignment source; lower is better. The same {gold}
sentences, read {source}→{target} with their {target} references, give the gold-set
BLEU/chrF.
{decoding_line(metrics)}{precision_line(metrics, direction)}
Test sentences are Ding example sentences whose source never occurs in training
(split by sha256 of the casefolded source). They are short, idiomatic dictionary examples
with a single reference, which makes BLEU harsh.

"""


def registers_section(registers: dict | None) -> str:
    """The register gate's table (export/registers.py) and its verdict; empty if it did not run."""
    if not registers or not registers.get("registers"):
        return ""
    refused = registers.get("refusals") or []
    verdict = (
        "It refused this model: " + "; ".join(refused) + "."
        if refused
        else "No register is significantly worse, so the gate let this model ship."
    )
    return f"""## Quality by register (the release gate)

BLEU / chrF of this model (`{registers["model"]}`) and of the {"release" if len(registers["baselines"]) == 1 else "releases"}
it was measured against ({", ".join(f"`{name}`" for name in registers["baselines"])}) on each kind of sentence: the Ding valid
and test splits, and the gold set by kind (data/gold/kinds.tsv). Each bundle translates with its
own decoding and graphs; Δ is this model minus the other, p sacreBLEU's paired bootstrap
resampling ({registers["bootstrap_samples"]} resamples, two-sided). A loss with p <
{registers["alpha"]} (bold) refuses a release (export/registers.py); a gain with p < {registers["alpha"]}
is in italics. {verdict}

{register_table(registers["registers"], registers["alpha"])}

"""


def model_section(config: dict) -> str:
    return f"""## Model

- Encoder–decoder transformer, pre-LN, sinusoidal positions, tied embeddings:
  d_model {config["d_model"]}, {config["n_heads"]} heads, d_ff {config["d_ff"]},
  {config["encoder_layers"]} encoder + {config["decoder_layers"]} decoder layers, vocabulary {config["vocab_size"]}
  (joint SentencePiece unigram).
- Default alignment source: decoder layer {config["alignment_layer"]} (from the end when negative),
  heads {config["alignment_heads"] or "mean of all"}{", read with the step shift (the row where the target token is the decoder input, Chen et al. 2020)" if config.get("alignment_step_shift") else ""}.

"""


# What each kind of extra corpus is, in the card's words: (its name, its license line).
EXTRA_KINDS = {
    "gettext": (
        "translated software messages (gettext catalogs)",
        "translated messages of Debian packages (`crossalign data catalogs`), each under its program's license "
        "(mostly GPL and LGPL; LibreOffice MPL-2.0)",
    ),
    "descriptions": (
        "translated Debian package descriptions",
        "Debian package descriptions and their translations by Debian's Description Translation Project "
        "(`crossalign data descriptions`), each under its package's license",
    ),
}


def extra_kinds(manifest: dict) -> list[str]:
    return list(dict.fromkeys(spec.split(":", 1)[0] for spec in manifest.get("extra_corpora") or []))


def corpora_named(manifest: dict) -> str:
    named = [EXTRA_KINDS[kind][0] for kind in extra_kinds(manifest) if kind in EXTRA_KINDS]
    if not named:
        return "the Ding corpus"
    return "the Ding corpus" + "".join(", " + name for name in named[:-1]) + " and " + named[-1]


def data_sources(manifest: dict) -> str:
    """The corpora a data directory was prepared from, with what each added (`--extra-corpus`)."""
    extra = manifest.get("extra_corpora") or []
    if not extra:
        return manifest["corpus"]
    added, tags = manifest.get("extra_added") or {}, manifest.get("extra_tags") or {}

    def named(spec: str) -> str:
        count = f": {added[spec]} pairs" if spec in added else ""
        tag = f", sources tagged `{tags[spec]}`" if spec in tags else ""
        return spec.split(":", 1)[0] + " (" + spec.rstrip("/").rsplit("/", 1)[-1] + count + tag + ")"

    kinds = ", ".join(named(spec) for spec in extra)
    return (
        f"{manifest['corpus']}, with training pairs only from {kinds} ({manifest.get('extra_pairs', '?')} pairs; "
        "no held-out or gold sentence among them)"
    )


def data_mix(train_config: dict) -> str:
    share = train_config.get("phrase_share", 0.0)
    if share:
        return f"and, each epoch, a fresh sample making up {share:.0%} of its target tokens from the"
    return f"(upsampled x{train_config['sentence_upsample']}) and"


def schedule(train_config: dict) -> str:
    """The learning-rate schedule in words (seq2seq.training.train.learning_rate)."""
    words = f"peak lr {train_config['lr']}, {train_config['warmup_steps']} warmup steps then inverse-sqrt decay"
    cooldown = train_config.get("cooldown_steps", 0)  # absent from runs before the option
    if cooldown:
        words += f", falling linearly to zero over the last {cooldown} steps (to step {train_config['max_steps']})"
    return words


def bleu_sentences(train_config: dict) -> str:
    count = train_config["valid_bleu_sentences"]
    return "the whole valid split" if count < 0 else f"{count} sent."


def training_section(history: list[dict], train_config: dict, config: dict, manifest: dict, command: str) -> str:
    last = history[-1]
    rows = "\n".join(
        f"| {h['stage']} | {h['step']} | {h['epoch']} | {h['minutes']} | {h['train_loss']} | {h['valid_loss']} | {h.get('valid_bleu', '')} | {h['tokens_per_s']} |"
        for h in history
    )
    return f"""## Training

- Data: {data_sources(manifest)} — {manifest["counts"]["train"].get("sentence", 0)} sentence pairs
  {data_mix(train_config)} {manifest["counts"]["train"].get("phrase", 0)} phrase pairs.
- {last["step"]} steps{f" in {last['stage']} stages (each later stage starts from the previous stage's weights with a fresh optimizer: `--init-from`)" if last["stage"] > 1 else ""}, {last["minutes"]} minutes on a 2-core CPU
  ({last["tokens_per_s"]} target tokens/s in the last window). {"Last stage: " if last["stage"] > 1 else ""}{last["epoch"] + 1} epochs; AdamW (betas {train_config["betas"]}),
  {schedule(train_config)},
  label smoothing {train_config["label_smoothing"]}, dropout {config["dropout"]}, word dropout {train_config.get("word_dropout", 0)},
  {train_config["max_tokens"]} tokens per batch;
  {"the final weights are the last checkpoint" if train_config["average_last"] == 1 else f"the final weights average the last {train_config['average_last']} checkpoints"}.{guided_line(train_config, config)}
- Reproduce:

```bash
{command}
```

### Training curve

![training curve](training_curve.png)

| stage | step | epoch | minutes | train loss | valid loss | valid BLEU (greedy, {bleu_sentences(train_config)}) | target tok/s |
|---|---|---|---|---|---|---|---|
{rows}

"""


def member_training(card: str) -> str:
    """The "## Training" section of a model card (up to the next "## " heading), its headings
    one level down, to sit inside another card's section."""
    lines = card.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "## Training"), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    body = lines[start + 1 : end]
    return "\n".join("#" + line if line.startswith("#") else line for line in body).strip() + "\n"


def soup_section(soup: dict, member_card: str, command: str) -> str:
    """The training section of a weight soup: its members, how to rebuild it, and its first
    member's training (whose curve, continued by the later stages, holds the members)."""
    total = sum(member["weight"] for member in soup["members"])
    home = str(Path.home())
    members = "\n".join(
        f"  - `{member['model'].replace(home, '~')}`, weight {member['weight'] / total:.2f}"
        + (f" (the release bundle of commit {member['commit'][:10]})" if member.get("commit") else "")
        for member in soup["members"]
    )
    return f"""## Training

- A weight soup (`python -m export.soup`; Wortsman et al. 2022): each weight is the weighted mean
  of the same weight in models fine-tuned from one ancestor, so it costs one model at
  every step, where an ensemble of them costs all of them. Its members:
{members}
- Reproduce (the members are rebuilt from git with `python -m export.releases`):

```bash
{command}
```

### How its first member was trained (from that member's card)

{member_training(member_card)}
"""


def notes_section(notes: str) -> str:
    notes = notes.strip()
    return (f"## Notes from training\n\n{notes}\n" if notes else "") + "\n"


def extra_license(manifest: dict) -> str:
    licenses = manifest.get("extra_licenses") or {}
    lines = []
    for kind in extra_kinds(manifest):
        if kind in EXTRA_KINDS:
            lines.append(EXTRA_KINDS[kind][1])
        else:  # a user's own corpus: the license its reader reported
            lines.extend(
                f"`{spec}`: {licenses.get(spec, 'see its own license')}" for spec in licenses if spec.startswith(kind)
            )
    return "".join(f"\n- Extra training pairs: {line}." for line in lines)


def input_hashes(manifest: dict, shown: int = 3) -> str:
    hashes = [entry["sha256"][:16] + "…" for entry in manifest["inputs"]]
    if len(hashes) <= shown + 1:
        return ", ".join(hashes)
    return ", ".join(hashes[:shown]) + f" and {len(hashes) - shown} more (data_manifest.json lists every file)"


def data_section(manifest: dict) -> str:
    return f"""## Data and license

- Corpus: {manifest["license"]}.{extra_license(manifest)}
- Input sha256: {input_hashes(manifest)}.
- The model is trained on GPL-2+ data; we distribute it under the same license (GPL-2.0-or-later).

"""


def limitations_section(train_config: dict, source: str = "German", target: str = "English") -> str:
    return f"""## Limitations

- Small model, small corpus, CPU-only training budget: expect literal, often wrong
  translations of long or domain-specific sentences; {source}→{target} only (the other
  direction is a bundle of its own).
- {"Alignment maps come from one cross-attention head trained (guided) to align: better than raw attention, and measured against a dedicated statistical aligner on our gold set (the AER above, eflomal's beside it); a few hundred hand-aligned pairs are a small gold set" if train_config.get("guided_alignment") else "Alignment maps are raw cross-attention of one layer"}; see docs/alignment.md.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description="Write MODEL_CARD.md and training_curve.png into a bundle.")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument(
        "--run", type=Path, required=True, help="training output dir (history.jsonl, train_config.json)"
    )
    parser.add_argument("--data", type=Path, required=True, help="prepared data dir (manifest.json)")
    parser.add_argument("--metrics", type=Path, nargs="+", required=True, help="JSON files of measured metrics, merged")
    parser.add_argument("--command", required=True, help="the command that reproduces training")
    parser.add_argument("--notes", type=Path, help="Markdown with what was tried and chosen, included as is")
    parser.add_argument("--registers", type=Path, help="the register gate's JSON (python -m export.registers --json)")
    parser.add_argument(
        "--earlier-run",
        type=Path,
        action="append",
        default=[],
        help="a run that --run continues (--init-from), oldest first; its curve comes first",
    )
    args = parser.parse_args()
    metrics: dict = {}
    for path in args.metrics:
        metrics.update(json.loads(path.read_text()))
    notes = args.notes.read_text() if args.notes else ""
    registers = json.loads(args.registers.read_text()) if args.registers else None
    print(
        write_card(args.bundle, args.run, args.data, metrics, args.command, notes, tuple(args.earlier_run), registers)
    )


if __name__ == "__main__":
    main()
