"""Cutting text that arrives in pieces (a chat model's deltas) into segments
to speak, as soon as each is complete.

A sentence ends at ``. ! ?`` (a run such as ``?!`` or ``...`` counts once)
followed by a space (after an ellipsis, by a word that can start a sentence),
and at ``。！？`` at once. Decimals (``3.5``), abbreviations (``Dr. Smith``, ``e.g. this``),
initials (``J. R. Tolkien``) and an ellipsis inside a sentence (``wait... no``)
do not end one. Nor does what ends inside quotation marks (``« … ? »``,
``„…“``, ``“…”``, ``「…」``) or inverted marks (``¿…?``, ``¡…!``): a quote
that ends with its sentence ends it where it closes, unless the words after
it go on in lower case (``« Où es-tu ? » cria Hélène.``). Clauses also end
at ``, ; :`` and ``，、；：``. Text that runs past ``max_chars`` without an
end is cut at its last space (anywhere, for text without spaces), so the
wait for a segment stays bounded. With split
"none" the text is one segment, held whole until its end: at most
``MAX_WHOLE_CHARS``, what the other splits may hold in their queued segments.
"""

from __future__ import annotations

from .ssml import ssml_verdict

SPLITS = ("sentence", "clause", "none")
MAX_SEGMENT_CHARS = 200
MAX_WHOLE_CHARS = 64 * MAX_SEGMENT_CHARS  # text_stream.SEGMENTS_QUEUED segments

_SENTENCE_ENDS = ".!?…"
_CJK_SENTENCE_ENDS = "。！？"
_CLAUSE_ENDS = ",;:"
_CJK_CLAUSE_ENDS = "，、；："
_CLOSERS = "\"')]}”’»」』）"
# Quotation marks and inverted marks, and the closers that end what they
# open: „ is closed by “ (German) or ” (Polish), and “ opens in English.
_PAIRS = {
    "«": "»", "‹": "›", "“": "”", "„": "“”", "「": "」", "『": "』", "¿": "?", "¡": "!",
}  # fmt: skip
_CJK_CLOSERS = "」』"
_SPACES = " \u00a0\u202f"  # French typography sets a thin space inside « »
_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e",
    "fig", "approx", "inc", "ltd", "co", "mt", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
}  # fmt: skip


