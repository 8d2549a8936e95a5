"""SSML: a ``<speak>`` document → what a request says, part by part.

The subset of W3C SSML 1.1 people use, read with a real XML parser
(``xml_documents``: no document type, so no entity is ever expanded or
fetched, and nesting at most ``MAX_DEPTH`` deep):

- ``<break time="700ms"/>`` or ``strength=`` → a ``Pause`` (exact silence);
- ``<sub alias="sequel">SQL</sub>`` → the alias is said;
- ``<say-as interpret-as=...>``: ``characters``/``spell-out`` say each
  character, ``digits`` each digit, ``telephone`` each digit with its
  groups apart, ``ordinal`` a number as "1st", "2nd" (then read out);
  ``cardinal``, ``date`` and ``time`` are left to the text normalization;
- ``<prosody rate=>`` → the pace (``speed``) of its content, multiplied
  through nesting; ``<voice name=>`` and ``<lang xml:lang=>`` → the voice and
  language of their content;
- ``<p>``, ``<s>`` and every change of voice, pace or language end a part:
  each part is spoken as a request of its own.

Any other element's text is said, and the element is named in ``ignored``
(so is an attribute of these that is not read, as ``prosody@pitch``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from xml.etree.ElementTree import Element

from .pauses import Pause, check_pauses, pause_seconds
from .xml_documents import XmlError, local_name, parse

MAX_DEPTH = 64
# seconds, as SSML 1.1 suggests them relative to each other
BREAK_STRENGTHS = {
    "none": 0.0,
    "x-weak": 0.1,
    "weak": 0.25,
    "medium": 0.5,
    "strong": 0.75,
    "x-strong": 1.0,
}
RATES = {
    "x-slow": 0.5,
    "slow": 0.75,
    "medium": 1.0,
    "default": 1.0,
    "fast": 1.25,
    "x-fast": 1.5,
}
_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*", re.IGNORECASE)
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*")
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_READ = {
    "speak": set(),
    "break": {"time", "strength"},
    "sub": {"alias"},
    "say-as": {"interpret-as", "format", "detail"},
    "prosody": {"rate"},
    "voice": {"name"},
    "lang": {_XML_LANG},
    "p": set(),
    "s": set(),
}


class SsmlError(ValueError):
    """An SSML document that cannot be spoken, saying where when it can."""


@dataclass(frozen=True)
class Voicing:
    """How a part is said: ``None`` keeps the request's own."""

    voice: str | None = None
    pace: float = 1.0  # times the request's speed
    language: str | None = None


@dataclass(frozen=True)
class Spoken:
    text: str
    voicing: Voicing


@dataclass
class Script:
    parts: list[Spoken | Pause] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def is_ssml(text: str) -> bool:
    """Whether ``text`` is a ``<speak>`` document (SSML on every surface)."""
    return ssml_verdict(text) is True


def ssml_verdict(text: str) -> bool | None:
    """Whether a text that begins with ``text`` is a ``<speak>`` document;
    ``None`` while its beginning cannot tell yet."""
    stripped = text.lstrip()
    if stripped.startswith("<?xml"):
        end = stripped.find("?>")
        if end < 0:
            return None
        stripped = stripped[end + 2 :].lstrip()
    if len(stripped) < len("<speak"):
        return None if "<speak".startswith(stripped) else False
    return stripped.startswith("<speak")


def parse_ssml(text: str) -> Script:
    try:
        root = parse(text, max_depth=MAX_DEPTH)
    except XmlError as error:
        raise SsmlError(f"SSML: {error}") from None
    if local_name(root.tag) != "speak":
        raise SsmlError(f"SSML: the root is <{local_name(root.tag)}>, not <speak>")
    script = Script()
    builder = _Builder(script)
    builder.element(root, Voicing())
    builder.end_part()
    if not script.parts:  # as an empty text is refused
        raise SsmlError("SSML: the document says nothing (no text and no <break>)")
    check_pauses(pause_seconds(script.parts))
    return script


