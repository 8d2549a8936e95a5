"""Which script a character or a text is written in, as normalization needs it."""

from __future__ import annotations

import re

# Han ideographs (with extension A and compatibility ideographs) and kana: the
# scripts written without spaces between words.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
KANA = "\u3040-\u30ff"
CJK = HAN + KANA
CJK_CHAR = re.compile(f"[{CJK}]")
_HAN = re.compile(f"[{HAN}]")
_KANA = re.compile(f"[{KANA}]")
_HANGUL = re.compile("[\uac00-\ud7af\u1100-\u11ff]")
_LATIN = re.compile("[A-Za-z\u00c0-\u024f]")
_OTHER_LETTER = re.compile(
    "[\u0370-\u03ff\u0400-\u04ff\u0590-\u06ff\u0900-\u0dff\u0e00-\u0eff]"
)

# Full-width punctuation that ends or separates parts of CJK text.
CJK_PUNCTUATION = "，。！？；：、（）【】《》「」『』〖〗“”‘’…—"


def is_cjk(character: str) -> bool:
    return bool(CJK_CHAR.match(character)) or character in CJK_PUNCTUATION


def script_language(text: str) -> str | None:
    """The language normalization assumes for ``language: auto``: "zh" for
    Han text, "ja" where kana appear, "ko" for Hangul, "en" for Latin
    letters or text of digits and symbols alone, ``None`` for other scripts."""
    if _KANA.search(text):
        return "ja"
    if _HAN.search(text):
        return "zh"
    if _HANGUL.search(text):
        return "ko"
    if _LATIN.search(text) or not _OTHER_LETTER.search(text):
        return "en"
    return None