class TextSegmenter:
    """``feed(delta)`` returns the segments it completed; ``finish()`` the
    rest; ``commit()`` the rest too, and goes on."""

    def __init__(self, split: str = "sentence", max_chars: int = MAX_SEGMENT_CHARS):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        self._split = self._asked_split = split
        self._max_chars = max_chars
        self._pending = ""
        self._document: bool | None = None  # an SSML document: spoken whole

    def feed(self, delta: str) -> list[str]:
        self._pending += delta
        if self._document is None:
            self._document = ssml_verdict(self._pending)
            if self._document is None:
                return []  # "<spe...": it may be a document; wait to know
            if self._document:
                self._split = "none"
        if self._split == "none" and len(self._pending) > MAX_WHOLE_CHARS:
            raise ValueError(
                f"the text passed {MAX_WHOLE_CHARS} characters before its end; split "
                "'none' speaks a text whole, so split longer text by sentence or clause"
            )
        return self._take(final=False)

    def finish(self) -> list[str]:
        segments = self._take(final=True)
        rest, self._pending = self._pending.strip(), ""
        return [*segments, rest] if rest else segments

    def commit(self) -> list[str]:
        """The text so far is complete (a client's commit): its segments, the
        last one cut where it stands; what comes after starts afresh."""
        segments = self.finish()
        self._split, self._document = self._asked_split, None
        return segments

    def _take(self, final: bool) -> list[str]:
        segments = []
        if self._split == "none":
            return segments
        while True:
            end = self._boundary(final)
            if end is None:
                end = self._forced_cut()
            if end is None:
                return segments
            segment, self._pending = self._pending[:end].strip(), self._pending[end:]
            if segment:
                segments.append(segment)

    def _boundary(self, final: bool) -> int | None:
        """Where the first complete segment ends, if one is known to."""
        text = self._pending
        ends = _SENTENCE_ENDS + (_CLAUSE_ENDS if self._split == "clause" else "")
        cjk = _CJK_SENTENCE_ENDS + (_CJK_CLAUSE_ENDS if self._split == "clause" else "")
        open_quotes: list[str] = []  # the closers awaited, innermost last
        index = 0
        while index < len(text):
            char = text[index]
            if open_quotes and char in open_quotes[-1]:
                open_quotes.pop()
                if not open_quotes and char not in "?!":
                    verdict = _quote_ends_sentence(text, index, ends + cjk, final)
                    if verdict is None:
                        return None
                    if verdict:
                        return _after_closers(text, index + 1)
                    index += 1
                    continue
                if open_quotes:
                    index += 1
                    continue
            elif char in _PAIRS:
                open_quotes.append(_PAIRS[char])
                index += 1
                continue
            elif open_quotes:
                index += 1
                continue
            if char in cjk:
                return _after_closers(text, index + 1)
            if char in ends:
                run_end = index
                while run_end < len(text) and text[run_end] in ends:
                    run_end += 1
                end = _after_closers(text, run_end)
                verdict = _ends_here(text, index, run_end, end, final)
                if verdict is None:
                    return None  # wait: what follows decides
                if verdict and char in "?!" and "¿¡"[char == "!"] in text[:index]:
                    if not final and not text[end:].strip(_SPACES + _CLOSERS):
                        return None  # the next word decides: ¿dónde estás? y no...
                    verdict = not _goes_on(text[end:])
                if verdict:
                    return end
                index = end
                continue
            index += 1
        return None

    def _forced_cut(self) -> int | None:
        text = self._pending
        if len(text) <= self._max_chars:
            return None
        space = text.rfind(" ", 0, self._max_chars)
        return space if space > 0 else self._max_chars


def _after_closers(text: str, index: int) -> int:
    while index < len(text) and text[index] in _CLOSERS:
        index += 1
    return index


def _quote_ends_sentence(text: str, closer: int, ends: str, final: bool) -> bool | None:
    """Whether a quote closed at ``closer`` ends its sentence: it ended with
    a sentence's end inside, and what follows is not the sentence going on
    (a word in lower case, a comma); None while that has not arrived."""
    before = text[:closer].rstrip(_SPACES)
    if not before or before[-1] not in ends:
        return False
    if text[closer] in _CJK_CLOSERS:
        return False  # 「どこ？」と叫んだ。: the sentence ends at its own 。
    rest = text[closer + 1 :]
    if not rest.lstrip(_SPACES + _CLOSERS):
        return True if final else None
    return rest[:1].isspace() and not _goes_on(rest)


def _goes_on(rest: str) -> bool:
    """Whether the words after a quote or a ``?`` go on with its sentence."""
    following = rest.lstrip(_SPACES + _CLOSERS)
    return bool(following) and (following[0].islower() or following[0] in ",;:—–-")


def _ends_here(text: str, start: int, run_end: int, end: int, final: bool) -> bool | None:
    """Whether the terminator run ``text[start:run_end]`` ends a segment; None
    while the text after it has not arrived yet. The space after the run is
    enough to decide, except after an ellipsis, which the next word decides,
    so a sentence is spoken as soon as the space after it arrives."""
    rest = text[end:]
    if not rest:
        return True if final else None
    if not rest[0].isspace():
        return False  # "3.5", "e.g.x", "end.Next": not a boundary between words
    run = text[start:run_end]
    if run == ".":
        return not _before_is_abbreviation(text, start)
    if run in ("...", "…"):
        following = rest.lstrip()
        if not following:
            return True if final else None
        return not following[0].islower()  # "wait... no" goes on
    return True


def _before_is_abbreviation(text: str, dot: int) -> bool:
    word_start = dot
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:dot].lstrip("\"'(“‘").lower()
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())
