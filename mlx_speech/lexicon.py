"""A pronunciation lexicon: words to say otherwise ("SQL" as "sequel"),
applied to a text before its normalization.

Two file forms, told apart by their content:

- W3C PLS (a ``<lexicon>`` document): each ``<lexeme>``'s ``<grapheme>``s
  are said as its ``<alias>``. A lexeme with only ``<phoneme>``s is refused
  (no model here reads phonemes), as is a document type (``xml_documents``).
- One entry a line, ``WRITTEN = SAID``; ``#`` starts a comment line.

Matching: whole words (not inside a run of letters, digits or ``_``), except
that a grapheme with a character of a script written without spaces (Chinese,
Japanese) matches anywhere. A grapheme with a capital letter matches only as
written ("SQL" not "sql"); one without matches in any case ("nginx",
"Nginx", "NGINX"). The longest grapheme wins where several start at one
place; an alias is not looked up again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from .regular_files import open_regular
from .xml_documents import XmlError, local_name, parse

MAX_LEXICON_BYTES = 4 * 1024 * 1024
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


class LexiconError(ValueError):
    """A lexicon file that cannot be used, saying where."""


class Lexicon:
    def __init__(self, entries: Iterable[tuple[str, str]]):
        self.entries = {}
        for written, said in entries:
            written = written.strip()
            if not written:
                raise LexiconError("an entry has no written form")
            self.entries[written] = said.strip()
        self._pattern = _pattern(self.entries) if self.entries else None
        self._folded = {w.lower(): s for w, s in self.entries.items() if w == w.lower()}

    def __len__(self) -> int:
        return len(self.entries)

    def apply(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(self._said, text)

    def _said(self, match: re.Match) -> str:
        found = match.group(0)
        said = self.entries.get(found)
        return said if said is not None else self._folded[found.lower()]


def load_lexicon(path: str | Path) -> Lexicon:
    path = Path(path)
    try:
        with open_regular(path) as handle:  # a FIFO or a device would not end
            data = handle.read(MAX_LEXICON_BYTES + 1)
    except OSError as error:
        why = error.strerror or "it is not a regular file"
        raise LexiconError(f"cannot read the lexicon {path}: {why}") from None
    if len(data) > MAX_LEXICON_BYTES:
        raise LexiconError(f"the lexicon {path} is larger than {MAX_LEXICON_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        why = f"the lexicon {path} is not UTF-8 (byte {error.start})"
        raise LexiconError(why) from None
    try:
        if text.lstrip().startswith("<"):
            return Lexicon(_pls_entries(text))
        return Lexicon(_line_entries(text))
    except (LexiconError, XmlError) as error:
        raise LexiconError(f"the lexicon {path}: {error}") from None


def _pls_entries(text: str) -> list[tuple[str, str]]:
    root = parse(text)
    if local_name(root.tag) != "lexicon":
        raise LexiconError(f"its root is <{local_name(root.tag)}>, not a PLS <lexicon>")
    entries = []
    for number, lexeme in enumerate(root, start=1):
        if local_name(lexeme.tag) != "lexeme":
            continue
        parts = {local_name(part.tag): [] for part in lexeme}
        for part in lexeme:
            parts[local_name(part.tag)].append("".join(part.itertext()))
        if not parts.get("alias"):
            raise LexiconError(
                f"lexeme {number} has no <alias>: only aliases are said (phonemes are not)"
            )
        entries += [(grapheme, parts["alias"][0]) for grapheme in parts.get("grapheme", [])]
    return entries


def _line_entries(text: str) -> list[tuple[str, str]]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        written, equals, said = line.partition("=")
        if not equals:
            shown_line = line.strip()[:60]
            raise LexiconError(f"line {number} is not 'WRITTEN = SAID': {shown_line}")
        entries.append((written, said))
    return entries


def _pattern(entries: dict[str, str]) -> re.Pattern:
    """One alternation, longest first; case-insensitive where a grapheme
    has no capital letter."""
    alternatives = []
    for written in sorted(entries, key=len, reverse=True):
        escaped = re.escape(written)
        if written == written.lower():
            escaped = f"(?i:{escaped})"
        if not _UNSPACED.search(written):
            escaped = rf"(?<![\w]){escaped}(?![\w])"
        alternatives.append(escaped)
    return re.compile("|".join(alternatives))
