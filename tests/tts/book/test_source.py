"""Reading a book file into chapters: plain text, Markdown and EPUB, and a
one-line ``BookError`` for every book that cannot be read."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
from ebooklib import epub

from mlx_speech.book import source
from mlx_speech.book.source import (
    MAX_BOOK_BYTES,
    Book,
    BookError,
    Chapter,
    book_of,
    read_book,
)

MARKDOWN_BOOK = """\
---
title: "The Markdown Book"
author: Jane Doe
---

# The Markdown Book

An *opening* line
that wraps.

## First Chapter

Some **bold** text, `code span`, and a [link](https://example.com) here.

![A lighthouse at dusk](light.png) ![](decor.png)

<div class="note">
hidden html
</div>

```python
print("never spoken")
```

    indented code is dropped too

- one item
- two *items*

> A quoted line
> continues.

### A Subheading

Inline <span>html</span> goes &amp; entities stay.

## Second Chapter

Last words.
"""


def _raises(match: str, call, *args, **kwargs) -> str:
    with pytest.raises(BookError, match=match) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


# Plain text


def test_plain_text_is_one_chapter_of_joined_paragraphs(tmp_path: Path):
    path = tmp_path / "my-story.txt"
    path.write_bytes(
        b"\xef\xbb\xbfThe first line of a paragraph\r\nthat was hard-wrapped\r\n"
        b"at forty columns.\r\n\r\n  \r\n\tSecond   paragraph.\n\n* * *\n\nThird.\n"
    )
    book = read_book(path)
    assert book == Book(
        title=None,
        author=None,
        chapters=(
            Chapter(
                "my-story",
                "The first line of a paragraph that was hard-wrapped at forty columns."
                "\n\nSecond paragraph.\n\nThird.",
            ),
        ),
    )


def test_book_of_takes_the_kind_and_chapter_title_from_the_name():
    book = book_of(b"Hello there.\n", "uploads/Notes.TEXT")
    assert book.chapters == (Chapter("Notes", "Hello there."),)


# Markdown


def test_markdown_chapters_are_speakable_text_without_markup(tmp_path: Path):
    path = tmp_path / "novel.md"
    path.write_text(MARKDOWN_BOOK, encoding="utf-8")
    book = read_book(path)
    assert (book.title, book.author) == ("The Markdown Book", "Jane Doe")
    assert [chapter.title for chapter in book.chapters] == [
        "The Markdown Book",
        "First Chapter",
        "Second Chapter",
    ]
    opening, first, second = (chapter.text for chapter in book.chapters)
    assert opening == "An opening line that wraps."
    assert first == (
        "First Chapter\n\n"
        "Some bold text, code span, and a link here.\n\n"
        "A lighthouse at dusk\n\n"
        "one item\n\n"
        "two items\n\n"
        "A quoted line continues.\n\n"
        "A Subheading\n\n"
        "Inline html goes & entities stay."
    )
    assert second == "Second Chapter\n\nLast words."
    spoken = "\n".join(chapter.text for chapter in book.chapters)
    for markup in (
        "**",
        "*",
        "`",
        "[",
        "](",
        "#",
        "<",
        ">",
        "never spoken",
        "hidden",
        "---",
    ):
        assert markup not in spoken
    assert "indented code" not in spoken and "title:" not in spoken


def test_markdown_splits_at_the_highest_heading_level_used():
    text = "# Part One\n\ntext one\n\n## Scene\n\nmore\n\n# Part Two\n\ntext two\n"
    book = book_of(text.encode(), "parts.md")
    assert book.title is None
    assert book.chapters == (
        Chapter("Part One", "Part One\n\ntext one\n\nScene\n\nmore"),
        Chapter("Part Two", "Part Two\n\ntext two"),
    )


def test_markdown_with_only_second_level_headings_and_a_preface():
    text = "Before any heading.\n\n## One\n\nFirst.\n\n## Two\n\nSecond.\n"
    book = book_of(text.encode(), "essays.markdown")
    assert [(c.title, c.text) for c in book.chapters] == [
        ("essays", "Before any heading."),
        ("One", "One\n\nFirst."),
        ("Two", "Two\n\nSecond."),
    ]


def test_a_lone_first_heading_over_chapters_is_the_book_title():
    text = "# The *Title*\n\n## A\n\nalpha\n\n## B\n\nbeta\n"
    book = book_of(text.encode(), "b.md")
    assert book.title == "The Title"
    assert [c.title for c in book.chapters] == ["A", "B"]
    assert "The Title" not in "".join(c.text for c in book.chapters)


def test_a_lone_heading_without_lower_ones_is_the_chapter_title():
    book = book_of(b"# Only\n\nJust this.\n", "b.md")
    assert book.title is None
    assert book.chapters == (Chapter("Only", "Only\n\nJust this."),)


def test_markdown_without_headings_is_one_chapter_named_by_front_matter_or_stem():
    plain = book_of(b"Words here.\n", "notes.md")
    assert plain.chapters == (Chapter("notes", "Words here."),)
    titled = book_of(b"---\ntitle: 'Named'\nauthor:\n---\nWords.\n", "notes.md")
    assert (titled.title, titled.author) == ("Named", None)
    assert titled.chapters == (Chapter("Named", "Words."),)


# EPUB


def _html(uid: str, file_name: str, body: str) -> epub.EpubHtml:
    page = epub.EpubHtml(uid=uid, title=uid, file_name=file_name, lang="en")
    page.content = f"<html><head><title>{uid}</title></head><body>{body}</body></html>"
    return page


def _write_epub(path: Path, pages: list, toc: list, title="The Test Book", author=None):
    book = epub.EpubBook()
    book.set_identifier("id-1")
    book.set_title(title)
    book.set_language("en")
    if author:
        book.add_author(author)
    for page in pages:
        book.add_item(page)
    book.toc = toc
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = [pages[0], "nav", *pages[1:]]
    epub.write_epub(str(path), book)
    return path


def _three_chapter_epub(path: Path) -> Path:
    cover = _html("cover", "cover.xhtml", '<img src="cover.jpg" alt="Cover"/>')
    one = _html(
        "one",
        "chap_1.xhtml",
        "<h1>Chapter One</h1><script>var never = 1;</script><style>p {}</style>"
        "<p>It <em>was</em> a dark<br/>and stormy\n   night.</p><!-- a comment -->"
        "<ul><li>First</li><li>Sec<span>ond</span></li></ul>",
    )
    two = _html("two", "chap_2.xhtml", "<h1>Chapter Two</h1><div><p>Middle part.</p></div>")
    three = _html("three", "chap_3.xhtml", "<h1>Chapter Three</h1><p>The naïve end.</p>")
    toc = [
        epub.Link("chap_1.xhtml", "Chapter One", "one"),
        (
            epub.Section("Part Two"),
            [
                epub.Link("chap_2.xhtml", "Chapter Two", "two"),
                epub.Link("chap_3.xhtml", "Chapter Three", "three"),
            ],
        ),
    ]
    return _write_epub(path, [cover, one, two, three], toc, author="Ada Writer")


def test_epub_chapters_follow_the_nested_table_of_contents(tmp_path: Path):
    book = read_book(_three_chapter_epub(tmp_path / "book.epub"))
    assert (book.title, book.author) == ("The Test Book", "Ada Writer")
    assert book.chapters == (
        Chapter(
            "Chapter One",
            "Chapter One\n\nIt was a dark\n\nand stormy night.\n\nFirst\n\nSecond",
        ),
        Chapter("Chapter Two", "Chapter Two\n\nMiddle part."),
        Chapter("Chapter Three", "Chapter Three\n\nThe naïve end."),
    )
    spoken = "".join(chapter.text for chapter in book.chapters)
    assert "never" not in spoken and "comment" not in spoken and "<" not in spoken


def test_epub_entries_into_one_document_split_it_at_their_anchors(tmp_path: Path):
    cover = _html("cover", "cover.xhtml", '<img src="cover.jpg" alt=""/>')
    whole = _html(
        "all",
        "all.xhtml",
        '<section><h2 id="one">One</h2><p>First part.</p>'
        '<div><p>Still one, <span id="two">Two begins</span> mid-paragraph.</p>'
        "<p>Second part.</p></div></section>",
    )
    toc = [
        epub.Link("cover.xhtml", "Cover", "cover"),
        epub.Link("all.xhtml#one", "One", "a"),
        epub.Link("all.xhtml#two", "Two", "b"),
    ]
    book = read_book(_write_epub(tmp_path / "split.epub", [cover, whole], toc))
    assert book.author is None
    assert book.chapters == (
        Chapter("One", "One\n\nFirst part.\n\nStill one,"),
        Chapter("Two", "Two begins mid-paragraph.\n\nSecond part."),
    )


def test_a_document_missing_from_the_toc_belongs_to_the_chapter_before(tmp_path: Path):
    pages = [
        _html("cover", "cover.xhtml", "<p></p>"),
        _html("a1", "a1.xhtml", "<h1>One</h1><p>Begun.</p>"),
        _html("a2", "a2.xhtml", "<p>Continued.</p>"),
        _html("b", "b.xhtml", "<h1>Two</h1>"),
    ]
    toc = [epub.Link("a1.xhtml", "One", "a1"), epub.Link("b.xhtml", "  Two\n", "b")]
    path = _write_epub(tmp_path / "long.epub", pages, toc, author="A. One")
    book = read_book(path)
    assert book.chapters == (
        Chapter("One", "One\n\nBegun.\n\nContinued."),
        Chapter("Two", "Two"),
    )


def test_epub_without_a_table_of_contents_reads_the_spine(tmp_path: Path):
    pages = [
        _html("cover", "cover.xhtml", '<img src="c.jpg"/>'),
        _html("a", "a.xhtml", "<div><h2>Opening</h2><p>Alpha.</p></div>"),
        _html("b", "b.xhtml", "<p>Beta.</p>"),
    ]
    data = _write_epub(tmp_path / "flat.epub", pages, []).read_bytes()
    book = book_of(data, "flat.epub")
    assert book.chapters == (
        Chapter("Opening", "Opening\n\nAlpha."),
        Chapter("Chapter 2", "Beta."),
    )


def _rezip(epub_path: Path, extra: dict[str, str]) -> bytes:
    """The EPUB's files, plus ``extra`` ones, in a new zip."""
    out = io.BytesIO()
    with zipfile.ZipFile(epub_path) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            new.writestr(info, old.read(info))
        for name, text in extra.items():
            new.writestr(name, text, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _encryption_xml(algorithm: str) -> str:
    return (
        '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"'
        ' xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
        f'<enc:EncryptionMethod Algorithm="{algorithm}"/>'
        '<enc:CipherData><enc:CipherReference URI="EPUB/chap_1.xhtml"/></enc:CipherData>'
        "</enc:EncryptedData></encryption>"
    )


def test_font_obfuscation_is_not_drm(tmp_path: Path):
    for algorithm in (
        "http://www.idpf.org/2008/embedding",
        "http://ns.adobe.com/pdf/enc#RC",
    ):
        data = _rezip(
            _three_chapter_epub(tmp_path / "fonts.epub"),
            {"META-INF/encryption.xml": _encryption_xml(algorithm)},
        )
        assert len(book_of(data, "fonts.epub").chapters) == 3


@pytest.mark.parametrize(
    "extra",
    [
        {
            "META-INF/encryption.xml": _encryption_xml(
                "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
            )
        },
        {"META-INF/rights.xml": "<rights/>"},
    ],
)
def test_drm_is_refused(tmp_path: Path, extra: dict[str, str]):
    data = _rezip(_three_chapter_epub(tmp_path / "locked.epub"), extra)
    _raises(
        r"^'locked.epub' is DRM-protected: speak a copy without DRM$",
        book_of,
        data,
        "locked.epub",
    )


# Errors


def test_an_unknown_suffix_is_refused(tmp_path: Path):
    (tmp_path / "x.docx").write_bytes(b"PK\x03\x04")
    for call, arg in ((read_book, tmp_path / "x.docx"), (book_of, b"PK")):
        args = (arg,) if call is read_book else (arg, "x.docx")
        _raises(
            r"^cannot read 'x.docx': a book is a .txt, .md, .epub or .pdf file; convert",
            call,
            *args,
        )


def test_a_missing_file_a_directory_and_a_fifo_are_refused(tmp_path: Path):
    _raises(r"^cannot read 'gone.txt': no such file", read_book, tmp_path / "gone.txt")
    (tmp_path / "shelf").mkdir()
    _raises(r"^cannot read 'shelf': it is a directory", read_book, tmp_path / "shelf")
    os.mkfifo(tmp_path / "pipe.txt")
    _raises(
        r"^cannot read 'pipe.txt': it is not a regular file",
        read_book,
        tmp_path / "pipe.txt",
    )


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    with open(big, "wb") as file:
        file.truncate(int(20.5 * 1024 * 1024))  # sparse: nothing is written
    _raises(
        r"^'big.txt' is 20.5 MB; the limit is 16 MB: split it into parts$", read_book, big
    )
    huge = tmp_path / "huge.md"
    with open(huge, "wb") as file:
        file.truncate(2 * 1024**3)

    class Unreadable:
        def __init__(self, path):
            self.file = opened(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def fileno(self):
            return self.file.fileno()

        def read(self, *args):
            raise AssertionError("the file was read")

    opened = source.open_regular
    monkeypatch.setattr(source, "open_regular", Unreadable)
    _raises(r"^'huge.md' is 2048.0 MB; the limit is 16 MB", read_book, huge)
    assert MAX_BOOK_BYTES == 16 * 1024 * 1024


def test_bytes_over_the_bound_are_refused():
    data = b"word " * 300_000
    _raises(
        r"^'up.txt' is 1.5 MB; the limit is 1 MB", book_of, data, "up.txt", max_bytes=2**20
    )


def test_epub_that_unpacks_too_big_is_refused(tmp_path: Path):
    data = _rezip(
        _three_chapter_epub(tmp_path / "bomb.epub"), {"EPUB/zeros.bin": "0" * 2**21}
    )
    assert len(data) < 100_000
    _raises(
        r"^'bomb.epub' unpacks to 2.0 MB; the limit is 0.8 MB",
        book_of,
        data,
        "bomb.epub",
        max_bytes=100_000,
    )


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"", "empty.txt"),
        (b"  \n\n\t\r\n", "blank.txt"),
        (b"* * *\n\n---\n", "breaks.txt"),
        (b"```\ncode\n```\n\n<div>\nhtml\n</div>\n\n---\n\n![](img.png)\n", "x.md"),
        (b"---\ntitle: Only Front Matter\n---\n", "front.md"),
    ],
)
def test_a_book_with_no_words_is_refused(data: bytes, name: str):
    _raises(rf"^'{name}' has no text to speak$", book_of, data, name)


