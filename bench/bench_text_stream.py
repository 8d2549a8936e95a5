"""Speaking a chat model's output while it is written: ``TTS.stream_text``
fed by a simulated model emitting tokens at a fixed rate.

    python bench/bench_text_stream.py CHECKPOINT [--rates 20 50 200]
        [--frames 40] [--voice CLIP] [--backend mlx|host] [--json out.json]

For each rate: when the first sentence was complete (the token after its end
arrived) and when its first audio came; the silence a real-time player hears
between sentences; and the time to the last audio against waiting for the
whole text and then synthesizing it. The target: first audio within the
cached-voice time to first audio plus one frame of the sentence's completion.
``--backend`` picks what runs the model (default: ``MLX_SPEECH_BACKEND``, else
auto: the host engine where it can run).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech lets a listener start before the answer is finished.",
    "A local server keeps your words on your own machine.",
]


def _tokens(text: str) -> list[str]:
    """Word-sized deltas with their leading space, as chat models emit them."""
    words = text.split(" ")
    return [words[0], *(" " + word for word in words[1:])]


class SimulatedModel:
    """Yields tokens at ``rate`` per second; notes when it started and when
    each sentence was complete (text after its end had arrived)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.started: float | None = None
        self.completed: list[float] = []
        self.finished: float | None = None

    def deltas(self):
        self.started = time.perf_counter()
        written = ""
        for token in _tokens(" ".join(SENTENCES)):
            time.sleep(1 / self.rate)
            written += token
            yield token
            done = " ".join(SENTENCES[: len(self.completed) + 1])
            if len(self.completed) < len(SENTENCES) and len(written) > len(done):
                self.completed.append(time.perf_counter())
        self.finished = time.perf_counter()
        while len(self.completed) < len(SENTENCES):
            self.completed.append(self.finished)  # the last one ends with the text


def _run(tts, rate: float, options: dict) -> dict:
    """Times relative to the model's first token."""
    from mlx_speech.audio.samples import Audio
    from mlx_speech.text.stream import SegmentStarted

    model = SimulatedModel(rate)
    first_audio: list[float] = []
    play_end = None  # when a real-time player would finish what it was given
    gaps: list[float] = []
    heard = silence = 0.0
    segment = -1
    for event in tts.stream_text(model.deltas(), **options).events():
        now = time.perf_counter()
        if isinstance(event, SegmentStarted):
            segment = event.index
        elif isinstance(event, Audio):
            silent = max(0.0, now - play_end) if play_end is not None else 0.0
            if len(first_audio) <= segment:
                first_audio.append(now)
                if play_end is not None:
                    gaps.append(silent)
            silence += silent
            play_end = max(play_end or now, now) + event.duration
            heard += event.duration
    last_audio = time.perf_counter()
    return {
        "sentence_complete": model.completed[0] - model.started,
        "first_audio": first_audio[0] - model.started,
        "gaps": gaps,
        "text_finished": model.finished - model.started,
        "last_audio": last_audio - model.started,
        "audio": heard,
        "silence": silence,
    }


def _buffered_seconds(tts, options: dict) -> float:
    """Synthesizing the same audio once the whole text is there: the same
    segments (a random-weight model speaks each to the frame budget, so the
    whole text in one call would be shorter audio), one after another."""
    started = time.perf_counter()
    for sentence in SENTENCES:
        tts.speak(sentence, **options)
    return time.perf_counter() - started


def _cached_voice_timing(tts, options: dict) -> tuple[float, float]:
    """Time to first audio of a warm request, and steady seconds per frame."""
    started = time.perf_counter()
    stream = tts.stream(SENTENCES[0], **options)
    next(stream)
    first = time.perf_counter() - started
    for _ in stream:
        pass
    total = time.perf_counter() - started
    return first, (total - first) / max(options["max_new_tokens"] - 1, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--rates", type=float, nargs="+", default=[20, 50, 200])
    parser.add_argument("--frames", type=int, default=40, help="frames per sentence")
    parser.add_argument("--voice", default=None, help="a clip to clone (default: none)")
    parser.add_argument("--backend", default=None, choices=("auto", "mlx", "host"))
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    import mlx_speech  # first: it brings the system OpenBLAS under MLX
    from mlx_speech.host_engine.blas import active_blas

    tts = mlx_speech.load(args.checkpoint, backend=args.backend)
    options = {"voice": args.voice, "temperature": 0, "max_new_tokens": args.frames}
    tts.speak(SENTENCES[0], **options)  # warm: kernels, prompt prefix, reference
    cached_first, frame = _cached_voice_timing(tts, options)
    buffered = _buffered_seconds(tts, options)
    rows, runs = [], []
    for rate in args.rates:
        run = _run(tts, rate, options)
        runs.append(run)
        rows.append(
            {
                "tokens_per_s": rate,
                "first_sentence_complete_s": round(run["sentence_complete"], 3),
                "first_audio_after_it_ms": round(
                    (run["first_audio"] - run["sentence_complete"]) * 1000
                ),
                "target_ms": round((cached_first + frame) * 1000),
                "silence_between_sentences_ms": [round(g * 1000) for g in run["gaps"]],
                "silence_after_first_audio_s": round(run["silence"], 2),
                "text_finished_s": round(run["text_finished"], 2),
                "first_audio_s": {
                    "streamed": round(run["first_audio"], 3),
                    "buffered": round(run["text_finished"] + buffered, 3),
                },
                "last_audio_s": {
                    "streamed": round(run["last_audio"], 2),
                    "buffered": round(run["text_finished"] + buffered, 2),
                },
            }
        )
    results = {
        "checkpoint": args.checkpoint,
        "backend": tts.backend,
        "blas": active_blas(),
        "frames_per_sentence": args.frames,
        "cached_voice_first_audio_ms": round(cached_first * 1000),
        "steady_ms_per_frame": round(frame * 1000, 1),
        "buffered_whole_text_s": round(buffered, 2),
        "audio_s": round(runs[0]["audio"], 2),
        "rates": rows,
    }
    _print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def _print_table(results: dict) -> None:
    print(
        f"backend {results['backend']}; BLAS {results['blas']}; "
        f"{results['frames_per_sentence']} frames per sentence; "
        f"cached-voice first audio {results['cached_voice_first_audio_ms']} ms; "
        f"{results['steady_ms_per_frame']} ms/frame; whole text buffered "
        f"{results['buffered_whole_text_s']} s for {results['audio_s']} s of audio; "
        "times from the first token"
    )
    print(
        "| tokens/s | sentence 1 complete (s) | its first audio after (ms) | target (ms) "
        "| silence between sentences (ms) | all silence after first audio (s) "
        "| text done (s) | first audio streamed / buffered (s) | last audio streamed / "
        "buffered (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in results["rates"]:
        gaps = ", ".join(str(gap) for gap in row["silence_between_sentences_ms"])
        first, last = row["first_audio_s"], row["last_audio_s"]
        print(
            f"| {row['tokens_per_s']:g} | {row['first_sentence_complete_s']} "
            f"| {row['first_audio_after_it_ms']} | {row['target_ms']} | {gaps} "
            f"| {row['silence_after_first_audio_s']} "
            f"| {row['text_finished_s']} | {first['streamed']} / {first['buffered']} "
            f"| {last['streamed']} / {last['buffered']} |"
        )


if __name__ == "__main__":
    main()
