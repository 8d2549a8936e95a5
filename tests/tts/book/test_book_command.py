"""``mlx-speech book`` as a user runs it: an audiobook with its chapters,
captions and chapter files; killed at any moment, finished by running it
again; a full disk; and every bad book refused in one line, nothing
written."""

from __future__ import annotations

import signal
import subprocess
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile

from mlx_speech.audio.pcm import to_pcm16
from mlx_speech.book.source import read_book
from mlx_speech.book.speech import BookSpeech
from mlx_speech.cli.main import main
from mlx_speech.request import SpeechRequest
from tests.tts.support.cli import MLX_SPEECH, run
from tests.tts.support.full_disk import fill_after
from tests.tts.support.markdown_book import CHAPTERS, markdown_book
from tests.tts.support.probe import probed

pytestmark = pytest.mark.slow  # the installed command, in subprocesses

SHORT = ("--max-new-tokens", "3", "--seed", "5")
RATE = 48000


def _book(path, sentences_per_chapter: int = 3):
    path.write_text(markdown_book(sentences_per_chapter), encoding="utf-8")
    return path


def test_a_book_becomes_a_chaptered_m4b_with_captions(speaking_dir, tmp_path):
    book = _book(tmp_path / "short.md")
    out = tmp_path / "short.m4b"
    done = run(
        "book", str(book), "-o", str(out), "--model", str(speaking_dir),
        "--captions", str(tmp_path / "short.vtt"),
        "--chapters-dir", str(tmp_path / "chapters"), *SHORT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = probed(out)
    assert [c["tags"]["title"] for c in found["chapters"]] == list(CHAPTERS)
    assert found["format"]["tags"]["title"] == "A Short Book"
    assert found["format"]["tags"]["artist"] == "A. Writer"
    duration = float(found["format"]["duration"])
    cues = (tmp_path / "short.vtt").read_text().split("\n\n")[1:-1]
    assert len(cues) == 3 * 4  # each heading, then three sentences
    last_end = cues[-1].splitlines()[0].split(" --> ")[1]
    minutes, seconds = last_end.split(":")[1:]
    assert abs(int(minutes) * 60 + float(seconds) - duration) < 0.03  # AAC's frames
    assert float(found["chapters"][-1]["end_time"]) == pytest.approx(duration, abs=0.03)
    files = sorted(path.name for path in (tmp_path / "chapters").iterdir())
    assert files == ["1 Arrival.m4b", "2 The Long Night.m4b", "3 Home.m4b"]
    assert "wrote" in done.stdout and "3 chapter(s)" in done.stdout
    assert f"of spoken sentences in {out}.spoken" in done.stdout  # kept, with its size


def _kept(folder) -> int:
    return len(list(folder.glob("*.flac"))) if folder.is_dir() else 0


def _long_book_once_kept(args: list[str], kept, sentences: int) -> subprocess.Popen:
    """``mlx-speech`` with ``args`` started, once its store ``kept`` holds
    ``sentences`` sentences."""
    started = subprocess.Popen(
        [MLX_SPEECH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while _kept(kept) < sentences:
        assert started.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    return started


def test_a_killed_book_finishes_when_run_again(speaking_dir, speaking_tts, tmp_path):
    book = _book(tmp_path / "long.md", sentences_per_chapter=12)
    out = tmp_path / "long.flac"
    args = ["book", str(book), "-o", str(out), "--model", str(speaking_dir)]
    args += ["--max-new-tokens", "6", "--seed", "5", "--loudness", "off"]
    kept = tmp_path / "long.flac.spoken"
    started = _long_book_once_kept(args, kept, 5)
    started.send_signal(signal.SIGKILL)
    started.wait()
    before = {path: path.read_bytes() for path in kept.glob("*.flac")}
    assert not out.exists() and 5 <= len(before) < 39  # three headings, 36 sentences
    again = run(*args)
    assert again.returncode == 0, again.stderr
    assert f"resuming: {len(before)} of 39 sentences were spoken before" in again.stderr
    assert f"{39 - len(before)} of 39 sentences spoken now" in again.stdout
    assert all(path.read_bytes() == data for path, data in before.items())
    # the book is its sentences as kept, in its order, the reused ones included
    request = SpeechRequest.of("", max_new_tokens=6, seed=5)
    speech = BookSpeech(speaking_tts, read_book(book), request)
    assert {s.key for s in speech.sentences} == {p.stem for p in kept.glob("*.flac")}
    joined = np.concatenate(
        [
            soundfile.read(kept / f"{s.key}.flac", dtype="float32")[0]
            for s in speech.sentences
        ]
    )
    written, _ = soundfile.read(out, dtype="int16")
    np.testing.assert_array_equal(written, to_pcm16(joined))


def test_a_full_disk_stops_the_book_and_keeps_what_was_spoken(
    speaking_dir, tmp_path, monkeypatch, capsys
):
    book = _book(tmp_path / "book.md")
    out = tmp_path / "book.wav"
    args = ["book", str(book), "-o", str(out), "--model", str(speaking_dir), *SHORT]
    fill_after(monkeypatch, kept=4)
    assert main(args) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("mlx-speech: error: cannot keep a spoken sentence in")
    assert "No space left on device" in error and "run the same command again" in error
    kept = tmp_path / "book.wav.spoken"
    assert _kept(kept) == 4 and not list(kept.glob("*.partial")) and not out.exists()
    monkeypatch.undo()  # space again
    assert main(args) == 0
    assert "resuming: 4 of 12" in capsys.readouterr().err
    assert soundfile.info(out).frames > 0


def _epub_without_container(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
    return path


def _drm_epub(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", "<container/>")
        archive.writestr("META-INF/rights.xml", "<rights/>")
    return path


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("empty.md", lambda p: p.write_text("  \n\n"), "no text to speak"),
        ("scan.txt", lambda p: p.write_bytes(b"%PDF-1.7\x00\x01\xff"), "not UTF-8 text"),
        ("fake.epub", lambda p: p.write_text("just text"), "not a zip file"),
        ("hollow.epub", _epub_without_container, "not an EPUB"),
        ("locked.epub", _drm_epub, "DRM"),
        ("notes.docx", lambda p: p.write_bytes(b"PK"), ".txt, .md, .epub or .pdf"),
        ("broken.pdf", lambda p: p.write_bytes(b"%PDF"), "could not be read as a PDF"),
        ("huge.txt", lambda p: p.write_bytes(b"word " * (4 << 20)), "the limit is"),
    ],
)
def test_a_bad_book_is_one_line_and_writes_nothing(tmp_path, name, make, says):
    source = tmp_path / name
    make(source)
    done = run("book", str(source), "-o", str(tmp_path / "out.m4b"), "--model", "/none")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and says in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_book_without_headings_is_one_chapter(speaking_dir, tmp_path):
    source = tmp_path / "letter.txt"
    source.write_text("Dear friend,\nthis is one\nparagraph.\n\nAnd another one.\n")
    out = tmp_path / "l.mp3"
    done = run("book", str(source), "-o", str(out), "--model", str(speaking_dir), *SHORT)
    assert done.returncode == 0, done.stderr
    assert [c["tags"]["title"] for c in probed(out)["chapters"]] == ["letter"]


def test_the_output_name_is_checked_before_anything_loads(tmp_path):
    source = _book(tmp_path / "b.md")
    done = run("book", str(source), "-o", str(tmp_path / "b.aac"), "--model", "/none")
    assert done.returncode == 1 and ".m4b, .mp3, .opus, .flac or .wav" in done.stderr
    assert done.stderr.count("\n") == 1


def test_list_shows_the_contents_and_what_is_left_out_without_a_model():
    fixture = Path(__file__).parent / "fixtures" / "lighthouse-epub2.epub"
    done = run("book", str(fixture), "--list", "--model", "/no/such/model")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Le Gardien du Phare, by Marie Dupont"
    assert [line.split()[:2] for line in lines[2:5]] == [
        ["1", "Préface"],
        ["2", "La"],
        ["3", "Le"],
    ]
    assert lines[3].split()[-2] == "6"  # La Tempête's sentences
    assert "3 chapter(s), 12 sentences" in lines[5]
    assert "left out: the table of contents (nav.xhtml)" in lines
    assert "left out: 2 footnotes" in lines


def test_chapters_past_the_book_are_refused_before_the_model_loads(tmp_path):
    source = _book(tmp_path / "b.md")
    done = run("book", str(source), "--chapters", "2,9", "--model", "/no/such/model")
    assert done.returncode == 1 and "the book has chapters 1 to 3" in done.stderr


def test_ctrl_c_says_in_one_line_what_is_kept_and_what_to_do(speaking_dir, tmp_path):
    book = _book(tmp_path / "long.md", sentences_per_chapter=12)
    out = tmp_path / "long.flac"
    args = ["book", str(book), "-o", str(out), "--model", str(speaking_dir)]
    args += ["--max-new-tokens", "6", "--seed", "5"]
    started = _long_book_once_kept(args, tmp_path / "long.flac.spoken", 3)
    started.send_signal(signal.SIGINT)
    _, err = started.communicate(timeout=60)
    assert started.returncode == 130
    last = err.strip().splitlines()[-1]
    assert last.startswith("stopped: ") and "of 39 sentences are kept in" in last
    assert last.endswith("run the same command again to finish")
    assert "Traceback" not in err


def test_the_command_steps_its_book_batch_and_gives_the_engine_back(
    speaking_dir, tmp_path, monkeypatch
):
    """Its own process speaks 16 sentences at once with the engine stepping
    16 together; run in a caller's process, the engine's batch is back after."""
    from mlx_speech.book.speaker import BOOK_BATCH
    from mlx_speech.engine import shared_engine

    seen = []
    speak = BookSpeech.speak

    def recording(self, store, **options):
        seen.append((shared_engine().max_batch, options["in_flight"]))
        return speak(self, store, **options)

    monkeypatch.setattr(BookSpeech, "speak", recording)
    before = shared_engine().max_batch
    book = _book(tmp_path / "book.md")
    args = [
        "book",
        str(book),
        "-o",
        str(tmp_path / "book.wav"),
        "--model",
        str(speaking_dir),
    ]
    assert main([*args, *SHORT]) == 0
    assert seen == [(BOOK_BATCH, BOOK_BATCH)] and BOOK_BATCH == 16
    assert shared_engine().max_batch == before
