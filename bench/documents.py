"""Documents with the shipped model: a 10-page DOCX end to end against its plain text, and
the translated files opened by LibreOffice (optional: `soffice` and `pdftoppm`).

    python bench/documents.py --model models/de-en                       # speed
    python bench/documents.py --model models/de-en --office docs/        # + LibreOffice, page PNG

**Speed.** A DOCX of about ten pages is made from the gold set's German sentences (three
to a paragraph, one paragraph in three with a bold, an italic or a linked phrase mid-
sentence, a table, a header). It is translated end to end -- read with python-docx,
every paragraph translated whole with its word map made in the same pass, the markup
placed, the file written -- and, beside it, its plain text: the same paragraphs' sentences
through the same translator without maps (what a line job does). Both with the bundle's
decoding, in calls of 64 paragraphs, alternated, best of `--rounds`. The ratio is the
price of the documents path.

**LibreOffice** (`--office DIR`; Debian's libreoffice-writer-nogui, libreoffice-impress-
nogui and poppler-utils, about 300 MB, so opt-in rather than in CI): the translated DOCX,
ODT and PPTX are converted to PDF by `soffice --headless --convert-to pdf` (each must
convert), and the first page of the translated DOCX is rendered to
`DIR/translated-docx.png` by `pdftoppm`.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from seq2seq.analysis.aer import read_gold
from seq2seq.core.config import DecodeConfig
from seq2seq.core.segment import split_sentences
from seq2seq.decoding.translator import Translator
from seq2seq.documents.files import format_of, read_document, translate_document
from seq2seq.documents.translate import sentence_translator
from seq2seq.loading import load_translator

CALL = 64  # paragraphs per translator call, in both paths


def ten_pages(sentences: list[str], pages: int = 10) -> bytes:
    """A DOCX of about `pages` pages (400 words a page) from `sentences`, with markup."""
    import docx
    from docx.shared import RGBColor

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "Bericht über den Alltag"
    words, index, paragraph_number = 0, 0, 0
    while words < 400 * pages:
        if paragraph_number % 12 == 0:
            document.add_heading(sentences[index % len(sentences)].rstrip(".!?"), 2)
        group = [sentences[(index + k) % len(sentences)] for k in range(3)]
        index += 3
        paragraph = document.add_paragraph()
        text = " ".join(group)
        if paragraph_number % 3 == 0:
            first, rest = text.split(" ", 1)
            second, rest = rest.split(" ", 1)
            paragraph.add_run(first + " ")
            run = paragraph.add_run(second)
            run.bold = paragraph_number % 2 == 0
            run.italic = paragraph_number % 2 == 1
            run.font.color.rgb = RGBColor(0x1F, 0x4E, 0x9A)
            paragraph.add_run(" " + rest)
        else:
            paragraph.add_run(text)
        words += len(text.split())
        paragraph_number += 1
    table = document.add_table(rows=3, cols=2)
    for row in range(3):
        for column in range(2):
            table.cell(row, column).text = sentences[(row * 2 + column) % len(sentences)]
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def plain_translation(translator: Translator, paragraphs: list[str], config: DecodeConfig) -> None:
    """The paragraphs' sentences, translated without maps, in calls of `CALL` paragraphs."""
    plain = DecodeConfig(**{**config.__dict__, "return_attention": False, "alignment": None})
    for start in range(0, len(paragraphs), CALL):
        part = paragraphs[start : start + CALL]
        sentences = [text[a:b] for text in part for a, b in split_sentences(text)]
        translator.translate_batch(sentences, plain)


def document_translation(translator: Translator, data: bytes, config: DecodeConfig) -> tuple[bytes, object]:
    document = read_document(data, format_of("x.docx"))
    translate = sentence_translator(translator, config)

    def chunked(texts: list[str]) -> list:
        out = []
        for start in range(0, len(texts), CALL):
            out += translate(texts[start : start + CALL])
        return out

    result = translate_document(document, chunked, translator.config.target_lang)
    return result.data, result


