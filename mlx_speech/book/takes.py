"""Each take of a book's sentence checked, and the best of them kept.

A take is suspect when the model ran to its frame budget without stopping
(MOSS-TTS-Nano says so: ``ChunkStream.result``), or when its length is far
from what its text implies. A text's length is counted in spoken units: a
letter or digit is one, a CJK character, kana or hangul syllable three
(each is about a syllable, as three Latin letters are). Audiobook narration
runs at about 150 words a minute: about 12.5 letters a second in English,
and Mandarin's 4 to 5 syllables a second are 12 to 15 units. The bounds
give that rate room on both sides (a take is not judged by its delivery):
slower than 5 units a second beyond 1.5 s of silence at its edges, or, for
a text of 12 units or more, faster than 40 units a second (more than three
times narration: words were dropped). The bounds come from these speaking
rates, not from a model's takes: no model's weights can be had here to
measure them. A take without audio is never suspect: a sentence may say
nothing (a lone symbol).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RETAKES = 2
NARRATION_UNITS_PER_SECOND = 12.5
SLOWEST_UNITS_PER_SECOND = 5.0
FASTEST_UNITS_PER_SECOND = 40.0
EDGE_SECONDS = 1.5  # silence a take may have at its start and end
SHORTEST_CHECKED_UNITS = 12  # shorter texts are not judged too fast
_SYLLABLE_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL")


@dataclass(frozen=True)
class Take:
    samples: np.ndarray
    seconds: float
    ran_out: bool  # the model ran to its frame budget without stopping
    suspect: str | None  # why it is suspect; None where it is not
    units: int  # its text's, spoken


def spoken_units(text: str) -> int:
    """The text's length as speech goes (see the module's docstring)."""
    units = 0
    for character in text:
        if not character.isalnum():
            continue
        name = unicodedata.name(character, "")
        units += 3 if name.startswith(_SYLLABLE_SCRIPTS) else 1
    return units


def checked_take(text: str, samples: np.ndarray, rate: int, ran_out: bool) -> Take:
    seconds = len(samples) / rate
    units = spoken_units(text)
    return Take(samples, seconds, ran_out, _suspect(units, seconds, ran_out), units)


def _suspect(units: int, seconds: float, ran_out: bool) -> str | None:
    if ran_out:
        return "ran to the frame budget without stopping"
    if seconds == 0:
        return None
    if seconds > EDGE_SECONDS + units / SLOWEST_UNITS_PER_SECOND:
        return f"{seconds:.1f} s is long for its text"
    if units >= SHORTEST_CHECKED_UNITS and seconds < units / FASTEST_UNITS_PER_SECOND:
        return f"{seconds:.1f} s is short for its text"
    return None


def best_take(takes: Sequence[Take]) -> Take:
    """The first take that is not suspect; else the one nearest narration's
    length for its text, a take that ran out only after every other."""
    for take in takes:
        if take.suspect is None:
            return take
    return min(takes, key=_strayed)


def _strayed(take: Take) -> tuple[bool, float]:
    expected = max(take.units / NARRATION_UNITS_PER_SECOND, 0.1)
    return take.ran_out, abs(math.log(max(take.seconds, 0.01) / expected))
