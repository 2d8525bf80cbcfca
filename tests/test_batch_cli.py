"""`crossalign translate` on whole files: order, resume, bad lines, heatmaps, the schema.

One tiny randomly initialised model (d_model 32, 2+2 layers, a 56-piece SentencePiece
model trained on toy German: tests/batch_toy.py) serves every test, through the torch
backend, but the glossary's (a glossary needs a model trained with hints: the shipped one).
A random model decodes to its length limit, which is exactly what these tests want: every
line takes real time and produces a real alignment. The CLI runs in-process here;
test_batch_resume.py runs it as a subprocess where a process must die.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from batch_toy import read_jsonl, toy_sentences, translate

from seq2seq.cli import batch, build_parser
from seq2seq.cli import main as cli_main
from seq2seq.decoding.records import AlignedTranslation, TranslationRecord
from seq2seq.loading import load_translator

# --------------------------------------------------------------------------- schema


def test_jsonl_records_validate_against_the_api_schema(batch_model_dir: Path, tmp_path: Path) -> None:
    sentences = toy_sentences(12, seed=1)
    long_line = "  ".join(sentences[:3])  # split into 3 sentences by --split-tokens 8
    lines = [*sentences, long_line]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"

    assert (
        translate(
            batch_model_dir,
            "-i",
            source,
            "-o",
            output,
            "-f",
            "jsonl",
            "--alignment",
            "--beam-size",
            "2",
            "--split-tokens",
            "8",
        )
        == batch.EXIT_OK
    )

    records = read_jsonl(output)
    properties = set(TranslationRecord.model_json_schema()["properties"])
    assert [r["line"] for r in records] == list(range(1, len(lines) + 1))
    for record, line in zip(records, lines):
        assert set(record) <= properties, set(record) - properties
        parsed = TranslationRecord.model_validate(record)
        AlignedTranslation.model_validate(record)  # a good record is also an API result
        assert parsed.source == line and parsed.error is None and parsed.score is not None
        alignment = parsed.alignment
        assert alignment is not None and alignment.level == "word"
        assert len(alignment.matrix) == len(alignment.target_tokens)
        assert all(len(row) == len(alignment.source_tokens) for row in alignment.matrix)
        # Offsets point into the original line and into the (joined) translation.
        assert all(line[t.start : t.end] == t.text for t in alignment.source_tokens)
        assert all(parsed.text[t.start : t.end] == t.text for t in alignment.target_tokens)
        # The quality block comes with the alignment, indexing its words.
        assert parsed.quality is not None
        assert len(parsed.quality.source_coverage) == len(alignment.source_tokens)
        assert len(parsed.quality.target_peak) == len(alignment.target_tokens)
        assert all(0 <= i < len(alignment.source_tokens) for i in parsed.quality.untranslated)

    split = TranslationRecord.model_validate(records[-1])
    assert split.sentences is not None and [s.text for s in split.sentences] == sentences[:3]
    # Each sentence of the long line is translated as it is on its own line, then joined.
    assert split.text == "  ".join(r["text"] for r in records[:3] if r["text"])
    assert len(split.alignment.source_tokens) == sum(len(r["alignment"]["source_tokens"]) for r in records[:3])
    # The split line's quality: its sentences' blocks joined, flags renumbered like the map.
    offsets = np.cumsum([0] + [len(r["alignment"]["source_tokens"]) for r in records[:3]])
    assert split.quality.source_coverage == [c for r in records[:3] for c in r["quality"]["source_coverage"]]
    assert split.quality.untranslated == [
        i + offset for r, offset in zip(records[:3], offsets) for i in r["quality"]["untranslated"]
    ]


def test_text_argument_and_help(batch_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert translate(batch_model_dir, "Der Hund ist klein .", "--beam-size", "1") == batch.EXIT_OK
    assert len(capsys.readouterr().out.splitlines()) == 1
    # Each argument is a line of its own (a line break inside one is a space), a blank one kept.
    texts = ["Der Hund ist klein .", "Das Haus\nist alt .", "", "Die Katze ist rot ."]
    assert translate(batch_model_dir, *texts, "--beam-size", "1", "-f", "jsonl") == batch.EXIT_OK
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["source"] for r in records] == ["Der Hund ist klein .", "Das Haus ist alt .", "", "Die Katze ist rot ."]
    assert [bool(r["text"]) for r in records] == [True, True, False, True]
    with pytest.raises(SystemExit):
        build_parser(["translate", "--help"]).parse_args(["translate", "--help"])
    help_text = capsys.readouterr().out
    assert "exit status" in help_text and "3 " in help_text and "--resume" in help_text
    assert (
        "DOCX, ODT, PPTX, HTML,\n  XLIFF, SRT or Markdown" in help_text
        and "-i report.docx -o report.en.docx" in help_text
    )
    assert "each argument one line" in " ".join(help_text.split())
    with pytest.raises(SystemExit):
        build_parser(["--help"]).parse_args(["--help"])
    overview = " ".join(capsys.readouterr().out.split())
    assert "a document (DOCX, ODT, PPTX, HTML, XLIFF, SRT, Markdown) with -i/-o" in overview


def test_workers_start_only_for_an_input_of_enough_lines(
    batch_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """--workers-min-lines N: N lines start the workers, N - 1 are translated in this process
    (the log says so); stdin is counted as far as it needs to be."""
    started: list[int] = []

    def process_engine(spec: batch.EngineSpec, workers: int) -> batch.InlineEngine:
        started.append(workers)  # spawning processes is what the rule saves; here it is recorded
        return batch.InlineEngine(batch.SentenceTranslator.load(spec))

    monkeypatch.setattr(batch, "ProcessEngine", process_engine)
    caplog.set_level("INFO")
    lines = toy_sentences(5, seed=7)
    flags = ["--workers", "2", "--workers-min-lines", "5", "--beam-size", "1"]
    for count, workers in ((5, [2]), (4, [])):
        source = tmp_path / f"in{count}.txt"
        source.write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
        started.clear(), caplog.clear()
        assert translate(batch_model_dir, "-i", source, *flags) == batch.EXIT_OK
        assert started == workers
        assert ("fewer than --workers-min-lines 5" in caplog.text) == (not workers)
    started.clear()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(lines).encode())))
    assert translate(batch_model_dir, *flags) == batch.EXIT_OK
    assert started == [2]
    assert batch.WORKER_MIN_LINES > 6  # a 6-line file, which two workers made twice as slow, runs in one process


def test_early_exit_reaches_the_search_and_the_job_record(
    batch_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seq2seq.cli import translate as translate_module
    from seq2seq.decoding import translator as translator_module

    seen: list[bool] = []
    search, options = translator_module.beam_search, translate_module.job_options
    recorded: list[dict] = []  # what the job file holds while the job runs (a finished job removes it)
    monkeypatch.setattr(translate_module, "job_options", lambda args: recorded.append(options(args)) or recorded[-1])

    def recording(backend, src_ids, src_mask, config, *rest):
        seen.append(config.early_exit)
        return search(backend, src_ids, src_mask, config, *rest)

    monkeypatch.setattr(translator_module, "beam_search", recording)
    source = tmp_path / "in.txt"
    source.write_text("Der Hund ist klein .\nDas Haus ist alt .\n", encoding="utf-8")
    for flag, output in (("--early-exit", tmp_path / "early.jsonl"), ("--no-early-exit", tmp_path / "waited.jsonl")):
        seen.clear(), recorded.clear()
        assert translate(batch_model_dir, "--input", source, "-o", output, "--format", "jsonl", flag) == batch.EXIT_OK
        assert seen and set(seen) == {flag == "--early-exit"}
        assert recorded and all(job["early_exit"] is (flag == "--early-exit") for job in recorded)
        assert len(read_jsonl(output)) == 2


def test_alignment_source_flags_are_those_of_align_with_the_old_spellings_hidden(
    batch_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("Der Hund ist klein .\n", encoding="utf-8")
    outputs = {}
    for name, flags in (
        ("shared", ["--layer", "0", "--heads", "1", "--no-step-shift"]),
        ("old", ["--alignment-layer", "0", "--alignment-heads", "1", "--no-step-shift"]),
    ):
        outputs[name] = tmp_path / f"{name}.jsonl"
        assert (
            translate(
                batch_model_dir,
                "-i",
                source,
                "-o",
                outputs[name],
                "-f",
                "jsonl",
                "--alignment",
                "--beam-size",
                "1",
                *flags,
            )
            == batch.EXIT_OK
        )
    (record,) = read_jsonl(outputs["shared"])
    assert (record["alignment"]["layer"], record["alignment"]["heads"]) == (0, [1])
    assert read_jsonl(outputs["old"]) == [record]
    assert "--alignment-layer is deprecated: use --layer" in caplog.text
    assert "--alignment-heads is deprecated: use --heads" in caplog.text
    with pytest.raises(SystemExit):
        build_parser(["translate", "--help"]).parse_args(["translate", "--help"])
    help_text = capsys.readouterr().out
    assert "--layer" in help_text and "--heads" in help_text and "--alignment-layer" not in help_text


# --------------------------------------------------------------------------- bad lines


BLANK = ""  # a blank line: kept as an empty translation, neither an error nor a warning
BAD_LINES: list[tuple[bytes, str | None]] = [
    (b"Der Hund ist klein .", None),
    (b"", BLANK),
    (b"   \t ", BLANK),
    (b"Der Mann " + b"sehr " * 60, "text too long"),  # over --max-chars 200
    (b"Die Katze \xff\xfe ist alt .", "invalid UTF-8"),
    (b"Das Kind\x07 ist hier .", "control character U+0007"),
    (b"Das Haus\x00 ist rot .", "control character U+0000"),
    (b"Die Frau ist sch\xc3\xb6n .\r", None),  # CRLF line, umlaut
    (b"Das Kind war nicht gro\xc3\x9f", None),  # last line, no newline
]


@pytest.mark.parametrize("output_format", ["text", "tsv", "jsonl"])
def test_bad_lines_get_error_records_and_exit_3(
    batch_model_dir: Path, tmp_path: Path, output_format: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(raw for raw, _ in BAD_LINES))
    output = tmp_path / f"out.{output_format}"

    status = translate(
        batch_model_dir,
        "-i",
        source,
        "-o",
        output,
        "-f",
        output_format,
        "--max-chars",
        "200",
        "--beam-size",
        "1",
        "--batch-size",
        "3",
    )

    assert status == batch.EXIT_SOME_FAILED
    lines = output.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(BAD_LINES)  # one complete record per line
    for number, ((_, expected), record) in enumerate(zip(BAD_LINES, lines), start=1):
        if output_format == "text":
            assert (record == "") == (expected is not None)
            assert (f"line {number}:" in caplog.text) == bool(expected)  # a blank line is no warning
            if expected:
                assert f"line {number}: {expected}" in caplog.text
        elif output_format == "tsv":
            fields = record.split("\t")
            assert len(fields) == 6 and fields[0] == str(number)
            if expected == BLANK:
                assert fields[2:] == ["", "", "", ""]
            else:
                assert fields[5].startswith(expected) if expected else (fields[5] == "" and fields[2] and fields[3])
        else:
            parsed = TranslationRecord.model_validate_json(record)
            assert parsed.line == number
            if expected == BLANK:
                assert parsed.error is None and parsed.text == "" and parsed.score is None
            else:
                assert parsed.error.startswith(expected) if expected else (parsed.error is None and parsed.text)
    assert "4 of 9 lines failed" in caplog.text
    assert "9 lines (3 translated, 2 blank, 4 failed)" in caplog.text


def test_bad_jsonl_input_lines(batch_model_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        "\n".join(
            [
                json.dumps({"id": "a", "text": "Der Hund ist klein ."}),
                "{not json",
                json.dumps({"id": "c"}),
                json.dumps(["Der Hund"]),
                json.dumps({"id": 5, "text": "Das Haus ist rot ."}),
                json.dumps({"id": {"x": 1}, "text": "Das Haus ist rot ."}),
                json.dumps({"text": "   "}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    output = tmp_path / "out.jsonl"
    assert (
        translate(
            batch_model_dir, "-i", source, "--input-format", "jsonl", "-o", output, "-f", "jsonl", "--beam-size", "1"
        )
        == batch.EXIT_SOME_FAILED
    )
    records = [TranslationRecord.model_validate(r) for r in read_jsonl(output)]
    assert [r.id for r in records] == ["a", None, None, None, 5, None, None]
    assert [r.error is None for r in records] == [True, False, False, False, True, False, False]
    assert records[1].error.startswith("invalid JSON") and records[6].error == "text is only whitespace"


# What the service refuses with a 400 (seq2seq.core.inputs), the CLI writes as an error record.
SERVICE_RULE_LINES: list[tuple[dict, str | None]] = [
    ({"id": "ok1", "text": "Der Hund ist klein ."}, None),
    ({"id": "s1", "text": "\ud800"}, "lone surrogate U+D800 at column 1"),  # valid JSON, not UTF-8
    ({"id": "s2", "text": "Der Hund \udfff ist klein ."}, "lone surrogate U+DFFF at column 10"),
    ({"id": "\ud800", "text": "Das Haus ist rot ."}, '"id" holds a lone surrogate'),
    ({"id": "nul", "text": "Das Haus\u0000 ist rot ."}, "control character U+0000 at column 9"),
    ({"id": "esc", "text": "Das \u001b[31mKind"}, "control character U+001B"),
    ({"id": "c1", "text": "Die Frau\u0085 ist alt ."}, "control character U+0085"),
    ({"id": "ok2", "text": "Die Frau\tist alt .\nDas Kind ist hier ."}, None),  # TAB and LF are text
    ({"id": "ok3", "text": "Das Kind war nicht gro\u00df ."}, None),
]


@pytest.mark.parametrize("output_format", ["text", "tsv", "jsonl"])
def test_lines_the_service_refuses_are_error_records_and_resume_goes_on(
    batch_model_dir: Path, tmp_path: Path, output_format: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item, _ in SERVICE_RULE_LINES), encoding="utf-8")
    output = tmp_path / f"out.{output_format}"
    # One sentence per batch: a resumed run then computes exactly what the first run did.
    common = ["-i", source, "--input-format", "jsonl", "-f", output_format, "--beam-size", "1", "--batch-size", "1"]

    assert translate(batch_model_dir, *common, "-o", output) == batch.EXIT_SOME_FAILED

    complete = output.read_bytes()
    records = complete.decode("utf-8").split("\n")
    assert records[-1] == "" and len(records) - 1 == len(SERVICE_RULE_LINES)
    for (_, expected), record in zip(SERVICE_RULE_LINES, records):
        if output_format == "jsonl":
            parsed = TranslationRecord.model_validate_json(record)
            assert parsed.error.startswith(expected) if expected else (parsed.error is None and parsed.text)
            assert "\ud800" not in parsed.source and "\udfff" not in parsed.source  # shown as U+FFFD
        elif output_format == "tsv":
            error = record.split("\t")[5]
            assert error.startswith(expected) if expected else error == ""
        else:
            assert (record == "") == (expected is not None)

    # Killed after the first bad lines (a cut record included): --resume goes on past them.
    cut = len("\n".join(records[:3])) + 1
    output.write_bytes(complete[: len(complete.decode("utf-8")[:cut].encode("utf-8")) + 5])
    assert translate(batch_model_dir, *common, "-o", output, "--resume") == batch.EXIT_SOME_FAILED
    assert output.read_bytes() == complete


def test_empty_input_and_usage_errors(batch_model_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    output = tmp_path / "out.txt"
    assert translate(batch_model_dir, "-i", empty, "-o", output) == batch.EXIT_OK
    assert output.read_bytes() == b""
    assert translate(batch_model_dir, "-i", empty, "--resume") == batch.EXIT_USAGE
    assert translate(batch_model_dir, "-i", empty, "-o", tmp_path / "no" / "out.txt") == batch.EXIT_USAGE
    assert translate(batch_model_dir, "-i", tmp_path / "missing.txt") == batch.EXIT_USAGE
    assert translate(tmp_path / "no-model", "-i", empty) == batch.EXIT_USAGE  # the user names another
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bundle.json").write_text("{}")
    assert cli_main(["translate", "-m", str(broken), "-i", str(empty)]) == batch.EXIT_FATAL  # it does not load


# --------------------------------------------------------------------------- heatmaps


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_heatmaps_are_images_named_by_line_or_id(batch_model_dir: Path, tmp_path: Path, fmt: str) -> None:
    from PIL import Image

    source = tmp_path / "in.jsonl"
    source.write_text(
        "\n".join(
            json.dumps(item)
            for item in [{"id": "doc/1", "text": "Der Hund ist klein ."}, {"text": "Das Haus ist rot ."}, {"text": ""}]
        )
        + "\n"
    )
    heatmaps = tmp_path / "maps"
    status = translate(
        batch_model_dir,
        "-i",
        source,
        "--input-format",
        "jsonl",
        "-o",
        tmp_path / "out.txt",
        "--heatmaps",
        heatmaps,
        "--heatmap-format",
        fmt,
        "--beam-size",
        "1",
    )
    assert status == batch.EXIT_SOME_FAILED  # the empty line
    assert sorted(p.name for p in heatmaps.iterdir()) == sorted([f"doc_1.{fmt}", f"000002.{fmt}"])
    for path in heatmaps.iterdir():
        if fmt == "png":
            with Image.open(path) as image:
                image.verify()
                assert image.format == "PNG"
        else:
            assert ElementTree.parse(path).getroot().tag.endswith("svg")


# --------------------------------------------------------------------------- units


def test_decode_line_never_raises_and_keeps_tsv_first_column() -> None:
    assert batch.decode_line(b"Hallo Welt\tHello world\n", 1, "tsv").source == "Hallo Welt"
    assert batch.decode_line(b"\xef\xbb\xbfHallo\n", 1).source == "Hallo"
    assert batch.decode_line(b"\xc3(", 2).error == "invalid UTF-8 at byte 0"
    assert batch.decode_line(b"a\x85b", 3).error.startswith("invalid UTF-8")  # lone C1 byte
    assert batch.decode_line("a\u0085b".encode(), 3).error.startswith("control character U+0085")


def test_plan_batches_respects_sentences_and_tokens() -> None:
    units = [batch._Unit(line, 0, "x", length) for line, length in enumerate([3, 9, 1, 30, 4, 4, 8], start=1)]
    planned = batch.plan_batches(units, batch_size=3, max_tokens=20)
    assert sorted(u.line for b in planned for u in b) == list(range(1, 8))
    for chunk in planned:
        assert len(chunk) <= 3
        assert len(chunk) == 1 or (max(u.length for u in chunk) + 1) * len(chunk) <= 20
    assert [u.length for b in planned for u in b] == sorted(u.length for u in units)


def test_a_batch_that_fails_in_the_model_is_retried_line_by_line(
    batch_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the line at fault gets an error record; its batch-mates are translated."""
    from seq2seq.decoding.translator import Translator

    original, calls = Translator.translate_batch, []

    def breaks_on_poison(self, texts, *args, **kwargs):
        calls.append(len(texts))
        if any("Katze" in text for text in texts):
            raise RuntimeError("the model broke")
        return original(self, texts, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_batch", breaks_on_poison)
    lines = ["Der Hund ist klein .", "Das Haus ist rot .", "Die Katze ist alt .", "Das Kind ist hier ."]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"

    assert (
        translate(batch_model_dir, "-i", source, "-o", output, "-f", "jsonl", "--beam-size", "1", "--batch-size", "4")
        == batch.EXIT_SOME_FAILED
    )

    records = [TranslationRecord.model_validate(r) for r in read_jsonl(output)]
    assert [r.error for r in records[:2] + records[3:]] == [None, None, None]
    assert records[2].error == "translation failed: RuntimeError: the model broke"
    assert calls == [4, 1, 1, 1, 1]  # the batch, then each line on its own


# --------------------------------------------------------------------------- glossary


def test_each_glossary_term_a_translation_left_unused_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """On the shipped model (trained with hints), in text output: one warning line per term
    that `TranslationResult.terms` says the translation did not use, none for the others, and
    none for a term whose source words the line does not hold."""
    from seq2seq.decoding.texts import translate_texts
    from seq2seq.runtime.models import SHIPPED_MODELS

    glossary = tmp_path / "glossary.tsv"
    terms = (("Katze", "feline"), ("Haus", "dwelling"), ("Bahnhof", "railway terminus"), ("Hund", "hound"))
    glossary.write_text("".join(f"{s}\t{t}\n" for s, t in terms), encoding="utf-8")
    lines = ["Die Katze schläft im Haus.", "Wo ist der Bahnhof?"]
    model = SHIPPED_MODELS / "de-en"
    caplog.set_level("INFO")
    flags = ["--glossary", str(glossary), "--term-bonus", "0"]
    assert cli_main(["translate", "-m", str(model), *flags, *lines]) == batch.EXIT_OK
    assert len(capsys.readouterr().out.splitlines()) == 2
    warned = sorted(r.getMessage() for r in caplog.records if r.getMessage().startswith("line "))

    translator = load_translator(model)
    config = translator.decode_defaults.override(glossary=terms, term_bonus=0.0, return_attention=False)
    texts = translate_texts(lines, lambda sentences: translator.translate_batch(sentences, config))
    outcomes = [(n, t) for n, text in enumerate(texts, start=1) for t in text.terms if t.origin == "glossary"]
    unused = sorted(
        f'line {n}: glossary term "{t.source}" -> "{t.term}" not used in the translation'
        for n, t in outcomes
        if not t.used
    )
    assert unused and len(unused) < len(outcomes)  # the example has both kinds
    assert warned == unused
    assert f"{len(unused)} glossary terms not used in the translations" in caplog.text
    assert not any(t.source == "Hund" for _, t in outcomes)  # not in the text: nothing to say
