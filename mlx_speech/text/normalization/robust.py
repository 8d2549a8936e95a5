"""The robustness pass: text as people paste it turned into text as the models
were trained on, for any language, without deciding how words are read.

What it does, in order:
- line endings, ideographic spaces, zero-width and control characters;
- light Markdown (links, headings, quotes, list markers); each line ends
  with a sentence mark, blank lines go, and lines stay lines (families that
  speak line by line still do);
- URLs, e-mail addresses, @mentions, #hashtags, file names, dotted tokens
  (``.env``) and versions (``v2.3.1``) are kept exactly as written;
- spaces: runs collapse; none between CJK characters or between CJK and
  digits; one between CJK and Latin words; none before closing punctuation;
- brackets used as labels (``[S1]``, ``{whisper}``, ``【公告】``, ``「…」``)
  become double quotes; a title in ``《》`` that stands alone loses them;
- dash runs (``--``, ``——``) end a sentence, a lone em dash is a pause;
- ellipses end a sentence; repeated ``!``, ``?``, ``,`` and ``。`` become one
  (``?!`` where both are mixed);
- the text ends with a sentence mark.

Marks are full width after CJK text and ASCII after anything else.
"""

from __future__ import annotations

import re
import unicodedata

from .scripts import CJK, CJK_CHAR, is_cjk

_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060\ufeff]")
_MARKDOWN_LINK = re.compile(r"\[([^\[\]]+?)\]\(((?:https?://|www\.)[^)\s]+)\)")
_LINE_PREFIX = re.compile(r"^(?:#{1,6}\s+|>\s*|[-*+•]\s+|\d{1,3}[.)]\s+)")

_WIDE_MARKS = "\u3000，。！？；：、（）【】《》「」『』"
_KEPT_PATTERNS = (
    re.compile(
        rf"(?:https?://|www\.)[^\s{CJK}{_WIDE_MARKS}]*[^\s{CJK}{_WIDE_MARKS}.,!?;:'\"]"
    ),
    re.compile(r"(?<![\w.+-])[\w.%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}(?![\w-])", re.ASCII),
    re.compile(r"(?<![\w@])@\w{1,32}", re.ASCII),
    re.compile(r"(?<![\w#])#(?![\s#\d])[^\s#，。！？；、.,!?;:]+"),
    # dotted tokens: .env, .gitignore
    re.compile(r"(?<![\w.])\.[A-Za-z][\w-]*(?:\.[\w-]+)*", re.ASCII),
    # versions: v2, v2.3.1, 3.0.0-rc.1, 1.20.2+build
    re.compile(
        r"(?<![\w.])(?:[vV]\d+(?:\.\d+)*|\d+\.\d+\.\d+)(?:[-+]\w+(?:\.\w+)*)?(?!\w)",
        re.ASCII,
    ),
    # file names and paths with a letter in them: app.js.map, index.d.ts, src/main.py
    re.compile(
        r"(?<![\w./])(?=[\w./-]*[A-Za-z])[\w-]+(?:[./][\w-]+)*\.[A-Za-z]\w{0,9}(?!\w)",
        re.ASCII,
    ),
)
_KEPT_MARK = "\ue000"  # a private-use character stands for each kept token

_OPENERS = "([{（【〖『「《“‘"
_CLOSERS = ")]}）】〗』」》”’\"'"
_SENTENCE_MARKS = ".!?;:。！？；：…"


