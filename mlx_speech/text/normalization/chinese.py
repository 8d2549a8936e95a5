"""Chinese forms the WeTextProcessing grammars misread, handled around them.

The grammars read every "-" between two things as 减 (minus), and "第2" as
"第两". A hyphen stays where it means minus or a range (before a digit, after
a digit, an operator or an opening mark); between two Han words it becomes a
pause, anywhere else a space.
"""

from __future__ import annotations

import re

from .scripts import HAN

_KEEP = "\ue001"
_MINUS_OR_RANGE = re.compile(rf"(^|[\d=:+*/,(，：；;（【\[{{{HAN}])\s*-\s*(?=\d)")


def prepare(text: str) -> str:
    if "-" not in text:
        return text
    text = _MINUS_OR_RANGE.sub(rf"\1{_KEEP}", text)
    text = re.sub(rf"([{HAN}])\s*-\s*(?=[{HAN}])", r"\1，", text)
    text = re.sub(r"(\S)\s*-\s*(?=\S)", r"\1 ", text)
    return text.replace(_KEEP, "-")


def finish(text: str) -> str:
    return text.replace("第两", "第二")
