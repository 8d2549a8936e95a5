"""Books made to break the reader and the store: a sentence without audio,
a kept file that does not read, an EPUB that repeats a document without
bound or has an empty table of contents or a DTD of its own, tables of
contents as long as the book, titles that make names too long or reorder
what is shown, and more chapters than a format marks."""

from __future__ import annotations

import io
import sys
import tracemalloc
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
from mutagen.mp4 import MP4

import mlx_speech
from mlx_speech.audio.chapters import ChapterMark, check_chapter_count, write_book_audio
from mlx_speech.book.files import chapter_paths, file_name, partial_path
from mlx_speech.book.source import BookError, book_of
from mlx_speech.book.speech import speak_book
from mlx_speech.book.store import SpokenStore
from tests.tts.support.probe import probed
from tests.tts.support.raw_epub import page, raw_epub

SHORT = {"max_new_tokens": 3, "seed": 5}
PAUSE_ONLY = "Hello there.\n\n[pause:0s]\n\nBye now.\n"


# A sentence without audio


def test_a_sentence_without_audio_adds_nothing_and_a_rerun_finishes(speaking_tts, tmp_path):
    path = tmp_path / "p0.txt"
    path.write_text(PAUSE_ONLY)
    store = tmp_path / "kept"
    for _ in range(2):  # the second run resumes from what the first kept
        book = speak_book(speaking_tts, path, store=store, **SHORT)
        written = book.write(tmp_path / "p0.flac")
        assert [c.text for c in book.captions] == ["Hello there.", "Bye now."]
        assert book.captions[-1].end == soundfile.info(written).frames
    hello = speaking_tts.speak("Hello there.", **SHORT).samples
    bye = speaking_tts.speak("Bye now.", **SHORT).samples
    samples, _ = soundfile.read(written, dtype="float32")
    np.testing.assert_allclose(samples, np.concatenate([hello, bye]), atol=2**-14)


def test_a_kept_file_that_does_not_read_is_spoken_again(speaking_tts, tmp_path):
    path = tmp_path / "three.txt"
    path.write_text("One here.\n\nTwo here.\n\nThree here.\n")
    store = tmp_path / "kept"
    first = speak_book(speaking_tts, path, store=store, **SHORT)
    kept = sorted(store.glob("*.flac"))
    assert len(kept) == 3
    kept[0].write_bytes(b"")  # what a run of an older version left
    kept[1].write_bytes(kept[1].read_bytes()[:100])  # a header cut short
    told = []
    again = speak_book(speaking_tts, path, store=store, spoken=told.append, **SHORT)
    assert len(told) == 2
    for before, after in zip(first.chapters, again.chapters, strict=True):
        np.testing.assert_array_equal(before.audio.samples, after.audio.samples)


def test_a_book_of_takes_that_end_at_once_is_written_whole(stopping_tts, tmp_path):
    """With this seed the stopping checkpoint ends 8 of its 18 takes
    at their first frame: those sentences have no audio and no caption; the
    rest meet the audio."""
    text = "".join(
        f"# Part {part}\n\n"
        + " ".join(f"Sentence {8 * part + n} is said." for n in range(8))
        + "\n\n"
        for part in range(2)
    )
    path = tmp_path / "stops.md"
    path.write_text(text)
    options = {"max_new_tokens": 3, "seed": 19, "temperature": 1.0}
    told = []
    book = speak_book(
        stopping_tts, path, store=tmp_path / "kept", spoken=told.append, **options
    )
    empty = [t for t in told if t.samples == 0]
    assert len(empty) >= 3 and len(told) - len(empty) >= 3  # many empty, some heard
    written = book.write(tmp_path / "stops.m4b")
    found = probed(written)
    total = sum(len(chapter.audio.samples) for chapter in book.chapters)
    assert book.captions[-1].end == total
    assert len(book.captions) == len(told) - len(empty)
    assert float(found["format"]["duration"]) == pytest.approx(total / 48000, abs=0.03)
    assert [c["tags"]["title"] for c in found["chapters"]] == [
        chapter.title for chapter in book.chapters
    ]


def test_an_empty_sentence_is_kept_as_such(tmp_path):
    with SpokenStore(tmp_path / "kept") as store:
        store.save("k", np.zeros(0, np.float32), 48000)
        assert store.has("k") and store.frames("k") == 0 and len(store.load("k")) == 0
    with SpokenStore(tmp_path / "kept") as store:  # as the next run finds it
        assert store.has("k") and store.frames("k") == 0


# EPUBs that expand


