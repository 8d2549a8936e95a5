"""Takes checked and retaken: a take that ran to the frame budget, or whose
length is far from what its text implies, is spoken again with another
seed, the best kept, and those still suspect listed with their chapter,
time and text: by ``speak_book``, ``mlx-speech book`` and a book job."""

from __future__ import annotations

import numpy as np
import pytest

from mlx_speech.book.source import read_book
from mlx_speech.book.speech import RETAKE_SEED_STEP, speak_book
from mlx_speech.book.store import SpokenStore
from mlx_speech.book.takes import best_take, checked_take, spoken_units
from tests.tts.support.cli import run

RATE = 48000
BOOK = "# One\n\nHello there. How are you?\n\n# Two\n\nGood night.\n"
RAN_OUT = "ran to the frame budget without stopping"


@pytest.fixture
def book_file(tmp_path):
    path = tmp_path / "two.md"
    path.write_text(BOOK)
    return path


def _seconds(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * RATE), np.float32)


def test_a_texts_spoken_units_count_syllable_scripts_thrice():
    assert spoken_units("Hello, world! 42") == 12
    assert spoken_units("你好。") == 6
    assert spoken_units("こんにちは") == 15
    assert spoken_units("— … ?") == 0


@pytest.mark.parametrize(
    ("text", "seconds", "ran_out", "suspect"),
    [
        ("Hello there.", 1.0, False, None),
        ("Hello there.", 1.0, True, RAN_OUT),
        ("Hello there.", 3.6, False, "3.6 s is long for its text"),  # over 1.5 + 10/5
        ("Hello there.", 3.5, False, None),
        ("Hello there, how are you?", 0.4, False, "0.4 s is short for its text"),
        ("Hello there.", 0.1, False, None),  # under 12 units: never too fast
        ("Hello there, how are you?", 0.0, False, None),  # no audio is valid
    ],
)
def test_a_take_is_suspect_when_it_ran_out_or_strays_far(text, seconds, ran_out, suspect):
    assert checked_take(text, _seconds(seconds), RATE, ran_out).suspect == suspect


def test_the_best_take_is_the_first_sound_one_else_the_nearest_to_narration():
    long = checked_take("Hello there.", _seconds(9.0), RATE, False)
    ran_out = checked_take("Hello there.", _seconds(0.8), RATE, True)
    sound = checked_take("Hello there.", _seconds(1.2), RATE, False)
    assert best_take([long, sound, ran_out]) is sound
    assert best_take([ran_out, long]) is long  # a take that ran out comes last
    nearer = checked_take("Hello there.", _seconds(5.0), RATE, False)
    assert best_take([long, nearer]) is nearer


def test_takes_that_run_out_are_retaken_and_listed(speaking_tts, book_file):
    """The speaking checkpoint never stops: every take runs to its budget."""
    told = []
    book = speak_book(
        speaking_tts, book_file, retakes=2, max_new_tokens=3, seed=5, spoken=told.append
    )
    assert [t.takes for t in told] == [3] * 5 and {t.suspect for t in told} == {RAN_OUT}
    assert [(s.chapter, s.title, s.text, s.why) for s in book.suspects] == [
        (1, "One", "One", RAN_OUT),
        (1, "One", "Hello there.", RAN_OUT),
        (1, "One", "How are you?", RAN_OUT),
        (2, "Two", "Two", RAN_OUT),
        (2, "Two", "Good night.", RAN_OUT),
    ]
    frame = 3 * 960 / RATE  # three frames of the tiny codec
    assert [s.start for s in book.suspects] == pytest.approx([n * frame for n in range(5)])
    told.clear()
    speak_book(
        speaking_tts, book_file, retakes=0, max_new_tokens=3, seed=5, spoken=told.append
    )
    assert [t.takes for t in told] == [1] * 5


