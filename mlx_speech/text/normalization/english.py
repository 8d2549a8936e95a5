"""English readings the WeTextProcessing grammars get wrong, done before them.

Measured against wetext 0.1.8: "$3.50" became "three point five dollars",
"1,234" lost its "one", "1990s" became "... ninety seconds", "5 m" became
"five minutes", "No. 5" kept its dot, "~5" lost its space, "#1" and "≥5"
failed. Those forms are rewritten into words here, and the grammars read the
rest.
"""

from __future__ import annotations

import re

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve "
    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))


def _below_thousand(number: int) -> str:
    hundreds, rest = divmod(number, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest and hundreds:
        words.append("and")
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens] + (f" {_ONES[ones]}" if ones else ""))
    elif rest:
        words.append(_ONES[rest])
    return " ".join(words)


def cardinal(number: int) -> str:
    """``number`` in words, in the grammars' style ("one hundred and five")."""
    if number == 0:
        return "zero"
    words = []
    for scale, name in _SCALES:
        count, number = divmod(number, scale)
        if count:
            words.append(f"{cardinal(count)} {name}")
    if number:
        words.append(_below_thousand(number))
    return " ".join(words)


def _digits(text: str) -> str:
    return " ".join(_ONES[int(digit)] for digit in text)


def _year(number: int) -> str:
    """A year as it is said: nineteen ninety, two thousand, twenty ten."""
    century, rest = divmod(number, 100)
    if number < 1000 or (number % 1000 == 0) or 2000 <= number < 2010:
        return cardinal(number)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    return f"{cardinal(century)} {'oh ' if rest < 10 else ''}{cardinal(rest)}"


def _plural(words: str) -> str:
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return f"{head} {last}".strip()


# symbol → (major unit, its plural, minor unit, its plural); minor None: no cents
_CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", None, None),
    "₹": ("rupee", "rupees", None, None),
    "₩": ("won", "won", None, None),
}
_SCALE_WORDS = r"(?:thousand|million|billion|trillion)\b"
_MONEY = re.compile(
    r"(?P<sign>-)?(?P<symbol>[$€£¥₹₩])\s?(?P<whole>\d{1,3}(?:,\d{3})+|\d+)"
    rf"(?:\.(?P<fraction>\d+))?(?![\d,]|\.\d|\s?{_SCALE_WORDS})"
)
_GROUPED = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+)(?:\.(\d+))?(?![\d,]|\.\d)")
_DECADE = re.compile(r"(?<![\w'’])(\d{2,3}0)s\b")
_METERS = re.compile(r"(?<![\w.,])(\d+(?:\.\d+)?)\s?m\b(?![.']\w)")
_NUMBER_SIGN = re.compile(r"(?:\bNo\.|\bno\.|#)\s?(?=\d)")
_INTERNATIONAL_PHONE = re.compile(
    r"(?<![\w+])\+(\d{1,3})((?:[\s.-]\(?\d{2,4}\)?){2,4})(?![\w])"
)
_SYMBOLS = {
    "≥": " greater than or equal to ",
    "≤": " less than or equal to ",
    "≠": " not equal to ",
    "±": " plus or minus ",
    "×": " times ",
    "÷": " divided by ",
    "~": " about ",
    "≈": " about ",
    "→": " to ",
}


def _money(match: re.Match[str]) -> str:
    major, majors, minor, minors = _CURRENCIES[match["symbol"]]
    whole = int(match["whole"].replace(",", ""))
    fraction = match["fraction"]
    sign = "minus " if match["sign"] else ""
    if fraction is not None and (minor is None or len(fraction) != 2):
        amount = f"{cardinal(whole)} point {_digits(fraction)}"
        return f"{sign}{amount} {majors}"
    cents = int(fraction or 0)
    parts = []
    if whole or not cents:
        parts.append(f"{cardinal(whole)} {major if whole == 1 else majors}")
    if cents:
        parts.append(f"{cardinal(cents)} {minor if cents == 1 else minors}")
    return sign + " and ".join(parts)


def _grouped(match: re.Match[str]) -> str:
    words = cardinal(int(match[1].replace(",", "")))
    return f"{words} point {_digits(match[2])}" if match[2] else words


def _decade(match: re.Match[str]) -> str:
    number = int(match[1])
    if number < 100:  # 80s: the eighties
        return _plural(cardinal(number))
    return _plural(_year(number))


def _meters(match: re.Match[str]) -> str:
    return f"{match[1]} {'meter' if match[1] == '1' else 'meters'}"


def _international_phone(match: re.Match[str]) -> str:
    groups = [match[1], *re.findall(r"\d+", match[2])]
    return "plus " + ", ".join(_digits(group) for group in groups)


def prepare(text: str) -> str:
    """``text`` with the forms the grammars misread already in words."""
    text = _INTERNATIONAL_PHONE.sub(_international_phone, text)
    text = _MONEY.sub(_money, text)
    text = _GROUPED.sub(_grouped, text)
    text = _DECADE.sub(_decade, text)
    text = _METERS.sub(_meters, text)
    text = _NUMBER_SIGN.sub("number ", text)
    text = re.sub(r"\b24/7\b", "twenty four seven", text)
    for symbol, words in _SYMBOLS.items():
        text = text.replace(symbol, words)
    return re.sub(r" {2,}", " ", text)


def finish(text: str) -> str:
    """The grammars' output with their escapes undone."""
    return text.replace('\\"', '"').replace("\\\\", "\\")
