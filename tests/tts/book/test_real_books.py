"""Books made by real tools (``fixtures/``, each with the command that made
it), spoken on the tiny checkpoint and read back through their captions,
which hold the text spoken: no table of contents, cover, title or copyright
page, note body or note number is heard; nothing else is lost; chapters
are titled as the table of contents; a French quote stays with its
sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_speech.book.source import read_book
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