def test_an_epub_with_no_words_is_refused(tmp_path: Path):
    path = _write_epub(
        tmp_path / "blank.epub", [_html("c", "c.xhtml", "<img src='c.jpg'/>")], []
    )
    _raises(r"^'blank.epub' has no text to speak$", read_book, path)


@pytest.mark.parametrize(
    ("data", "byte"),
    [
        (b"caf\xe9 au lait", 3),
        (b"\xef\xbb\xbfok \xff", 6),
        (b"%PDF-1.4\n\x00\x01binary", 9),
        (b"PK\x03\x04\x14\x00\x00\x00", 5),
    ],
)
def test_text_that_is_not_utf8_is_refused(data: bytes, byte: int):
    for name in ("x.txt", "x.md"):
        message = _raises(
            rf"^'{name}' is not UTF-8 text \(byte {byte}\): save it as UTF-8",
            book_of,
            data,
            name,
        )
        assert ".epub" in message


def test_a_file_that_is_not_an_epub_is_refused():
    _raises(
        r"^'x.epub' is not an EPUB: it is not a zip file$", book_of, b"plain text", "x.epub"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
    _raises(
        r"^'x.epub' is not an EPUB: .*META-INF/container.xml",
        book_of,
        out.getvalue(),
        "x.epub",
    )


def test_a_broken_epub_is_refused_with_a_short_reason():
    container = (
        '<?xml version="1.0"?><container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/missing.opf"'
        ' media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", container)
    _raises(
        r"^'x.epub' could not be read as an EPUB: \S", book_of, out.getvalue(), "x.epub"
    )
    broken = out.getvalue().replace(b"<rootfiles>", b"<rootfiles")
    _raises(r"^'x.epub' could not be read as an EPUB: \S", book_of, broken, "x.epub")
