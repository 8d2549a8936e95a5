"""Language names and codes as clients send them, mapped to what a family uses.

vLLM-Omni's clients send names ("English", "Auto"), others codes ("en",
"en-US", "zh"); every family takes either, in any case. A family that detects
the language itself takes any language of the table.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest, shown

AUTO = "auto"
# name → its ISO 639-1 code and other names clients use
LANGUAGES: dict[str, tuple[str, ...]] = {
    "chinese": ("zh", "mandarin", "cmn"),
    "english": ("en",),
    "japanese": ("ja",),
    "korean": ("ko",),
    "german": ("de",),
    "french": ("fr",),
    "russian": ("ru",),
    "portuguese": ("pt",),
    "spanish": ("es",),
    "italian": ("it",),
}
_BY_ALIAS = {alias: name for name, aliases in LANGUAGES.items() for alias in aliases}


def _known(language: str) -> str | None:
    """A language's table name: from its name, a code, or a code with a region."""
    key = language.strip().lower().replace("_", "-")
    if key == AUTO or key in LANGUAGES:
        return key
    return _BY_ALIAS.get(key) or _BY_ALIAS.get(key.split("-", 1)[0])


def iso_code(language: Any) -> str | None:
    """``language`` as its ISO 639-1 code, "auto" for auto (or ``None``
    given), ``None`` for what the table does not know."""
    if language is None:
        return AUTO
    known = _known(language) if isinstance(language, str) else None
    if known is None or known == AUTO:
        return known
    return LANGUAGES[known][0]


def language_codes(supported: tuple[str, ...] | None) -> tuple[str, ...]:
    """The ISO 639-1 codes of a family's languages (``supported``, in its own
    spelling), or of the whole table where the family detects the language
    itself (``None``); names the table does not know are left out."""
    if supported is None:
        return tuple(aliases[0] for aliases in LANGUAGES.values())
    codes = (iso_code(language) for language in supported)
    return tuple(dict.fromkeys(code for code in codes if code not in (None, AUTO)))


def check_language(language: Any, supported: tuple[str, ...] | None, family: str) -> str:
    """``language`` (``None`` is auto) in the family's own spelling; ``supported``
    lists the family's languages, or is ``None`` where it detects the language
    itself (any language of the table is then accepted, as auto)."""
    if language is None:
        language = AUTO
    known = _known(language) if isinstance(language, str) else None
    if supported is None:
        if known is not None:
            return AUTO
        accepted = [AUTO, *LANGUAGES]
    else:
        by_name = {name.lower(): name for name in supported}
        if known in by_name:
            return by_name[known]
        accepted = list(supported)
    raise InvalidRequest(
        "language",
        f"{family} takes language {', '.join(accepted)} (names or codes such as en, "
        f"zh-CN, any case); got {shown(language)}",
    )
