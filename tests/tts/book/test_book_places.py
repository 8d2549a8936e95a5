"""``mlx-speech book`` given hostile places to write and books that once
broke it: every place it writes is checked before the model loads (never
the book itself, never a device, a folder it can write, names that fit),
a sentence without audio never breaks a run or its rerun, long titles
make chapter files, and a real full disk says one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tts.support.cli import run
from tests.tts.support.markdown_book import markdown_book
from tests.tts.support.probe import probed
from tests.tts.support.tmpfs import run_on_a_tmpfs

pytestmark = pytest.mark.slow  # the installed command, in subprocesses

SHORT = ("--max-new-tokens", "3", "--seed", "5")


def _refused(*args: str) -> str:
    """The command's one line, from a model that would fail to load: what is
    refused is refused before the model loads."""
    done = run("book", *args, "--model", "/no/such/model")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "/no/such/model" not in done.stderr
    return done.stderr


def test_a_paragraph_without_audio_is_written_and_run_again(speaking_dir, tmp_path):
    source = tmp_path / "p0.txt"
    source.write_text("Hello there.\n\n[pause:0s]\n\nBye now.\n")
    out, captions = tmp_path / "p0.m4b", tmp_path / "p0.vtt"
    args = ["book", str(source), "-o", str(out), "--model", str(speaking_dir), *SHORT]
    for _ in range(2):
        done = run(*args, "--captions", str(captions))
        assert done.returncode == 0, done.stderr
    assert "resuming: 3 of 3" in done.stderr
    assert captions.read_text().count(" --> ") == 2


def test_the_book_itself_is_never_written_over(tmp_path):
    source = tmp_path / "same.md"
    source.write_text(markdown_book(1))
    said = _refused(str(source), "-o", str(source), "--format", "wav")
    assert "it is the book being read" in said
    (tmp_path / "1 Arrival.md").symlink_to(source)  # a chapter file's name
    said = _refused(
        str(source), "-o", str(tmp_path / "o.md"), "--format", "wav",
        "--chapters-dir", str(tmp_path),
    )  # fmt: skip
    assert "it is the book being read" in said
    assert source.read_text() == markdown_book(1)


def test_a_special_file_is_never_replaced(tmp_path):
    source = tmp_path / "b.md"
    source.write_text(markdown_book(1))
    fifo = tmp_path / "pipe.m4b"
    os.mkfifo(fifo)
    assert "not a regular file" in _refused(str(source), "-o", str(fifo))
    assert fifo.is_fifo()


def test_every_place_is_checked_before_the_model_loads(tmp_path):
    source = tmp_path / "b.md"
    source.write_text(markdown_book(1))
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    said = _refused(str(source), "--chapters-dir", str(a_file / "chapters"))
    assert "is a file, not a folder" in said
    long_name = "n" * 245 + ".m4b"  # fits, but its kept folder's name would not
    said = _refused(str(source), "-o", str(tmp_path / long_name))
    assert "choose a shorter name" in said
    said = _refused(str(source), "-o", str(tmp_path / "missing" / "b.m4b"))
    assert "it does not exist" in said
    said = _refused(str(source), "-o", str(tmp_path / "b.m4b"), "--captions", "b.m4b")
    assert "name a .vtt or .srt file" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "b.md"]


def test_more_chapters_than_the_format_marks_is_refused_first(tmp_path):
    source = tmp_path / "many.md"
    source.write_text("".join(f"# C{n}\n\nWords {n}.\n\n" for n in range(1000)))
    said = _refused(str(source), "-o", str(tmp_path / "many.opus"))
    assert "1000 chapters" in said and ".opus" in said and ".m4b" in said


def _book_on_a_tmpfs(tmp_path, mount: str, book: str, *flags: str):
    """``mlx-speech book`` writing into a tmpfs (``support.tmpfs``)."""
    source = tmp_path / "b.md"
    source.write_text(book)
    folder = tmp_path / "mounted"
    output = str(folder / "b.flac")
    return run_on_a_tmpfs(folder, mount, "book", str(source), "-o", output, *flags)


def test_a_read_only_folder_is_refused_before_the_model_loads(tmp_path):
    done = _book_on_a_tmpfs(tmp_path, "ro", markdown_book(1), "--model", "/no/such/model")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "read-only disk" in done.stderr


def test_a_full_disk_says_one_line(speaking_dir, tmp_path):
    done = _book_on_a_tmpfs(
        tmp_path, "size=96k", markdown_book(12), "--model", str(speaking_dir), *SHORT
    )
    assert done.returncode == 1, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert "No space left on device" in error and "run the same command again" in error
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr


def test_long_titles_make_chapter_files(speaking_dir, tmp_path):
    source = tmp_path / "long.md"
    titles = ["第三章" * 40, "Écoute 🎧 " * 30]
    source.write_text("".join(f"# {title}\n\nWords here.\n\n" for title in titles))
    chapters = tmp_path / "chapters"
    done = run(
        "book", str(source), "-o", str(tmp_path / "long.m4b"), "--model",
        str(speaking_dir), "--chapters-dir", str(chapters), *SHORT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = sorted(path.name for path in chapters.iterdir())
    assert [name[:2] for name in names] == ["1 ", "2 "]
    assert all(len(name.encode()) <= 255 for name in names)
    assert all(float(probed(chapters / name)["format"]["duration"]) > 0 for name in names)


def test_a_cover_given_is_embedded_and_a_bad_one_refused_first(speaking_dir, tmp_path):
    source = tmp_path / "b.md"
    source.write_text(markdown_book(1))
    not_an_image = tmp_path / "cover.jpg"
    not_an_image.write_text("not an image")
    said = _refused(str(source), "--cover", str(not_an_image))
    assert "is not a JPEG or PNG image" in said
    cover = Path(__file__).parent / "fixtures" / "cover.png"
    out = tmp_path / "b.mp3"
    done = run(
        "book", str(source), "-o", str(out), "--cover", str(cover),
        "--model", str(speaking_dir), *SHORT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    streams = probed(out)["streams"]
    assert [s["codec_name"] for s in streams if s["codec_type"] == "video"] == ["png"]


@pytest.mark.parametrize("loudness", ["-41", "-4", "loud"])
def test_a_loudness_outside_the_documented_range_is_a_usage_error(tmp_path, loudness):
    source = tmp_path / "b.md"
    source.write_text(markdown_book(1))
    done = run("book", str(source), "--loudness", loudness, "--model", "/no/such/model")
    assert done.returncode == 2 and "--loudness" in done.stderr
    assert "outside -40 to -5" in done.stderr or "is no loudness" in done.stderr