def speed(translator: Translator, sentences: list[str], rounds: int) -> bytes:
    data = ten_pages(sentences)
    document = read_document(data, format_of("x.docx"))
    paragraphs = [s.text for s in document.segments if any(c.isalnum() for c in s.text)]
    words = sum(len(p.split()) for p in paragraphs)
    print(f"10-page DOCX: {len(paragraphs)} segments, {words} words, {sum(map(len, paragraphs))} characters")
    config = translator.decode_defaults
    plain_times, document_times = [], []
    translated = b""
    for _ in tqdm(range(rounds), desc="rounds", file=sys.stderr):
        started = time.perf_counter()
        plain_translation(translator, paragraphs, config)
        plain_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        translated, result = document_translation(translator, data, config)
        document_times.append(time.perf_counter() - started)
    plain_s, document_s = min(plain_times), min(document_times)
    print(f"plain text (no maps):         {plain_s:6.1f} s  ({words / plain_s:.0f} words/s)")
    print(f"DOCX end to end (maps, markup): {document_s:6.1f} s  ({words / document_s:.0f} words/s)")
    print(f"ratio: {document_s / plain_s:.2f}x  (report: {result.report.to_dict()})")
    return translated


def office(translator: Translator, sentences: list[str], translated_docx: bytes, out: Path) -> None:
    """The translated files through LibreOffice; the first DOCX page as a PNG in `out`."""
    import odfdo  # noqa: F401 - the test dependency that makes the ODT
    from sample_documents import make_odt, make_pptx, showcase_docx

    soffice, pdftoppm = shutil.which("soffice"), shutil.which("pdftoppm")
    if not soffice or not pdftoppm:
        raise SystemExit("--office needs soffice and pdftoppm (apt-get install libreoffice-writer-nogui poppler-utils)")
    work = Path(tempfile.mkdtemp(prefix="crossalign-office-"))
    config = translator.decode_defaults
    files = {"ten-pages.en.docx": translated_docx}
    files["showcase.en.docx"], _ = document_translation(translator, showcase_docx(), config)
    for name, data in (("sample.odt", make_odt(work / "source.odt")), ("sample.pptx", make_pptx())):
        document = read_document(data, format_of(name))
        translate = sentence_translator(translator, config)
        files[name.replace(".", ".en.")] = translate_document(document, translate, "en").data
    for name, data in files.items():
        (work / name).write_bytes(data)
        started = time.perf_counter()
        done = subprocess.run(
            [soffice, "--headless", "--convert-to", "pdf", "--outdir", str(work), str(work / name)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        pdf = work / (name.rsplit(".", 1)[0] + ".pdf")
        ok = done.returncode == 0 and pdf.is_file() and pdf.stat().st_size > 1000
        print(f"LibreOffice {name}: {'converted' if ok else 'FAILED'} ({time.perf_counter() - started:.1f} s)")
        if not ok:
            raise SystemExit(done.stdout + done.stderr)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            pdftoppm,
            "-png",
            "-r",
            "80",
            "-f",
            "1",
            "-l",
            "1",
            "-singlefile",
            str(work / "showcase.en.pdf"),
            str(out / "translated-docx"),
        ],  # fmt: skip
        check=True,
        timeout=120,
    )
    print(f"first page of the translated showcase DOCX: {out / 'translated-docx.png'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/de-en"))
    parser.add_argument("--gold", type=Path, default=Path("data/gold/de-en.gold.tsv"))
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5, help="best of this many (a shared CPU is noisy)")
    parser.add_argument("--office", type=Path, help="also open the outputs in LibreOffice; the PNG goes here")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the sample documents
    translator = load_translator(args.model, threads=args.threads, quality_mode="fast")
    sentences = [pair.source for pair in read_gold(args.gold)]
    translated = speed(translator, sentences, args.rounds)
    if args.office:
        office(translator, sentences, translated, args.office)


if __name__ == "__main__":
    main()
