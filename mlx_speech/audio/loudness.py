"""How loud audio is, by EBU R128 (ITU-R BS.1770): its integrated loudness
in LUFS and its true peak in dBTP, measured by ffmpeg's ``ebur128`` filter
through PyAV; and the one gain that brings it to a target loudness without
its true peak passing a ceiling."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import av
import av.filter
import numpy as np

TARGET_LUFS = -18.0  # an audiobook's level: ACX asks -23 to -18, most players' speech ~-18
TRUE_PEAK_CEILING_DBTP = -1.0
TARGETS_LUFS = (-40.0, -5.0)  # the targets asked for may lie between these
_SILENCE_LUFS = -70.0  # ebur128's floor: gated out, nothing to bring up
_LAYOUTS = {1: "mono", 2: "stereo"}


@dataclass(frozen=True)
class Loudness:
    integrated: float  # LUFS
    true_peak: float  # dBTP


def measured(chunks: Iterable[np.ndarray], rate: int, channels: int) -> Loudness:
    """The loudness of the chunks (float32, ``[n]`` or ``[n, channels]``) as
    one stream."""
    graph = av.filter.Graph()
    source = graph.add_abuffer(format="flt", sample_rate=rate, layout=_LAYOUTS[channels])
    meter = graph.add("ebur128", "peak=true:metadata=1")
    sink = graph.add("abuffersink")
    source.link_to(meter)
    meter.link_to(sink)
    graph.configure()
    last: dict[str, str] = {}
    written = 0
    for chunk in chunks:
        samples = np.ascontiguousarray(np.asarray(chunk, np.float32).reshape(-1, channels))
        frame = av.AudioFrame.from_ndarray(
            samples.reshape(1, -1), format="flt", layout=_LAYOUTS[channels]
        )
        frame.sample_rate, frame.pts = rate, written
        written += len(samples)
        graph.push(frame)
        last = _drained(graph) or last
    graph.push(None)
    last = _drained(graph) or last
    integrated = float(last.get("lavfi.r128.I", _SILENCE_LUFS))
    peak = float(last.get("lavfi.r128.true_peak", 0.0))
    return Loudness(integrated, 20 * math.log10(peak) if peak > 0 else -math.inf)


def is_target(value: object) -> bool:
    """Whether ``value`` is a loudness a book may be brought to."""
    low, high = TARGETS_LUFS
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and low <= value <= high


def gain_to(
    loudness: Loudness, target: float, ceiling: float = TRUE_PEAK_CEILING_DBTP
) -> float:
    """The linear gain that brings ``loudness`` to ``target`` LUFS, or as near
    as its true peak allows under ``ceiling`` dBTP; 1 for silence."""
    if loudness.integrated <= _SILENCE_LUFS + 0.5:
        return 1.0
    decibels = min(target - loudness.integrated, ceiling - loudness.true_peak)
    return 10 ** (decibels / 20)


def _drained(graph: av.filter.Graph) -> dict[str, str]:
    """The metadata of the last frame the meter has let through."""
    last: dict[str, str] = {}
    while True:
        try:
            last = dict(graph.pull().metadata)
        except (av.BlockingIOError, av.EOFError):
            return last
