"""Books made by real tools (``fixtures/``, each with the command that made
it), spoken on the tiny checkpoint and read back through their captions,
which hold the text spoken: no table of contents, cover, title or copyright
page, note body or note number is heard; nothing else is lost; chapters
are titled as the table of contents; a French quote stays with its
sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_speech.book.source import BookError, read_book
from mlx_speech.book.speech import speak_book

FIXTURES = Path(__file__).parent / "fixtures"
SHORT = {"max_new_tokens": 2, "seed": 5}

LIGHTHOUSE = [
    "Préface",
    "Cette histoire fut écrite au bord de la mer.",
    "La Tempête",
    "Le vent soufflait fort cette nuit-là.",
    "Hélène regarda la mer.",
    "« Où es-tu ? » cria Hélène.",
    "Personne ne répondit.",
    "La lumière tournait sans fin.",
    "Le Matin",
    "Le calme revint avec l’aube.",
    "Les mouettes chantaient.",
    "« Tout va bien », dit le pêcheur.",
]
LIGHTHOUSE_LEFT_OUT = [
    "table of contents",
    "copyright page",
    "2 footnotes",
    "2 note markers",
]


def _said(tts, path: Path, **options) -> tuple[list[str], list[str]]:
    """The chapters' titles and every caption's text, as spoken."""
    book = speak_book(tts, path, **SHORT, **options)
    return [chapter.title for chapter in book.chapters], [c.text for c in book.captions]


@pytest.mark.parametrize("name", ["lighthouse-epub3.epub", "lighthouse-epub2.epub"])
def test_a_pandoc_epub_is_heard_as_a_reader_reads_it(speaking_tts, name):
    titles, said = _said(speaking_tts, FIXTURES / name)
    assert titles == ["Préface", "La Tempête", "Le Matin"]
    assert said == LIGHTHOUSE
    left_out = " | ".join(read_book(FIXTURES / name).left_out)
    for kind in [*LIGHTHOUSE_LEFT_OUT, "cover", "title page"]:
        assert kind in left_out


def test_the_markdown_source_is_heard_the_same(speaking_tts):
    titles, said = _said(speaking_tts, FIXTURES / "lighthouse.md")
    assert titles == ["Préface", "La Tempête", "Le Matin"]
    assert said == [line.replace("’", "'") for line in LIGHTHOUSE]
    left_out = " | ".join(read_book(FIXTURES / "lighthouse.md").left_out)
    assert all(kind in left_out for kind in LIGHTHOUSE_LEFT_OUT[1:])


def test_a_calibre_epub_falls_back_to_its_spine_and_skips_its_notes(speaking_tts):
    """calibre splits the chapters into files, each note marker linking to
    the notes in another file, and builds its table of contents of the
    notes' links: the spine gives the chapters, and no note is heard."""
    name = FIXTURES / "lighthouse-calibre.epub"
    titles, said = _said(speaking_tts, name)
    assert titles == ["Préface", "La Tempête", "Le Matin"]
    assert said == [line.replace("’", "'") for line in LIGHTHOUSE]
    left_out = " | ".join(read_book(name).left_out)
    assert "the table of contents: it is broken (3 of its entries point at" in left_out
    for kind in ("copyright page", "2 note markers", "footnote", "cover"):
        assert kind in left_out


def test_an_ebooklib_epub_skips_its_contents_page_and_notes(speaking_tts):
    titles, said = _said(speaking_tts, FIXTURES / "notes-ebooklib.epub")
    assert titles == ["Le Départ", "Le Retour", "La Fin"]
    assert said == [
        "Le Départ",
        "La mer était calme.",
        "Marie partit à l’aube.",
        "Le Retour",
        "It was a cold day in April.",
        "The clocks were striking.",
        "La Fin",
        "Tout finit bien.",
    ]
    left_out = read_book(FIXTURES / "notes-ebooklib.epub").left_out
    assert "the table of contents (contents.xhtml)" in left_out
    assert "the copyright page ('Copyright')" in left_out


@pytest.mark.parametrize("name", ["lighthouse-epub3.epub", "lighthouse.md"])
def test_footnotes_can_be_read_at_their_chapters_end(speaking_tts, name):
    titles, said = _said(speaking_tts, FIXTURES / name, footnotes="chapter-end")
    tempest = said.index("La Tempête")
    morning = said.index("Le Matin")
    assert said[tempest:morning][-2:] == ["Note 1.", "Une tempête de force dix."]
    assert said[-2:] == ["Note 1.", "Vers six heures."]


def test_a_pdf_is_heard_by_its_outline_without_headers_or_page_numbers(speaking_tts):
    titles, said = _said(speaking_tts, FIXTURES / "outlined.pdf")
    assert titles == ["Chapter One: Arrival", "Chapter Two: The Lamp"]
    assert said == [
        "Chapter One: Arrival",
        "The ferry reached the harbour at dawn.",
        "Gulls circled over the grey water and the fishermen were already mending "
        "their nets.",
        "Nobody spoke of the storm.",
        "The old keeper watched the boats with an extraordinary patience, as he "
        "always had.",
        "Chapter Two: The Lamp",
        "At night the lamp turned slowly.",
        "Its beam crossed the water again and again.",
        "By morning the sea was calm once more.",
    ]
    left_out = read_book(FIXTURES / "outlined.pdf").left_out
    assert left_out == (
        "4 page numbers",
        "4 running headers",
        "the title page ('The Quiet Harbour')",
    )


def test_a_pdf_without_an_outline_is_one_chapter_and_a_locked_one_refused(tmp_path):
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(FIXTURES / "outlined.pdf"))
    writer._root_object.pop("/Outlines", None)
    plain = tmp_path / "plain.pdf"
    writer.write(plain)
    book = read_book(plain)
    assert [chapter.title for chapter in book.chapters] == ["The Quiet Harbour"]
    assert "extraordinary patience" in book.chapters[0].text
    writer.encrypt("secret")
    locked = tmp_path / "locked.pdf"
    writer.write(locked)
    with pytest.raises(BookError, match="is encrypted"):
        read_book(locked)


def test_page_numbers_are_left_out_but_a_chapters_roman_number_is_not():
    from mlx_speech.book.pdf import _without_running_lines

    pages = [["iv", "I", "Words one."], ["Page 5", "II", "Words two."], ["3/10", "Three."]]
    kept, left_out = _without_running_lines(pages)
    assert kept == [["I", "Words one."], ["II", "Words two."], ["Three."]]
    assert left_out == ["3 page numbers"]


def test_a_pdf_paragraph_goes_on_across_a_page_that_ends_mid_sentence():
    from mlx_speech.book.pdf import _joined_across_pages, _paragraphs

    page_one = _paragraphs(["A whole sentence ends here.", "The next one runs on"])
    page_two = _paragraphs(["to the next page, ending there.", "Short."])
    (section,) = _joined_across_pages([("Title", page_one + page_two)])
    assert section[1] == [
        "A whole sentence ends here. The next one runs on to the next page, ending "
        "there. Short."
    ]
