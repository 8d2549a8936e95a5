"""The docs a newcomer reads: every link between them lands on a file and
a heading (or an ``id``) that exists, and the contract's pages stay short
enough to read, each reached from its index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CONTRACT_PAGES = sorted((ROOT / "docs" / "speech").glob("*.md"))
MOST_LINES = 400
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (?P<title>.+)$")
ID = re.compile(r"""\bid=["'](?P<id>[^"']+)["']""")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a file's headings (a repeated one gets
    ``-1``, ``-2``), and its elements' ids; fenced code has none."""
    found: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(match["id"] for match in ID.finditer(line))
        heading = HEADING.match(line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading["title"].strip().lower()).replace(" ", "-")
        repeat, unique = 0, slug
        while unique in found:
            repeat += 1
            unique = f"{slug}-{repeat}"
        found.add(unique)
    return found


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code: `[text](url)` is no link
    return [match["target"] for match in LINK.finditer(text)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no such heading in {destination.name}")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_a_heading(path):
    assert broken_links(path) == []


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# Here\n\n## Pace (`speed`)\n\n## Pace (`speed`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](there.md#pace-speed) [b](there.md#pace-speed-1) [c](there.md#pace) "
        "[d](gone.md) [e](#nowhere) [f](https://example.com/#x) `[h](gone.md)`"
        "\n\n```\n[g](gone.md)\n```\n"
    )
    assert broken_links(page) == [
        "there.md#pace: no such heading in there.md",
        "gone.md: no such file",
        "#nowhere: no such heading in page.md",
    ]


@pytest.mark.parametrize("page", CONTRACT_PAGES, ids=lambda page: page.name)
def test_each_contract_page_is_short_and_reached_from_the_index(page):
    assert len(page.read_text(encoding="utf-8").splitlines()) <= MOST_LINES
    index = links(ROOT / "docs" / "speech.md")
    assert any(target.partition("#")[0] == f"speech/{page.name}" for target in index)


def test_the_formats_table_is_what_each_surface_takes():
    """The index's one table of formats says, for each surface, what
    ``audio.formats`` lets it write."""
    from mlx_speech.audio.formats import BOOK_FORMATS, FORMATS, RESPONSE_FORMATS

    text = (ROOT / "docs" / "speech.md").read_text(encoding="utf-8")
    table = text.split("## Formats, on every surface", 1)[1]
    rows = [line for line in table.splitlines() if re.match(r"\| `\w+`", line)]
    taken: dict[str, list[str]] = {"speak": [], "http": [], "book": []}
    for row in rows:
        name = re.match(r"\| `(\w+)`", row)[1]
        cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
        for surface, cell in zip(taken, cells, strict=True):
            if cell.startswith("yes"):
                taken[surface].append(name)
    assert sorted(taken["speak"]) == sorted(FORMATS)
    assert sorted(taken["http"]) == sorted(RESPONSE_FORMATS)
    assert sorted(taken["book"]) == sorted(BOOK_FORMATS)