def test_a_spine_that_repeats_a_document_reads_it_once():
    body = "<h1>One</h1>" + "<p>Words and more words in a paragraph here.</p>" * 2000
    documents = {"one.xhtml": page(body)}
    data = raw_epub(documents, ["one.xhtml"] * 1000, [("One", "one.xhtml")])
    assert len(data) < 2000  # 1.8 KB that once became 86 MB of text
    once = book_of(raw_epub(documents, ["one.xhtml"], [("One", "one.xhtml")]), "a.epub")
    assert book_of(data, "repeats.epub") == once


def test_the_text_an_epub_yields_is_bounded_as_it_is_read():
    paragraph = "<p>" + "word " * 2000 + "</p>"
    documents = {f"c{n}.xhtml": page(paragraph * 10) for n in range(20)}  # 2 MB
    toc = [(f"C{n}", name) for n, name in enumerate(documents)]
    data = raw_epub(documents, list(documents), toc)
    assert len(data) < 100_000
    with pytest.raises(BookError, match="more than 1 MB of text"):
        book_of(data, "dense.epub", max_bytes=1024 * 1024)
    assert len(book_of(data, "dense.epub").chapters) == 20  # within 16 MB


def test_an_empty_navmap_reads_the_spine():
    documents = {
        "a.xhtml": page("<h1>First</h1><p>Alpha words.</p>"),
        "b.xhtml": page("<h1>Second</h1><p>Beta words.</p>"),
    }
    book = book_of(raw_epub(documents, list(documents), None), "empty-toc.epub")
    assert [chapter.title for chapter in book.chapters] == ["First", "Second"]
    assert book.chapters[1].text == "Second\n\nBeta words."


def test_an_internal_dtd_subset_is_not_spoken():
    document = page("<h1>One</h1><p>The words.</p>", title="Never Said").replace(
        "?>\n", '?>\n<!DOCTYPE html [\n  <!ENTITY who "Jane">\n]>\n'
    )
    data = raw_epub({"a.xhtml": document}, ["a.xhtml"], [("One", "a.xhtml")])
    book = book_of(data, "dtd.epub")
    assert book.chapters[0].text == "One\n\nThe words."