def test_a_sound_retake_is_kept_as_that_seed_speaks_it(stopping_tts, tmp_path):
    """The stopping checkpoint stops after a number of frames its seed draws:
    under a budget of 20 frames some takes run out and a retake stops."""
    path = tmp_path / "lines.txt"
    path.write_text(" ".join(f"Line {n} is here." for n in range(12)))
    told, options = [], {"max_new_tokens": 20, "seed": 3}
    book = speak_book(  # each alone, as speak is (batched sampled rows may round
        # otherwise where the lone product order does not hold: host_engine)
        stopping_tts,
        path,
        retakes=2,
        in_flight=1,
        spoken=told.append,
        **options,
    )
    retaken = [t for t in told if t.takes > 1 and t.suspect is None]
    assert retaken, [(t.takes, t.suspect) for t in told]  # the seed gives some
    kept = {c.text: c for c in book.captions}
    for take in retaken:
        seed = options["seed"] + RETAKE_SEED_STEP * (take.takes - 1)
        alone = stopping_tts.speak(take.sentence.text, max_new_tokens=20, seed=seed)
        caption = kept[take.sentence.shown]
        audio = book.chapters[0].audio.samples[caption.start : caption.end]
        kept_as = np.clip(alone.samples, -1, 1)  # kept in 24 bits, within half a step
        np.testing.assert_allclose(audio, kept_as, rtol=0, atol=2.0**-23)
    assert len(book.suspects) == sum(t.suspect is not None for t in told)


def test_a_suspect_kept_is_still_listed_when_the_book_resumes(
    speaking_tts, book_file, tmp_path
):
    store = tmp_path / "kept"
    first = speak_book(speaking_tts, book_file, store=store, max_new_tokens=3, seed=5)
    told = []
    again = speak_book(
        speaking_tts, book_file, store=store, max_new_tokens=3, seed=5, spoken=told.append
    )
    assert told == [] and again.suspects == first.suspects
    with SpokenStore(store) as kept:
        marks = sorted(path.suffix for path in kept.folder.iterdir())
    assert marks.count(".suspect") == 5


@pytest.mark.slow
def test_the_command_lists_suspects_and_writes_the_report(
    speaking_dir, book_file, tmp_path
):
    report = tmp_path / "report.txt"
    done = run(
        "book", str(book_file), "-o", str(tmp_path / "two.m4b"),
        "--model", str(speaking_dir), "--max-new-tokens", "3", "--seed", "5",
        "--retakes", "1", "--report", str(report),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "5 sentence(s) still suspect after their retakes (all in" in done.stdout
    lines = report.read_text().splitlines()
    assert lines[1] == f"chapter 1 (One) at 0:00:00: {RAN_OUT}: Hello there."
    assert [line.split(": ")[-1] for line in lines] == [
        "One",
        "Hello there.",
        "How are you?",
        "Two",
        "Good night.",
    ]
    assert len(read_book(book_file).chapters) == 2


@pytest.mark.slow
@pytest.mark.parametrize("retakes", ["11", "-1", "two"])
def test_a_bad_retake_count_is_refused_before_the_model_loads(book_file, retakes):
    done = run("book", str(book_file), "--model", "/nowhere", "--retakes", retakes)
    assert done.returncode == 2 and "a number of retakes, 0 to 10" in done.stderr


def test_a_greedy_take_is_not_retaken(speaking_tts, book_file):
    """Its seed changes nothing: the same take again would be spoken."""
    told = []
    book = speak_book(
        speaking_tts, book_file, max_new_tokens=3, temperature=0, spoken=told.append
    )
    assert [t.takes for t in told] == [1] * 5 and len(book.suspects) == 5


@pytest.mark.slow
def test_a_report_that_cannot_be_written_is_refused_before_the_model_loads(book_file):
    report = book_file / "report.txt"  # in a file, not a folder
    done = run("book", str(book_file), "--model", "/nowhere", "--report", str(report))
    assert done.returncode == 1 and str(report) in done.stderr
    assert "/nowhere" not in done.stderr  # the model was never looked for
