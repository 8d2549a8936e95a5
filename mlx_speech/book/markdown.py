"""A Markdown book: a chapter at each heading of the highest level used (a
lone ``#`` heading over ``##`` chapters is the book's title), the title and
author of its front matter, and what a reader skips left out: pandoc's
heading attributes (``{.unnumbered}``, ``{#id}``) and footnotes, whose
markers are never spoken and whose bodies are skipped or read at the end
of the chapter that cites them (``footnotes``)."""

from __future__ import annotations

import re
from pathlib import PurePath

from markdown_it import MarkdownIt
from mdit_py_plugins.footnote import footnote_plugin

from .model import Book, book_with, chapters_of, counted, notes_read
from .xhtml import SKIPPED

_FRONT_MATTER = re.compile(r"\A---\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
# pandoc's attributes after a heading: {#id .class key=value}, or {-}
_HEADING_ATTRIBUTES = re.compile(r"\s*\{\s*(-|[#.][^{}]*|[\w:-]+=[^{}]*)\}\s*\Z")
# Blocks found first (footnote definitions kept apart, by label), then each
# block's inline text parsed alone: the tokens of one block, not of the
# book, are held at once.
_BLOCKS = MarkdownIt("commonmark").use(footnote_plugin).disable(["inline", "footnote_tail"])
_INLINE = MarkdownIt("commonmark").use(footnote_plugin)


def markdown_book(text: str, name: str, footnotes: str = "skip") -> Book:
    fields, text = _front_matter(text)
    blocks, notes, cited = _blocks(text)
    title = fields.get("title")
    levels = [block[0] for block in blocks if block[0]]
    # One "#" heading at the top over "##" chapters is the book's title.
    if levels.count(1) == 1 and blocks[0][0] == 1 and max(levels) > 1:
        title = title or blocks[0][1]
        blocks, levels = blocks[1:], levels[1:]
    chapter_level = min(levels, default=None)
    unspoken: list[str] = []
    sections: list[tuple[str | None, list[str]]] = []
    labels: list[list[str]] = []  # the notes each section cites, in order
    skipping = False  # in a section whose heading says a reader skips it
    for level, block_text, block_labels, kind in blocks:
        if level == chapter_level:
            skipping = kind is not None
            if skipping:
                unspoken.append(f"the {kind} ({block_text!r})")
                continue
            sections.append((block_text, [block_text]))
            labels.append([])
        elif skipping:
            continue
        elif not sections:
            sections.append((title or PurePath(name).stem, [block_text]))
            labels.append([])
        else:
            sections[-1][1].append(block_text)
        labels[-1] += block_labels
    if footnotes == "chapter-end":
        for (_, paragraphs), cited_here in zip(sections, labels, strict=True):
            paragraphs += _notes_read(cited_here, notes)
    if footnotes == "skip":
        unspoken += [counted("footnote", len(notes)), counted("note marker", cited)]
    left_out = [line for line in unspoken if line]
    return book_with(title, fields.get("author"), chapters_of(sections), name, left_out)


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """The ``title`` and ``author`` of a YAML front matter block (simple
    ``key: value`` lines), and the text after it."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return {}, text
    fields = {}
    for line in (match.group(1) or "").splitlines():
        key, colon, value = line.partition(":")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1].strip()
        if colon and key in ("title", "author") and value:
            fields[key] = value
    return fields, text[match.end() :]


def _blocks(text: str) -> tuple[list, dict[str, list[str]], int]:
    """Each heading and paragraph with words, as (heading level or 0, text,
    the footnote labels it cites, what a reader skips its heading says it
    is); the footnotes' paragraphs by label; how many markers were cited.
    Code, HTML blocks and rules carry no inline text, so they fall away."""
    env: dict = {}
    tokens = _BLOCKS.parse(text, env)
    blocks, notes, note, cited = [], {}, None, 0
    for index, token in enumerate(tokens):
        if token.type == "footnote_reference_open":
            note = notes.setdefault(token.meta["label"], [])
        elif token.type == "footnote_reference_close":
            note = None
        if token.type != "inline":
            continue
        opener = tokens[index - 1]
        level = int(opener.tag[1]) if opener.type == "heading_open" else 0
        said, labels = _inline(token.content, env)
        kind = None
        if level and (attributes := _HEADING_ATTRIBUTES.search(said)):
            said = said[: attributes.start()]
            kind = _skipped_kind(attributes.group(1))
        if note is not None:
            note.append(said)
        elif any(c.isalnum() for c in said):
            cited += len(labels)
            blocks.append((level, said, labels, kind))
    return blocks, notes, cited


def _inline(content: str, env: dict) -> tuple[str, list[str]]:
    """What a block's inline text says, its line breaks as spaces, and the
    labels of the footnotes it cites (their markers are not said)."""
    one_line = content.replace("\\\n", " ").replace("\n", " ")
    inline = _INLINE.parseInline(one_line, env)[0]  # then footnotes, never used
    children = inline.children or []
    labels = [child.meta["label"] for child in children if child.type == "footnote_ref"]
    return " ".join(_inline_text(children).split()), labels


def _inline_text(children: list) -> str:
    """What inline tokens say: markup, link targets and inline HTML dropped,
    an image's alt text kept."""
    pieces = []
    for child in children:
        if child.type in ("text", "text_special", "code_inline"):
            pieces.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            pieces.append(" ")
        elif child.type == "image":
            pieces.append(_inline_text(child.children or []))
    return "".join(pieces)


def _notes_read(labels: list[str], notes: dict[str, list[str]]) -> list[str]:
    """The notes a chapter cites, each once, as paragraphs at its end."""
    cited = dict.fromkeys(labels)
    return notes_read([[p for p in notes.get(label, []) if p] for label in cited])


def _skipped_kind(attributes: str) -> str | None:
    """What a reader skips that a heading's attributes say its section is
    (``.titlepage``, ``epub:type=copyright-page``)."""
    for word in attributes.replace("=", " ").replace(".", " ").split():
        if word.lower() in SKIPPED and word.lower() not in ("note", "footnote"):
            return SKIPPED[word.lower()]
    return None
