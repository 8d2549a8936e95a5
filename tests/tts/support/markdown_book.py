"""A short Markdown book: front matter, then three chapters of numbered
sentences, as the book tests speak it."""

from __future__ import annotations

TITLE, AUTHOR = "A Short Book", "A. Writer"
CHAPTERS = ("Arrival", "The Long Night", "Home")


def markdown_book(sentences_per_chapter: int) -> str:
    lines = ["---", f"title: {TITLE}", f"author: {AUTHOR}", "---", ""]
    for number, title in enumerate(CHAPTERS, start=1):
        lines += [f"# {title}", ""]
        lines += [
            f"Sentence {n} of part {number} is here."
            for n in range(1, 1 + sentences_per_chapter)
        ]
        lines.append("")
    return "\n".join(lines)
