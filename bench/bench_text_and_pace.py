"""What text normalization, a lexicon and ``speed`` cost, on the caller's side
of a request.

    python bench/bench_text_and_pace.py [--json out.json]

Normalization: the grammars' load time (once per process) and the time per
sentence, over English and Chinese sentences with numbers, money, dates and
units and over plain ones. Lexicon: building one and applying it to 4,000
characters, with 10 and with 50,000 random entries. Speed: milliseconds of
WSOLA work per second of input audio at 48 kHz (MOSS-TTS-Nano's rate), mono
and stereo, fed in the chunks a stream delivers (1, 2, 4, 8, 16, 16, ...
frames of 80 ms). None touches MLX; all run on the thread that reads the
request or its audio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from mlx_speech.audio.time_stretch import TimeStretch
from mlx_speech.text.lexicon import Lexicon
from mlx_speech.text.normalization import TextNormalizer

ENGLISH = [
    "I paid $3.50 on 3/4, and got 25% off.",
    "The meeting moved to Jan. 5, 2024 at 10:30 am in room 101.",
    "It weighs 5 kg, is 3.2 km away, and it was -5°C outside.",
    "Call 555-123-4567 or +1 555 123 4567 before the 1990s end.",
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech lets a listener start before the answer is finished.",
]
CHINESE = [
    "2024年3月5日，气温-3°C，25%的人出门。",
    "价格是3.5元，打8折，第2天发货。",
    "今天天气很好，我们去公园散步吧。",
]
RATE = 48000
FRAME = 3840  # 80 ms at 48 kHz
SPEEDS = (0.25, 0.5, 0.75, 1.25, 1.5, 2.0, 4.0)


def normalization() -> dict:
    normalizer = TextNormalizer()
    started = time.perf_counter()
    normalizer.normalize("1", "en")
    load_seconds = time.perf_counter() - started
    per_sentence = {}
    for name, sentences, language in (("en", ENGLISH, "en"), ("zh", CHINESE, "zh")):
        times = []
        for _ in range(20):
            for sentence in sentences:
                started = time.perf_counter()
                normalizer.normalize(sentence, language)
                times.append(time.perf_counter() - started)
        per_sentence[name] = {
            "median_ms": round(statistics.median(times) * 1000, 2),
            "max_ms": round(max(times) * 1000, 2),
        }
    return {"grammar_load_s": round(load_seconds, 3), "per_sentence": per_sentence}


def lexicon() -> dict:
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    written = [
        "".join(rng.choice(letters, size=rng.integers(3, 11))) for _ in range(50_000)
    ]
    words = written[:200] + ["the", "quick", "brown", "fox", "jumps", "SQL"] * 100
    text = " ".join(rng.choice(words, size=800))[:4000]
    results = {}
    for entries in (10, 50_000):
        started = time.perf_counter()
        built = Lexicon((word, "said") for word in written[:entries])
        build_seconds = time.perf_counter() - started
        times = []
        for _ in range(5):
            started = time.perf_counter()
            built.apply(text)
            times.append(time.perf_counter() - started)
        results[f"{entries} entries"] = {
            "build_s": round(build_seconds, 3),
            "apply_4000_chars_ms": round(statistics.median(times) * 1000, 2),
        }
    return results


def _stream_chunks(total: int) -> list[int]:
    sizes, frames = [], 1
    while sum(sizes) < total:
        sizes.append(min(frames * FRAME, total - sum(sizes)))
        frames = min(frames * 2, 16)
    return sizes


def pace(seconds: float = 10.0) -> dict:
    rng = np.random.default_rng(0)
    t = np.arange(int(RATE * seconds)) / RATE
    voice_like = (0.4 * np.sin(2 * np.pi * 140 * t * (1 + 0.05 * np.sin(t)))).astype(
        np.float32
    ) + 0.05 * rng.standard_normal(len(t)).astype(np.float32)
    results = {}
    for channels in (1, 2):
        audio = voice_like if channels == 1 else np.stack([voice_like, voice_like[::-1]], 1)
        for speed in SPEEDS:
            best = float("inf")
            for _ in range(3):
                stretch = TimeStretch(speed, RATE)
                started = time.perf_counter()
                start = 0
                for size in _stream_chunks(len(audio)):
                    stretch.process(audio[start : start + size])
                    start += size
                stretch.flush()
                best = min(best, time.perf_counter() - started)
            results[f"{channels}ch x{speed}"] = round(best * 1000 / seconds, 2)
    return {"ms_per_audio_second": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the results here too")
    args = parser.parse_args()
    results = {"normalization": normalization(), "lexicon": lexicon(), "speed": pace()}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