class _Builder:
    """Walks the document, gathering each part's text."""

    def __init__(self, script: Script):
        self._script = script
        self._text: list[str] = []
        self._voicing = Voicing()

    def element(self, element: Element, voicing: Voicing) -> None:
        name = local_name(element.tag)
        self._note_ignored(element, name)
        if name == "break":
            self.end_part()
            self._script.parts.append(Pause(_break_seconds(element)))
        elif name == "sub":
            self.say(element.get("alias", ""), voicing)
        elif name == "say-as":
            self.say(_said_as(element), voicing)
        else:
            self._content(element, name, _voicing_of(element, name, voicing))
        if element.tail:
            self.say(element.tail, voicing)

    def _content(self, element: Element, name: str, voicing: Voicing) -> None:
        boundary = name in ("p", "s")
        if boundary:
            self.end_part()
        if element.text:
            self.say(element.text, voicing)
        for child in element:
            self.element(child, voicing)
        if boundary:
            self.end_part()

    def say(self, text: str, voicing: Voicing) -> None:
        if voicing != self._voicing:
            self.end_part()
            self._voicing = voicing
        self._text.append(text)

    def end_part(self) -> None:
        text = " ".join("".join(self._text).split())
        self._text = []
        if text:
            self._script.parts.append(Spoken(text, self._voicing))

    def _note_ignored(self, element: Element, name: str) -> None:
        read = _READ.get(name)
        if read is None:
            _add(self._script.ignored, name)
            return
        for attribute in element.attrib:
            if attribute not in read:
                _add(self._script.ignored, f"{name}@{local_name(attribute)}")


def _voicing_of(element: Element, name: str, voicing: Voicing) -> Voicing:
    if name == "prosody" and element.get("rate") is not None:
        return replace(voicing, pace=voicing.pace * _rate(element.get("rate")))
    if name == "voice" and element.get("name"):
        return replace(voicing, voice=element.get("name"))
    if name == "lang" and element.get(_XML_LANG):
        return replace(voicing, language=element.get(_XML_LANG))
    return voicing


def _break_seconds(element: Element) -> float:
    time = element.get("time")
    if time is not None:
        match = _TIME.fullmatch(time)
        if match is None:
            raise SsmlError(
                f'SSML: <break time="{time}"> is not a time such as 700ms or 1.5s'
            )
        value = float(match.group(1))
        if not math.isfinite(value):  # hundreds of digits
            raise SsmlError(f'SSML: <break time="{time[:40]}…"> is too long a time')
        return value / 1000 if match.group(2).lower() == "ms" else value
    strength = element.get("strength", "medium")
    if strength not in BREAK_STRENGTHS:
        raise SsmlError(f'SSML: <break strength="{strength}"> is not an SSML strength')
    return BREAK_STRENGTHS[strength]


def _rate(rate: str) -> float:
    if rate in RATES:
        return RATES[rate]
    match = _RATE.fullmatch(rate)
    if match is None or float(match.group(1)) <= 0:
        raise SsmlError(
            f'SSML: <prosody rate="{rate}"> is not a rate such as 80%, slow or 1.5'
        )
    value = float(match.group(1))
    return value / 100 if match.group(2) else value


def _said_as(element: Element) -> str:
    text = "".join(element.itertext())
    kind = element.get("interpret-as", "")
    if kind in ("characters", "spell-out"):
        return " ".join(character for character in text if not character.isspace())
    if kind == "digits":
        return " ".join(character for character in text if character.isdigit())
    if kind == "telephone":
        groups = re.findall(r"\d+", text)
        return ", ".join(" ".join(group) for group in groups)
    if kind == "ordinal" and text.strip().isdecimal():  # not "²", which int() refuses
        return _ordinal(int(text.strip()))
    return text  # cardinal, date, time and the rest: the normalization reads them


def _ordinal(number: int) -> str:
    if 10 <= number % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _add(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)