def _keep_tokens(text: str) -> tuple[str, list[str]]:
    kept: list[str] = []

    def stand_in(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return _KEPT_MARK

    for pattern in _KEPT_PATTERNS:
        text = pattern.sub(stand_in, text)
    return text, kept


def kept_spans(text: str) -> list[tuple[str, bool]]:
    """``text`` cut into pieces, each with whether it is a kept token."""
    marked, kept = _keep_tokens(text.replace(_KEPT_MARK, ""))
    spans: list[tuple[str, bool]] = []
    for index, piece in enumerate(marked.split(_KEPT_MARK)):
        if index:
            spans.append((kept[index - 1], True))
        if piece:
            spans.append((piece, False))
    return spans


def _restore_tokens(text: str, kept: list[str]) -> str:
    pieces = iter(kept)
    return re.sub(_KEPT_MARK, lambda _: next(pieces), text)


def _clean_characters(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u3000", " ")
    text = _ZERO_WIDTH.sub("", text.replace(_KEPT_MARK, ""))
    return "".join(
        character
        for character in text
        if character in "\n\t" or not unicodedata.category(character).startswith("C")
    )


def _wide(before: str) -> bool:
    """Whether a mark after ``before`` is written full width."""
    stripped = before.rstrip()
    return bool(stripped) and is_cjk(stripped[-1])


def _end_mark(text: str) -> str:
    return "。" if _wide(text) else "."


def _ends_sentence(text: str) -> bool:
    end = text.rstrip().rstrip(_CLOSERS)
    return bool(end) and (
        end[-1] in _SENTENCE_MARKS or unicodedata.category(end[-1]).startswith("P")
    )


def _with_end_mark(text: str) -> str:
    """``text`` ending with a sentence mark: full width in text with CJK."""
    text = text.rstrip()
    if not text or _ends_sentence(text):
        return text
    return text + ("。" if CJK_CHAR.search(text) else ".")


def _lines_to_sentences(text: str) -> str:
    text = _MARKDOWN_LINK.sub(r"\1 \2", text)
    lines = [_LINE_PREFIX.sub("", line.strip()) for line in text.split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    return "\n".join(_with_end_mark(line) for line in lines)


_LATIN_LETTER = "A-Za-z\u00c0-\u024f"
_LATIN_WORD = (
    rf"(?:{_KEPT_MARK}|[{_LATIN_LETTER}][{_LATIN_LETTER}0-9_'’-]*|\d+[A-Za-z][A-Za-z0-9_]*)"
)


def _tidy_spaces(text: str) -> str:
    return "\n".join(_tidy_line_spaces(line) for line in text.split("\n"))


def _tidy_line_spaces(text: str) -> str:
    text = re.sub(r"[ \t\f\v]+", " ", text)
    text = re.sub(rf"([{CJK}]) +(?=[{CJK}\d])", r"\1", text)
    text = re.sub(rf"(\d) +(?=[{CJK}])", r"\1", text)
    text = re.sub(rf"([{CJK}])(?={_LATIN_WORD})", r"\1 ", text)
    text = re.sub(rf"({_LATIN_WORD})(?=[{CJK}])", r"\1 ", text)
    text = re.sub(r" +([，。！？；：、）】》」』”])", r"\1", text)
    text = re.sub(r"([（【《「『“，。！？；：、]) +", r"\1", text)
    text = re.sub(r" +([,.;:!?)\]}])", r"\1", text)
    text = re.sub(r"([(\[{]) +", r"\1", text)
    return re.sub(r" {2,}", " ", text).strip()


def _labels_to_quotes(text: str) -> str:
    text = re.sub(r"\[\s*([^\[\]]+?)\s*\]", r'"\1"', text)
    text = re.sub(r"\{\s*([^{}]+?)\s*\}", r'"\1"', text)
    text = re.sub(r"[【〖『「]\s*([^】〗』」]+?)\s*[】〗』」]", r'"\1"', text)
    # a title standing alone (at the start of a sentence, before its end) is
    # spoken as the title; one inside a sentence keeps its marks
    return re.sub(
        rf"(^|[。！？!?；;]\s*)《([^》]+)》(?=\s*(?:$|[。！？!?；;，,]|[—–-]{{2}}|{_KEPT_MARK}))",
        r"\1\2",
        text,
    )


def _dashes_and_ellipses(text: str) -> str:
    def sentence_end(match: re.Match[str]) -> str:
        return _end_mark(text[: match.start()]) + (
            "" if _wide(text[: match.start()]) else " "
        )

    text = re.sub(r" *(?:\.{3,}|…+|(?:\. ){2,}\.) *", sentence_end, text)
    text = re.sub(r" *(?:[—–―]{2,}|-{2,}|[—–―]-|-[—–―]) *", sentence_end, text)

    def pause(match: re.Match[str]) -> str:
        return "，" if _wide(text[: match.start()]) else ", "

    return re.sub(r" *[—―] *| +– +", pause, text)


def _repeated_marks(text: str) -> str:
    def one_mark(match: re.Match[str]) -> str:
        run = match.group(0)
        wide = run[0] in "！？"
        question, exclamation = any(c in "?？" for c in run), any(c in "!！" for c in run)
        if question and exclamation:
            return "？！" if wide else "?!"
        if question:
            return "？" if wide else "?"
        return "！" if wide else "!"

    text = re.sub(r"[!?！？]{2,}", one_mark, text)
    text = re.sub(r"[。．]{2,}", "。", text)
    text = re.sub(r"，{2,}|，,+|,+，", "，", text)
    text = re.sub(r",{2,}", ",", text)
    # a mark left at a sentence's end by the rules above: "wait... ." → "wait."
    text = re.sub(r"([.。!?！？]) *[.。](?!\w)", r"\1", text)
    return text


def clean_text(text: str) -> str:
    """``text`` after the robustness pass; it is idempotent (cleaning the
    result again changes nothing)."""
    text = _lines_to_sentences(_clean_characters(text))
    text, kept = _keep_tokens(text)
    text = _tidy_spaces(text)
    text = _labels_to_quotes(text)
    text = _dashes_and_ellipses(text)
    text = _repeated_marks(text)
    text = _tidy_spaces(text)
    text = _with_end_mark(text)
    return _restore_tokens(text, kept)
