"""Markup carried by the word alignment (seq2seq/documents/markup.py) and HTML read and
written with it (seq2seq/documents/html.py), on hand-made maps: each rule of the transfer,
well-formedness whatever the map, nothing dropped."""

from __future__ import annotations

import random
from html.parser import HTMLParser

import numpy as np
import pytest

from seq2seq.core.alignment import Alignment, hard_links, words
from seq2seq.documents.html import read_html, render, segments, write_html
from seq2seq.documents.html_tokens import tokens
from seq2seq.documents.markup import Marked, MarkupBuilder, Tag, fits, identity, transfer
from seq2seq.documents.translate import PlacementReport, Translation, place_segments, place_translation
from seq2seq.documents.xml import XMLInputError, fragment, fragment_text, parse_xml, read_element, write_element


def word_map(source: str, target: str, links: list[tuple[int, int]], soft: dict | None = None) -> Alignment:
    """A word map whose row j puts all weight on the source word linked to target word j
    (`soft`: {(target, source): weight} rows given outright)."""
    source_words, target_words = words(source), words(target)
    matrix = np.zeros((len(target_words), len(source_words)))
    for i, j in links:
        matrix[j, i] = 1.0
    for (j, i), weight in (soft or {}).items():
        matrix[j, i] = weight
    return Alignment("word", source_words, target_words, matrix, hard_links(matrix), 0, (), False)


def html_of(markup: str, target: str, links: list[tuple[int, int]], soft: dict | None = None) -> str:
    (segment,) = [part for part in read_html(markup, blocks=False) if not isinstance(part, str)]
    text = segment.marked.text
    placed = place_translation(segment.marked, Translation(target, word_map(text.strip(), target, links, soft)))
    return render(placed, segment.verbatim)


def diagonal(count: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(count)]


def test_a_tag_moves_with_its_word() -> None:
    assert (
        html_of("Das ist ein <b>kleines</b> Haus.", "This is a small house.", diagonal(6))
        == "This is a <b>small</b> house."
    )
    # Reordered: "Ich habe <b>das Buch</b> gelesen." -> "I have read the book."
    links = [(0, 0), (1, 1), (4, 2), (2, 3), (3, 4), (5, 5)]
    assert (
        html_of('Ich habe <a href="/b">das Buch</a> gelesen.', "I have read the book.", links)
        == 'I have read <a href="/b">the book</a>.'
    )


