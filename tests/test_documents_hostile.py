"""Hostile files through the library's readers (issue 41): ZIP archives whose headers lie,
central directories of 400,000 entries, files of nothing but markup, raw text elements that a
placement could make live, content marked not to be translated; each limit pinned at N and
N + 1. The files come from tests/hostile_documents.py; bench/hostile_documents.py measures
their time and memory."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
import zlib

import hostile_documents as hostile
import pytest
from sample_documents import make_docx, make_pptx
from test_documents_limits import small_docx
from test_markup import upper_translate, word_map

from seq2seq.documents.files import FORMATS, read_document
from seq2seq.documents.formats.limits import DocumentError, DocumentTooLarge, Limits, check_zip
from seq2seq.documents.html import read_html, segments, write_html
from seq2seq.documents.inline import read_inline
from seq2seq.documents.translate import Translation, place_segments


def peak_bytes(action) -> tuple[object, int]:
    """What `action()` returns or raises, and the most bytes Python held at once meanwhile."""
    tracemalloc.start()
    try:
        try:
            outcome = action()
        except Exception as error:  # noqa: BLE001 - the outcome is what is checked
            outcome = error
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- ZIP


def test_an_entry_that_inflates_past_its_declared_size_is_refused_without_inflating_more() -> None:
    # content.xml declares as many bytes as it has compressed (64 KiB, with their CRC): no
    # header check can tell; its stream goes on to 64 MiB, which zipfile's read inflates whole.
    stream = hostile.deflated_spaces(64, hostile.ODT_CONTENT)
    said = hostile.ODT_CONTENT.ljust(len(stream))
    bomb = hostile.lying_zip(
        [
            ("mimetype", hostile.ODT_MIMETYPE, zipfile.ZIP_STORED, hostile.ODT_MIMETYPE),
            ("content.xml", stream, zipfile.ZIP_DEFLATED, said),
        ]
    )
    outcome, peak = peak_bytes(lambda: read_document(bomb, FORMATS["odt"]))
    assert isinstance(outcome, DocumentTooLarge)
    assert f"'content.xml' inflates past the {len(said)} bytes it declares" in str(outcome)
    assert peak < 4 << 20  # never more than the declared size and a step: not 64 MiB


@pytest.mark.parametrize("kind", ["odt", "docx"])
def test_an_entry_whose_compressed_size_cannot_be_its_declared_one_is_refused(kind: str) -> None:
    # A 1 MB stream behind a declared size of a few hundred bytes (about 1 GiB inflated).
    bomb = hostile.odt_bomb(1) if kind == "odt" else hostile.docx_bomb(1)
    outcome, peak = peak_bytes(lambda: read_document(bomb, FORMATS[kind]))
    assert isinstance(outcome, DocumentTooLarge) and "compressed bytes for the" in str(outcome)
    assert "refused as a zip bomb" in str(outcome) and peak < 8 << 20
    stored = hostile.lying_zip([("a.xml", b"<a/>", zipfile.ZIP_STORED, b"<a/><b/>")])  # stored: sizes equal
    with pytest.raises(DocumentTooLarge, match="4 compressed bytes for the 8 it declares"):
        check_zip(stored, kind, Limits())


def test_an_archive_of_400000_entries_is_refused_before_zipfile_reads_its_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    honest, liar = hostile.many_entries(400_000), hostile.many_entries(400_000, said=10)

    def no_zipfile(*args: object, **kwargs: object) -> None:
        raise AssertionError("zipfile read the directory")

    monkeypatch.setattr(zipfile, "ZipFile", no_zipfile)
    with pytest.raises(DocumentTooLarge, match=r"has 400000 entries \(at most 5000: the limit max_entries\)"):
        read_document(honest, FORMATS["docx"])  # by the end record (ZIP64: over 65,535)
    with pytest.raises(DocumentTooLarge, match="has more than 5000 entries"):
        read_document(liar, FORMATS["docx"])  # by walking the directory past the record's 10


def test_the_entry_limit_holds_at_n_and_n_plus_one() -> None:
    check_zip(hostile.entries_zip(5000), "docx", Limits())  # exactly the default limit
    with pytest.raises(DocumentTooLarge, match="5001 entries"):
        check_zip(hostile.entries_zip(5001), "docx", Limits())
    # The walk over a directory that holds more than its end record says, at its own N + 1.
    with pytest.raises(DocumentTooLarge, match="more than 3 entries"):
        check_zip(hostile.many_entries(4, said=3), "docx", Limits(max_entries=3))
    with pytest.raises(DocumentError, match="holds 3 entries, its end record says 2") as refused:
        check_zip(hostile.many_entries(3, said=2), "docx", Limits(max_entries=3))
    assert not isinstance(refused.value, DocumentTooLarge)


def test_xml_tags_are_counted_as_entries_are_inflated_at_n_and_n_plus_one() -> None:
    data = make_docx()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        marks = sum(archive.read(n).count(b"<") for n in archive.namelist() if n.endswith((".xml", ".rels")))
    assert read_document(data, FORMATS["docx"], Limits(max_xml_tags=marks)).segments
    with pytest.raises(DocumentTooLarge, match=rf'more than {marks - 1} XML tags \("<"\) \(the limit max_xml_tags\)'):
        read_document(data, FORMATS["docx"], Limits(max_xml_tags=marks - 1))
    # An honest 2 MB DOCX (true sizes and CRCs, within the ratio) of 150 MiB of XML: refused while
    # it is inflated, never parsed.
    outcome, peak = peak_bytes(lambda: read_document(hostile.docx_xml_bomb(150), FORMATS["docx"]))
    assert isinstance(outcome, DocumentTooLarge) and "max_xml_tags" in str(outcome) and peak < 64 << 20


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("a", b"x", 0, b"x"), ("a", b"y", 0, b"y")], "the entry 'a' is there twice"),
        ([("a", b"xy", 0, b"xz")], "is not what its headers say"),  # its CRC
        ([("a", b"\xff\xff", 8, b"ab")], "invalid"),  # not deflate at all
        ([("a", zlib.compress(b"ab")[2:-4], 14, b"ab")], "compression method 14"),  # LZMA: not an Office file's
    ],
)
def test_an_archive_that_is_not_what_it_says_is_refused_as_no_valid_file(entries: list, message: str) -> None:
    with pytest.raises(DocumentError, match=message):
        check_zip(hostile.lying_zip(entries), "docx", Limits())


def test_python_docx_and_pptx_read_only_the_checked_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    import docx
    import pptx

    files = {"docx": make_docx(), "pptx": make_pptx()}  # made before the libraries are watched
    given: list[bytes] = []
    for module, name in ((docx, "Document"), (pptx, "Presentation")):
        original = getattr(module, name)

        def watched(stream: io.BytesIO, original=original) -> object:
            given.append(stream.getvalue())
            return original(stream)

        monkeypatch.setattr(module, name, watched)
    for kind, data in files.items():
        assert read_document(data, FORMATS[kind]).segments
        with zipfile.ZipFile(io.BytesIO(given[-1])) as read:  # rebuilt from the bounded reads: stored
            assert given[-1] != data and {e.compress_type for e in read.infolist()} == {zipfile.ZIP_STORED}
            assert read.namelist() == zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_a_file_that_is_another_office_format_says_so_without_a_python_object() -> None:
    with pytest.raises(DocumentError) as refused:
        read_document(make_pptx(), FORMATS["docx"])
    message = str(refused.value)
    assert message.startswith("not a valid DOCX file: ValueError: file 'the file' is not a Word file")
    assert "object at 0x" not in message and "BytesIO" not in message


# --------------------------------------------------------------------------- limits while reading


@pytest.mark.parametrize(
    ("kind", "data", "limit"),
    [
        ("html", hostile.empty_paragraphs(2), "max_tags"),  # 2 MiB of <p>.</p>
        ("html", hostile.open_tags(2), "max_tags"),  # 2 MiB of <b>
        ("txt", hostile.blank_lines(2), "max_lines"),
        ("md", hostile.markdown_marks(2), "max_tags"),
        ("xliff", hostile.xliff_codes(2), "max_tags"),
        ("srt", b"1\n00:00:01,000 --> 00:00:02,000\n" + b"<b>" * (1 << 19) + b"\n", "max_tags"),
    ],
)
def test_files_of_nothing_but_markup_are_refused_at_a_limit_while_they_are_read(
    kind: str, data: bytes, limit: str
) -> None:
    with pytest.raises(DocumentTooLarge, match=rf"\(the limit {limit}\): refused before reading on"):
        read_document(data, FORMATS[kind])


CUE = b"%d\n00:00:01,000 --> 00:00:02,000\na\n\n"
XLIFF_UNIT = (
    b'<xliff version="1.2"><file><body><trans-unit id="1"><source>a<x/></source></trans-unit></body></file></xliff>'
)


@pytest.mark.parametrize(
    ("kind", "make", "counts"),
    [
        ("html", lambda n: b"<p>" + b"<b>a</b>" * n + b"</p>", {"max_tags": lambda n: 2 * n + 2}),
        ("html", lambda n: b"<p>a</p>" * n, {"max_segments": lambda n: n, "max_tags": lambda n: 2 * n}),
        ("txt", lambda n: b"a\n" * n, {"max_lines": lambda n: n, "max_segments": lambda n: n}),
        ("md", lambda n: b"*a* " * n + b"\n\n- b\n", {"max_tags": lambda n: 2 * n}),
        ("md", lambda n: b"a\n\n" * n, {"max_segments": lambda n: n, "max_lines": lambda n: 2 * n}),
        ("srt", lambda n: b"".join(CUE % k for k in range(n)), {"max_segments": lambda n: n}),
        ("xliff", lambda n: XLIFF_UNIT.replace(b"<x/>", b"<x/>" * n), {"max_tags": lambda n: n}),
        ("docx", lambda n: small_docx(*["a"] * n), {"max_segments": lambda n: n}),
    ],
)  # fmt: skip
def test_each_counted_limit_holds_at_n_and_n_plus_one(kind: str, make, counts: dict) -> None:
    data = make(40)
    for limit, count in counts.items():
        n = count(40)
        assert read_document(data, FORMATS[kind], Limits(**{limit: n})).segments  # exactly at it
        with pytest.raises(DocumentTooLarge, match=rf"more than {n - 1} .*\(the limit {limit}\)"):
            read_document(data, FORMATS[kind], Limits(**{limit: n - 1}))


def test_the_service_answers_a_limit_413_naming_it(echo_engine, tmp_path) -> None:
    from test_documents_limits import client_for, upload

    with client_for(echo_engine, tmp_path / "files") as client:
        answer = upload(client, "a.html", hostile.open_tags(2))
        assert answer.status_code == 413 and "max_tags" in answer.json()["error"]
        answer = upload(client, "a.odt", hostile.odt_bomb(1))
        assert answer.status_code == 413 and "zip bomb" in answer.json()["error"]


# --------------------------------------------------------------------------- HTML units

RAW_INSIDE_INLINE = [
    "<p><b><script>x</script></b> Haus</p>",
    "<p><a href=/><script></script></a> Haus</p>",
    "<p><i><pre>a <b>b</b>  c</pre></i> Haus</p>",
    "<p><u><textarea>Text</textarea></u> Haus</p>",
]


@pytest.mark.parametrize("markup", RAW_INSIDE_INLINE)
def test_a_raw_block_inside_an_inline_element_is_kept_whole_and_placed(markup: str) -> None:
    kept = next(
        (
            c
            for c in (
                "<script>x</script>",
                "<script></script>",
                "<pre>a <b>b</b>  c</pre>",
                "<textarea>Text</textarea>",
            )
            if c in markup
        ),
        "",
    )
    for blocks in (True, False):
        parts = read_html(markup, blocks=blocks)
        out = write_html(parts, place_segments([s.marked for s in segments(parts)], upper_translate))
        assert "HAUS" in out and out.count(kept) == 1 and "Haus" not in out.replace(kept, "")
    item = read_inline(markup, "html", attributes=True)
    assert item.write(place_segments([item.marked], upper_translate)[0]).count(kept) == 1


def test_an_inline_element_closed_after_a_block_began_is_no_error() -> None:
    parts = read_html("<p><b>Das<div></b>Haus</div></p>")
    assert write_html(parts, place_segments([s.marked for s in segments(parts)], upper_translate)) == (
        "<p><b>DAS<div></b>HAUS</div></p>"
    )


def test_content_marked_not_to_be_translated_is_kept_as_written_on_every_html_path() -> None:
    page = (
        '<p>Das <span translate="no">Haus</span> ist klein.</p><p class="x notranslate">Mein Haus</p>'
        '<div translate=no><p>Ein Haus</p></div><p>Der <b class="notranslate" title="Dach">Baum</b> wächst.</p>'
    )
    parts = read_html(page)
    out = write_html(parts, place_segments([s.marked for s in segments(parts)], upper_translate))
    assert out == (
        '<p>DAS <span translate="no">Haus</span> IST KLEIN.</p><p class="x notranslate">Mein Haus</p>'
        '<div translate=no><p>Ein Haus</p></div><p>DER <b class="notranslate" title="Dach">Baum</b> WÄCHST.</p>'
    )
    # The model reads the sentence whole; the marked words are written back as they were.
    assert [s.marked.text for s in segments(parts)] == ["Das Haus ist klein.", "Der Baum wächst."]
    item = read_inline('Das <span translate="no">Haus</span> ist klein.', "html", attributes=True)
    assert item.marked.text == "Das Haus ist klein." and not item.attributes
    assert (
        item.write(place_segments([item.marked], upper_translate)[0])
        == 'DAS <span translate="no">Haus</span> IST KLEIN.'
    )
    document = read_document(b'<p>Ein <i class="notranslate">Haus</i> hier</p>', FORMATS["html"])
    assert (
        document.write(place_segments(document.segments, upper_translate)).decode()
        == '<p>EIN <i class="notranslate">Haus</i> HIER</p>'
    )
    subtitles = read_document(b"1\n00:00:01,000 --> 00:00:02,000\nDas <i translate=no>Haus</i> hier\n", FORMATS["srt"])
    assert b"DAS <i translate=no>Haus</i> HIER" in subtitles.write(place_segments(subtitles.segments, upper_translate))


def test_control_characters_written_as_references_never_reach_the_model() -> None:
    from seq2seq.core.inputs import CONTROL_CHARACTERS

    for markup in ("<p>Das &#27;Haus&#x1b;&#0;&#x7f;&#x85;</p>", "Das &#27;Haus&#x1B;"):
        for blocks in (True, False):
            [segment] = segments(read_html(markup, blocks=blocks))
            assert segment.marked.text.startswith("Das Haus")  # dropped (&#0; is U+FFFD, &#x85; "…")
            assert not CONTROL_CHARACTERS.search(segment.marked.text)
    literal = read_html("<p>Das \x1bHaus</p>")  # a literal one reaches the segment, whose input check refuses it
    assert segments(literal)[0].marked.text == "Das \x1bHaus"


def test_the_tokens_end_where_a_browsers_do() -> None:
    from seq2seq.documents.html_tokens import tokens

    cases = {
        "<xmp></ xmp><b>x</b></xmp>": "</ xmp><b>x</b>",  # "</ " is no end tag in raw text
        "<script><!--<script></script><b>x</b></script>": "<!--<script></script><b>x</b>",  # double escaped
        "<textarea/><b>x</b></textarea>": "<b>x</b>",  # "/>" does not close a raw text element
        "<svg><![CDATA[ > </svg><b>x</b> ]]></svg>": "<![CDATA[ > </svg><b>x</b> ]]>",  # CDATA in foreign content
        "<noscript><b>x</b></noscript>": "<b>x</b>",
    }
    for markup, raw in cases.items():
        found = tokens(markup)
        assert "".join(r for _, _, r in found) == markup and [r for k, _, r in found if k == "raw"] == [raw]
    assert tokens("<!-- -- ><b>x</b> -->") == [("other", "", "<!-- -- ><b>x</b> -->")]  # "-- >" ends nothing
    assert ("end", "b", '</b a=">">') in tokens('</b a=">">x')  # an end tag's quoted attribute
    assert tokens("a <b title='x") == [("text", "", "a "), ("tail", "", "<b title='x")]  # dropped by a browser


def test_a_translation_of_a_page_with_a_tail_keeps_it_last() -> None:
    target = "THE HOUSE"
    for markup in ("Das Haus <!-- <b title='x'>", "Das Haus <plaintext><b>x</b>", "Das Haus <img src=x onerror=y"):
        parts = read_html(markup, blocks=False)
        [segment] = segments(parts)
        placed = place_segments(
            [segment.marked], lambda texts: [Translation(target, word_map("Das Haus", target, [(0, 0), (1, 1)]))]
        )
        assert write_html(parts, placed).endswith(markup[9:])
