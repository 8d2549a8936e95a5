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
"Nginx", "NGINX"), each character case-folded one way (``_fold``). The
longest grapheme wins where several start at one place; an alias is not
looked up again. The graphemes sit in a trie of folded characters, so a
text costs the same whatever the lexicon's size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..regular_files import open_regular
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
        self._trie = _trie(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def apply(self, text: str, most: int | None = None) -> str:
        """``text`` with the lexicon's words said otherwise; where ``most``
        is given, it stops once the result passes ``most`` characters (the
        caller refuses it then), so no alias is expanded past the bound."""
        if not self.entries:
            return text
        said, size, at = [], 0, 0
        start = 0  # of the text not yet taken
        while at < len(text):
            found = _longest_match(self._trie, text, at)
            if found is None:
                at += 1
                continue
            end, alias = found
            said += [text[start:at], alias]
            size += at - start + len(alias)
            start = at = end
            if most is not None and size > most:
                return "".join(said)
        said.append(text[start:])
        return "".join(said)


# A grapheme's entry in the trie: its written form, what is said, and
# whether it matches in any case and anywhere (a script without spaces).
_Entry = tuple[str, str, bool, bool]
_ENTRIES = ""  # a trie node's key for the entries ending there


def _fold(character: str) -> str:
    """One character as a grapheme without capitals matches it: its case
    folding (the micro sign as the Greek mu, a long s as s) where that is one
    character, else its lower case where that is."""
    for folded in (character.casefold(), character.lower()):
        if len(folded) == 1:
            return folded
    return character


def _trie(entries: dict[str, str]) -> dict:
    """The graphemes by their folded characters, one node a character, so
    that matching costs the same whatever the lexicon's size."""
    root: dict = {}
    for written, said in entries.items():
        node = root
        for character in written:
            node = node.setdefault(_fold(character), {})
        any_case = written == written.lower()
        anywhere = _UNSPACED.search(written) is not None
        node.setdefault(_ENTRIES, []).append((written, said, any_case, anywhere))
    return root


def _longest_match(trie: dict, text: str, at: int) -> tuple[int, str] | None:
    """The end and alias of the longest grapheme matching at ``at``."""
    best = None
    node = trie
    for end in range(at + 1, len(text) + 1):
        node = node.get(_fold(text[end - 1]))
        if node is None:
            break
        for entry in node.get(_ENTRIES, ()):
            if _matches(entry, text, at, end):
                best = (end, entry[1])
                if entry[0] == text[at:end]:
                    break  # as written: it wins over a match in another case
    return best


def _matches(entry: _Entry, text: str, at: int, end: int) -> bool:
    written, _, any_case, anywhere = entry
    if not any_case and text[at:end] != written:
        return False
    if anywhere:
        return True
    before = at > 0 and _is_word(text[at - 1])
    after = end < len(text) and _is_word(text[end])
    return not before and not after


def _is_word(character: str) -> bool:
    return character.isalnum() or character == "_"


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