def test_complete_mapping_gives_every_linked_target_word_the_tag() -> None:
    # "<b>Rathaus</b>" -> "town hall": both target words link to the one source word.
    assert html_of(
        "Das <b>Rathaus</b> ist alt.", "The town hall is old.", [(0, 0), (1, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    ) == ("The <b>town hall</b> is old.")


def test_a_tagged_word_without_a_hard_link_takes_its_soft_column() -> None:
    # No target row's argmax is "ist" (word 1); its column's largest weight is target word 1.
    soft = {(1, 1): 0.4, (1, 0): 0.6}
    out = html_of("Es <i>ist</i> gut.", "It is good.", [(0, 0), (2, 2), (3, 3)], soft)
    assert out == "It <i>is</i> good."


def test_repairs_gap_punctuation_and_whole_sentence() -> None:
    # A one-word gap between two pieces is filled.
    out = html_of("<b>rote Häuser</b> stehen", "red and old houses stand", [(0, 0), (1, 3), (2, 4), (0, 1)])
    assert out == "<b>red and old houses</b> stand"  # 0,1 and 3 -> gap 2 filled, one piece
    # Trailing punctuation stays out unless the element held it.
    assert html_of("Das <b>Haus</b>.", "The house.", [(0, 0), (1, 1), (1, 2)]) == "The <b>house</b>."
    assert html_of("<b>Das Haus.</b>", "The house.", diagonal(3)) == "<b>The house.</b>"
    # Over every word of the source: over every word of the translation, whatever the map says.
    assert html_of("<em>Ich komme</em>", "I am coming", [(0, 0), (1, 2), (1, 1)]) == "<em>I am coming</em>"
    assert html_of("<em>Ich komme</em>", "I am coming", [(0, 0), (1, 2), (0, 1)]) == "<em>I am coming</em>"


def test_crossing_scopes_are_split_into_well_formed_markup() -> None:
    # Source: <b>a <i>b</i></b> c ; target order c' b' a': i's word ends up outside b's span.
    out = html_of("<b>eins <i>zwei</i></b> drei", "three two one", [(2, 0), (1, 1), (0, 2)])
    assert out == "three <b><i>two</i> one</b>"
    # Two tags whose target spans cross: b over 0-1, i over 1-2 in the target.
    out = html_of("<b>eins</b> <i>zwei</i> drei", "one two three", [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2)])
    assert is_well_formed(out)


def test_empty_elements_stay_after_the_word_they_followed() -> None:
    links = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    assert html_of("Das Haus<br/>ist klein.", "The house is small.", links) == "The house<br/> is small."
    assert html_of("Das Haus <br/>ist klein.", "The house is small.", links) == "The house <br/>is small."
    assert html_of('<img src="x.png"> Das Haus.', "The house.", diagonal(3)) == '<img src="x.png"> The house.'
    # Reordered: the image followed "gelesen", which is the third target word.
    out = html_of("Ich habe es gelesen<img src=i>.", "I have read it.", [(0, 0), (1, 1), (3, 2), (2, 3), (4, 4)])
    assert out == "I have read<img src=i> it."


def test_nothing_is_dropped_and_the_output_is_well_formed_on_random_maps() -> None:
    rng = random.Random(3)
    vocabulary = ["der", "die", "das", "Haus", "ist", "klein", "groß", ",", ".", "und", "alt", "neu"]
    for _ in range(300):
        source_words = rng.choices(vocabulary, k=rng.randint(1, 8))
        target_words = rng.choices(vocabulary, k=rng.randint(1, 9))
        builder, opened = MarkupBuilder(), []
        for word in source_words:
            if rng.random() < 0.3:
                opened.append(builder.open(f"t{len(builder.tags)}"))
            if rng.random() < 0.1:
                builder.empty(f"e{len(builder.tags)}")
            builder.text(word + " ")
            if opened and rng.random() < 0.4:
                builder.close(opened.pop())
        marked = builder.build()
        target = " ".join(target_words)
        matrix = np.array([[rng.random() for _ in words(marked.text)] for _ in words(target)])
        alignment = Alignment("word", words(marked.text), words(target), matrix, hard_links(matrix), 0, (), False)
        placed = transfer(marked, target, alignment)
        opened_tags, stack = set(), []
        for kind, value in placed.events():
            if kind == "open":
                stack.append(value)
                opened_tags.add(value)
            elif kind == "close":
                assert stack.pop() == value  # closes what it opened last: well-formed
            elif kind == "empty":
                opened_tags.add(value)
        assert not stack
        assert opened_tags == set(range(len(marked.tags)))  # every tag is in the output
        assert "".join(v for k, v in placed.events() if k == "text") == target


def test_stacks_give_each_character_its_open_elements() -> None:
    marked = Marked("ab cd", [Tag(0, 5, "outer"), Tag(3, 5, "inner"), Tag(2, 2, "br", empty=True)])
    assert marked.stacks() == [(0,), (0,), (0,), (0, 1), (0, 1)]
    assert "".join(v if k == "text" else f"[{k}{v}]" for k, v in identity(marked).events()) == (
        "[open0]ab[empty2] [open1]cd[close1][close0]"
    )


def test_a_map_of_another_pair_is_refused() -> None:
    with pytest.raises(ValueError, match="not the map of this pair"):
        transfer(Marked("a b"), "x y z", word_map("a b", "x y", diagonal(2)))


# --------------------------------------------------------------------------- HTML


def test_html_tokens_cover_the_input_exactly() -> None:
    markup = '<!DOCTYPE html><a title="a>b" href="/x">Das &amp; Haus</a> 3 < 5 und 6 > 4<br/><!-- offen'
    found = tokens(markup)
    assert "".join(raw for _, _, raw in found) == markup
    assert found[-1] == ("tail", "", "<!-- offen")  # an unclosed comment is a comment to the end: it stays last
    assert ("start", "a", '<a title="a>b" href="/x">') in found


def upper_translate(texts: list[str]) -> list[Translation]:
    """A translator that writes each word in capitals, word for word: the map is the diagonal."""
    return [Translation(t.strip().upper(), word_map(t, t.strip().upper(), diagonal(len(words(t))))) for t in texts]


def translate_page(markup: str) -> str:
    parts = read_html(markup)
    return write_html(parts, place_segments([segment.marked for segment in segments(parts)], upper_translate))


def test_html_blocks_delimit_segments_and_inline_markup_is_carried() -> None:
    page = (
        "<html><head><title>Mein Haus</title><style>p > b { color: red }</style></head><body>\n"
        '<p>Das ist ein <b class="x">kleines</b> Haus.</p><ul><li>eins</li><li>zwei <i>drei</i></li></ul>\n'
        '<script>if (a < b) { x = "</p>"; }</script><pre>nicht  übersetzt</pre><!-- kommentar -->\n'
        '<p><a title="a>b" href="/x">Das Haus ist klein.</a> 3 &lt; 5 &amp; "6" > 4<br>Zeile</p></body></html>'
    )
    out = translate_page(page)
    assert "<title>MEIN HAUS</title>" in out
    assert '<p>DAS IST EIN <b class="x">KLEINES</b> HAUS.</p>' in out
    assert "<li>EINS</li><li>ZWEI <i>DREI</i></li>" in out
    assert "<style>p > b { color: red }</style>" in out and '<script>if (a < b) { x = "</p>"; }</script>' in out
    assert "<pre>nicht  übersetzt</pre><!-- kommentar -->" in out
    # The attributes as written but for the reader's text (title); model text escaped, quotes
    # included; br delimits.
    assert '<a title="A&gt;B" href="/x">DAS HAUS IST KLEIN.</a> 3 &lt; 5 &amp; &quot;6&quot; &gt; 4<br>ZEILE</p>' in out


def test_html_attributes_a_reader_sees_are_translated_in_their_tags() -> None:
    page = (
        '<div title="Mein Haus" class="Haus"><p>Das <a href="/Haus" title=\'Das "Haus"\'>Haus</a>.</p>'
        '<p><img src="hund.png" alt="Ein Hund"></p><img alt="Eine Katze" src=katze.png>'
        '<textarea placeholder="Ihr Text">Inhalt</textarea><input aria-label="Suche" value="Suche">'
        '<p translate=no title="Nicht das">Text</p><img alt="" title=Bare>'
        '<input type="submit" value="Senden"><input type=text value="Eingabe"></div>'
    )
    out = translate_page(page)
    assert out == (
        '<div title="MEIN HAUS" class="Haus"><p>DAS <a href="/Haus" title=\'DAS &quot;HAUS&quot;\'>HAUS</a>.</p>'
        '<p><img src="hund.png" alt="EIN HUND"></p><img alt="EINE KATZE" src=katze.png>'
        '<textarea placeholder="IHR TEXT">Inhalt</textarea><input aria-label="SUCHE" value="Suche">'
        '<p translate=no title="Nicht das">Text</p><img alt="" title=Bare>'  # translate=no: kept as written
        '<input type="submit" value="SENDEN"><input type=text value="Eingabe"></div>'
    )
    # Read back as written: the parts with the attribute segments left out are the page.
    parts = read_html(page)
    assert "".join(p if isinstance(p, str) else "" if p.attribute else p.raw for p in parts) == page
    assert write_html(parts, [None] * len(segments(parts))) == page  # nothing translated: as it was
    # Inline reading (one segment, /v1/align's marked text) keeps attributes as written.
    (segment,) = segments(read_html('<a title="Das Haus">Haus</a>', blocks=False))
    assert segment.marked.text == "Haus" and not segment.elements


def test_html_code_is_kept_as_written_and_unclosed_comments_stay_comments() -> None:
    out = translate_page("<p>Rufen Sie <code>make &amp; install</code> auf.</p><!-- nicht <b>das</b>")
    assert out == "<p>RUFEN SIE <code>make &amp; install</code> AUF.</p><!-- nicht <b>das</b>"


def test_untranslatable_segments_are_written_as_they_were() -> None:
    page = "<p>&nbsp;&#8212;&nbsp;</p><td> &ndash; </td><td> 42\n kg </td>"
    assert translate_page(page) == "<p>&nbsp;&#8212;&nbsp;</p><td> &ndash; </td><td> 42 KG </td>"


def test_a_failed_segment_keeps_its_source_and_is_counted() -> None:
    report = PlacementReport()
    marked = read_element(fragment("Das <g id='1'>Haus</g>"))
    placed = place_segments([marked], lambda texts: [RuntimeError("model failed")], report)
    assert report.failed == ["segment 0: model failed"] and report.translated == 0
    assert placed == [None]


class WellFormed(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ok = True

    def handle_starttag(self, tag, attrs):
        if tag not in ("br", "img"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        self.ok = self.ok and bool(self.stack) and self.stack.pop() == tag


def is_well_formed(markup: str) -> bool:
    checker = WellFormed()
    checker.feed(markup)
    return checker.ok and not checker.stack


# --------------------------------------------------------------------------- XML


def test_xml_fragments_carry_xliff_inline_codes() -> None:
    root = fragment('Klicken Sie <g id="1">hier</g><x id="2"/> und <ph id="3">&lt;b&gt;</ph>fertig.')
    marked = read_element(root)
    assert marked.text == "Klicken Sie hier und fertig."
    target = "CLICK HERE AND FINISHED."
    links = [(0, 0), (2, 1), (3, 2), (4, 3), (5, 4)]
    write_element(root, transfer(marked, target, word_map(marked.text, target, links)))
    assert fragment_text(root) == 'CLICK <g id="1">HERE</g><x id="2"/> AND <ph id="3">&lt;b&gt;</ph>FINISHED.'


def test_xml_with_entity_declarations_or_errors_is_refused() -> None:
    bomb = b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><l>&b;</l>'
    with pytest.raises(XMLInputError, match="entity"):
        parse_xml(bomb)
    with pytest.raises(XMLInputError, match="well-formed"):
        fragment("<g>offen")


def test_the_share_keeps_a_stray_hard_link_out_of_the_tag() -> None:
    """ "yesterday" links to "Mantel" (its row's argmax) but draws only 40% of its row from it:
    the complete mapping takes it into the tag, the span by share does not."""
    source, target = "einen neuen Mantel gestern", "a new coat yesterday"
    marked = Marked(source, [Tag(6, 18, "b")])  # "neuen Mantel"
    alignment = word_map(source, target, diagonal(3), soft={(3, 2): 0.4, (3, 3): 0.35, (3, 0): 0.25})
    assert transfer(marked, target, alignment, method="links").words[0] == [1, 2, 3]
    assert transfer(marked, target, alignment).words[0] == [1, 2]
    with pytest.raises(ValueError, match="method"):
        transfer(marked, target, alignment, method="nearest")


def test_a_map_that_does_not_spell_the_translation_places_by_position() -> None:
    """A translation whose pieces do not spell its text (an unknown piece decodes otherwise)
    has a map of other words: its tags go by relative position, all counted as approximated."""
    builder = MarkupBuilder()
    builder.text("der ")
    handle = builder.open("b")
    builder.text("Hund")
    builder.close(handle)
    builder.text(" bellt")
    marked = builder.build()
    wrong = word_map("der Hund bellt", "the < unk > barks", diagonal(3))  # the map's words: 5, the text's: 3
    placed = place_translation(marked, Translation("the dog barks", wrong))
    assert placed.words == [[1]] and placed.approximated == [0]
    assert fits(word_map("a b", "x y", diagonal(2)), "a b", "x y") and not fits(wrong, marked.text, "the dog barks")


def translate_markdown(text: str) -> str:
    from seq2seq.documents.files import Limits, translate_document
    from seq2seq.documents.formats.md import read_markdown

    return translate_document(read_markdown(text.encode(), Limits()), upper_translate).data.decode()


def test_markdown_front_matter_translates_reader_visible_values_and_keeps_the_rest() -> None:
    yaml = (
        "---\n"
        "title: Mein kleines Haus\n"
        "description: 'Das ist ''mein'' Haus'\n"
        'summary: "Ein Haus"\n'
        "tags: [haus, garten]\n"
        "date: 2024-01-01\n"
        "layout: post\n"
        "---\n"
        "\n"
        "# Das Haus\n"
    )
    assert translate_markdown(yaml) == (
        "---\n"
        "title: MEIN KLEINES HAUS\n"
        "description: 'DAS IST ''MEIN'' HAUS'\n"  # a quote inside single quotes stays doubled
        'summary: "EIN HAUS"\n'
        "tags: [haus, garten]\n"  # data, not text: kept
        "date: 2024-01-01\n"
        "layout: post\n"
        "---\n"
        "\n"
        "# DAS HAUS\n"
    )
    # a plain value whose translation YAML would misread is written quoted
    assert translate_markdown("---\ntitle: Haus und Garten\n---\nText.\n").startswith("---\ntitle: HAUS UND GARTEN\n")
    assert translate_markdown("---\ntitle: Ein Haus: klein\n---\nText.\n") == (
        '---\ntitle: "EIN HAUS: KLEIN"\n---\nTEXT.\n'
    )
    toml = '+++\ntitle = "Mein Haus"\ndraft = true\n+++\nDas *Haus* ist klein.\n'
    assert translate_markdown(toml) == '+++\ntitle = "MEIN HAUS"\ndraft = true\n+++\nDAS *HAUS* IST KLEIN.\n'


def test_thematic_breaks_at_the_top_are_not_front_matter() -> None:
    assert translate_markdown("---\n\nDas Haus.\n\n---\n\nNoch mehr.\n") == "---\n\nDAS HAUS.\n\n---\n\nNOCH MEHR.\n"
    assert translate_markdown("---\nDas Haus.\n") == "---\nDAS HAUS.\n"  # never closed


def test_inline_html_translates_attribute_values_apart_from_its_one_segment() -> None:
    from seq2seq.documents.inline import read_inline

    text = '<img alt="Ein Hund" src="h.png">Das <a title="Ein Haus" href="/haus">Haus</a> ist klein.'
    inline = read_inline(text, "html", attributes=True)
    assert inline.marked.text == "Das Haus ist klein."  # the text's one segment: its map is over these words
    assert [value.text for value in inline.attributes] == ["Ein Hund", "Ein Haus"]
    (placed,) = place_segments([inline.marked], upper_translate)
    values = place_segments(inline.attributes, upper_translate)
    assert inline.write(placed, values) == (
        '<img alt="EIN HUND" src="h.png">DAS <a title="EIN HAUS" href="/haus">HAUS</a> IST KLEIN.'
    )
    assert (
        inline.write(placed)
        == '<img alt="Ein Hund" src="h.png">DAS <a title="Ein Haus" href="/haus">HAUS</a> IST KLEIN.'
    )
    # without `attributes` (what /v1/align and `crossalign align --markup` read) they are kept
    kept = read_inline(text, "html")
    assert kept.attributes == [] and kept.marked.text == inline.marked.text


# --------------------------------------------------------------------------- Word runs


def test_a_word_two_formats_land_on_is_written_in_the_innermost_ones_properties() -> None:
    from lxml import etree

    from seq2seq.documents.office import WORD, WORD_NS, read_paragraph, write_paragraph

    run = '<w:r>{}<w:t xml:space="preserve">{}</w:t></w:r>'
    paragraph = etree.fromstring(
        f'<w:p xmlns:w="{WORD_NS}">'
        + run.format("", "Das ist das ")
        + run.format("<w:rPr><w:b/></w:rPr>", "rote")
        + run.format("", " ")
        + run.format("<w:rPr><w:i/></w:rPr>", "Haus")
        + run.format("", " hier.")
        + "</w:p>"
    )
    read = read_paragraph(paragraph, WORD)
    assert [read.marked.text[t.start : t.end] for t in read.marked.tags] == ["rote", "Haus"]  # bold, then italic
    target = "This is the redhouse here."  # "rote Haus" as one word: both formats land on it
    links = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4), (6, 5)]
    placed = transfer(read.marked, target, word_map(read.marked.text, target, links))
    assert placed.stacks[target.index("redhouse")] == (0, 1)
    write_paragraph(read, placed)
    runs = {"".join(r.itertext()): r for r in paragraph.iter(WORD.tag("r"))}
    properties = runs["redhouse"].find(WORD.tag("rPr"))
    assert [etree.QName(child).localname for child in properties] == ["i"]  # the innermost (last opened)