def _line_events(call) -> int:
    """Python lines run by ``call``: a count, not a time, that grows with the
    work done."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def test_reading_a_long_table_of_contents_grows_with_the_book():
    def work(chapters: int) -> int:
        documents = {f"c{n}.xhtml": page(f"<p>Text {n}.</p>") for n in range(chapters)}
        toc = [(f"C{n}", f"c{n}.xhtml") for n in range(chapters)]
        data = raw_epub(documents, list(documents), toc)
        return _line_events(lambda: book_of(data, "long.epub"))

    small, large = work(100), work(400)
    assert large < 5 * small  # four times the book: about four times the work


def test_markdown_holds_one_blocks_tokens_at_a_time():
    """Front matter that never closes, then short lines: one paragraph of
    50,000 lines, whose tokens once took over 100 bytes a byte of text."""
    data = ("---\n" + "ab: c\n" * 50_000).encode()
    tracemalloc.start()
    try:
        book = book_of(data, "open.md")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert book.chapters[0].text.startswith("ab: c ab: c")
    assert peak < 50 * len(data)


# Names and chapter counts


def test_a_long_title_makes_a_name_that_fits_and_cuts_no_character():
    for title in ("章" * 120, "🎧" * 90, "é" * 150):
        name = file_name(title, "chapter")
        assert len(name.encode()) <= 200
        assert title.startswith(name)
        (path,) = chapter_paths([title] * 1, Path("/x"), ".m4b")
        assert len(partial_path(path).name.encode()) <= 255


def test_names_keep_no_bidirectional_controls():
    assert file_name("x\u202eexe.m4b", "book") == "xexe.m4b"
    assert file_name("\u2066a\u2069b\u200f\u061c", "book") == "ab"


def test_chapter_paths_number_in_order():
    paths = chapter_paths([f"T{n}" for n in range(12)], Path("d"), ".mp3")
    assert [p.name for p in paths[:2]] == ["01 T0.mp3", "02 T1.mp3"]


@pytest.mark.parametrize(("name", "limit"), [("opus", 999), ("flac", 999), ("mp3", 255)])
def test_a_format_refuses_more_chapters_than_it_marks(name, limit, tmp_path):
    check_chapter_count(name, limit)
    with pytest.raises(ValueError, match=rf"{limit + 1} chapters .*\.{name}.*\.m4b"):
        check_chapter_count(name, limit + 1)
    marks = [ChapterMark(f"C{n}", n * 10, n * 10 + 10) for n in range(limit + 1)]
    path = tmp_path / f"many.{name}"
    with pytest.raises(ValueError, match="chapters"):
        audio = np.full(10 * (limit + 1), 0.1, np.float32)
        write_book_audio(path, [audio], 48000, 1, marks)
    assert not path.exists()


def test_m4b_marks_every_chapter(tmp_path):
    count = 1200
    marks = [ChapterMark(f"C{n}", n * 480, n * 480 + 480) for n in range(count)]
    path = tmp_path / "many.m4b"
    audio = np.full(480 * count, 0.1, np.float32)
    write_book_audio(path, [audio], 48000, 1, marks)
    check_chapter_count("m4b", count)
    chapters = probed(path)["chapters"]
    assert len(chapters) == count and chapters[-1]["tags"]["title"] == f"C{count - 1}"
    assert len(MP4(path).chapters) == 255  # the Nero list some players read instead


def test_the_python_api_says_no_audio_in_words(speaking_tts, tmp_path):
    path = tmp_path / "silent.txt"
    path.write_text("[pause:0s]\n\nWords.\n")
    book = speak_book(speaking_tts, path, max_new_tokens=3, seed=1)
    book = replace(book, chapters=[])  # as a book whose every take ended at once
    assert book.captions == []
    with pytest.raises(BookError, match="no sentence of the book has audio"):
        book.write(tmp_path / "silent.m4b")


def test_the_package_exports_the_books_entry_point():
    assert mlx_speech.speak_book is speak_book


def test_what_a_reader_skips_is_left_out_of_a_document():
    body = (
        "<h1>One</h1><p>Kept words.<span epub:type='pagebreak' id='p7'>7</span>"
        " Still kept.<sup><a href='#n1' role='doc-noteref'>[1]</a></sup></p>"
        "<section epub:type='dedication'><p>For my mother.</p></section>"
        "<nav epub:type='loi'><p>Figure one.</p></nav>"
        "<section role='doc-index'><p>Apples, 3.</p></section>"
        "<aside role='doc-footnote' id='n1'><p>The note.<a href='#r1'"
        " role='doc-backlink'>↩︎</a></p></aside>"
        "<p>Last <a href='#x'>*</a> words.</p>"
    )
    data = raw_epub({"a.xhtml": page(body)}, ["a.xhtml"], [("One", "a.xhtml")])
    book = book_of(data, "skips.epub")
    assert book.chapters[0].text == (
        "One\n\nKept words. Still kept.\n\nFor my mother.\n\nLast words."
    )
    assert set(book.left_out) == {
        "a page number",
        "2 note markers",
        "a list of illustrations",
        "an index",
        "a footnote",
    }


_CONTAINER = (
    '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:'
    'opendocument:xmlns:container"><rootfiles><rootfile full-path="content.opf" '
    'media-type="application/oebps-package+xml"/></rootfiles></container>'
)
_PACKAGE = '<package xmlns="http://www.idpf.org/2007/opf" version="2.0">{}</package>'


@pytest.mark.parametrize("parts", ["<metadata/><manifest/>", "<manifest/><spine/>"])
def test_an_incomplete_package_document_is_said_in_words(parts):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", _CONTAINER)
        archive.writestr("content.opf", _PACKAGE.format(parts))
    with pytest.raises(BookError) as refused:
        book_of(out.getvalue(), "broken.epub")
    assert str(refused.value) == (
        "'broken.epub' could not be read as an EPUB: its package document (.opf) is "
        "incomplete: an EPUB needs its metadata, manifest and spine"
    )


@pytest.mark.parametrize(
    ("toc", "why"),
    [
        (
            [("One", "a.xhtml"), ("Lost", "missing.xhtml")],
            "1 of its entries point at nothing",
        ),
        ([("One", "a.xhtml"), ("Again", "a.xhtml")], "2 of its entries point at one place"),
    ],
)
def test_a_broken_table_of_contents_falls_back_to_the_reading_order(toc, why):
    documents = {
        "a.xhtml": page("<h1>First</h1><p>Alpha words.</p>"),
        "b.xhtml": page("<h1>Second</h1><p>Beta words.</p>"),
    }
    book = book_of(raw_epub(documents, list(documents), toc), "broken-toc.epub")
    assert [chapter.title for chapter in book.chapters] == ["First", "Second"]
    assert book.left_out[0] == (
        f"the table of contents: it is broken ({why}); chapters follow the reading order"
    )
