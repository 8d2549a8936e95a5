"""A book against ``speak`` of the same text, in one run.

    python bench/bench_book.py CHECKPOINT [--chapters 3] [--sentences 8]
        [--frames 40] [--backend auto|mlx|host] [--in-flight 16]
        [--max-batch 16] [--json FILE]

One model, loaded once, speaks one made-up book (``--chapters`` chapters of
``--sentences`` sentences, each held to ``--frames`` frames, greedy) twice:

- ``speak``: the whole text as ``mlx-speech speak --captions`` speaks it,
  one sentence after another (``TTS.stream_text``);
- ``book``: ``speak_book``, its sentences many at a time through the
  batching engine (into a fresh store: nothing reused), as ``mlx-speech
  book`` runs it: the engine's batch and the sentences in flight at
  ``BOOK_BATCH`` (``--max-batch``, ``--in-flight``), set before the model
  loads.

Both give the same sentences; it prints each one's audio, wall time and
real-time factor, and the book's speed over ``speak``'s.
"""

# isort: split
import mlx_speech  # first: it brings the system OpenBLAS under MLX (Linux)

# isort: split
import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from mlx_speech.backends import blas_name
from mlx_speech.book.source import read_book
from mlx_speech.book.speaker import BOOK_BATCH
from mlx_speech.book.speech import speak_book
from mlx_speech.engine import shared_engine

WORDS = "the quiet river carried our small boat past the old mill at dawn".split()


def _book_text(chapters: int, sentences: int) -> str:
    parts = []
    for chapter in range(1, chapters + 1):
        parts.append(f"# Chapter {chapter}.\n")
        for n in range(sentences):
            start = (chapter * 7 + n * 3) % len(WORDS)
            words = (WORDS * 2)[start : start + 8]
            parts.append(f"{' '.join(words).capitalize()}, said voice {n}.\n")
    return "\n".join(parts)


def _speak_time(tts, text: str, options: dict) -> tuple[float, float, int]:
    started = time.perf_counter()
    stream = tts.stream_text([text], **options)
    samples = sum(len(c.samples) for c in stream)
    took = time.perf_counter() - started
    return took, samples / tts.sample_rate, len(stream.captions)


def _book_time(tts, path: Path, options: dict, in_flight: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as store:
        started = time.perf_counter()
        book = speak_book(  # greedy: no retakes
            tts, path, store=store, in_flight=in_flight, **options
        )
        took = time.perf_counter() - started
    return took, sum(c.audio.duration for c in book.chapters), len(book.captions)


def cpu_name() -> str:
    """The CPU as Linux names it (its family and model tell generations
    apart), or the platform's word where there is no /proc/cpuinfo."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    name = fields.get("model name", platform.machine())
    return f"{name} (family {fields.get('cpu family')}, model {fields.get('model')})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--chapters", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--backend", default=None, choices=("auto", "mlx", "host"))
    # as mlx-speech book runs: BOOK_BATCH sentences stepped together
    parser.add_argument("--in-flight", type=int, default=BOOK_BATCH)
    parser.add_argument("--max-batch", type=int, default=BOOK_BATCH)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    engine = shared_engine()
    engine.configure(args.max_batch, engine.max_parked)
    tts = mlx_speech.load(args.checkpoint, backend=args.backend)
    options = {"max_new_tokens": args.frames, "temperature": 0}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "book.md"
        path.write_text(_book_text(args.chapters, args.sentences))
        # what the book says, as one text: the same sentences
        text = "\n\n".join(c.text for c in read_book(path).chapters)
        tts.speak("Warming up.", max_new_tokens=4)
        speak_took, speak_audio, speak_sentences = _speak_time(tts, text, options)
        book_took, book_audio, book_sentences = _book_time(
            tts, path, options, args.in_flight
        )
    results = {
        "machine": f"{platform.machine()}, {cpu_name()}",
        "backend": tts.backend,
        "device": tts.device,
        "blas": blas_name(),
        "frames_per_sentence": args.frames,
        "in_flight": args.in_flight,
        "max_batch": shared_engine().max_batch,
        "speak": {
            "seconds": speak_took,
            "audio_seconds": speak_audio,
            "sentences": speak_sentences,
        },
        "book": {
            "seconds": book_took,
            "audio_seconds": book_audio,
            "sentences": book_sentences,
        },
        "book_speed_over_speak": speak_took / book_took,
    }
    print(f"backend {tts.backend} on {tts.device}, BLAS {blas_name()}")
    for name in ("speak", "book"):
        run = results[name]
        rtf = run["seconds"] / run["audio_seconds"]
        print(
            f"{name:6} {run['sentences']} sentences, {run['audio_seconds']:.1f} s of "
            f"audio in {run['seconds']:.1f} s (real-time factor {rtf:.2f})"
        )
    print(f"the book is {results['book_speed_over_speak']:.2f} times as fast as speak")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
