"""``mlx-speech book``: a book (plain text, Markdown, EPUB) into one chaptered
audio file, its sentences spoken many at a time and kept as they finish
beside the output, so the same command run again after any stop finishes
the book, speaking nothing twice. Every file it writes appears whole or
not at all."""

from __future__ import annotations

import argparse
import contextlib
import errno
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from ..book.speaker import BOOK_BATCH
from .arguments import loaded_model, sampling_arguments, speech_arguments, speech_request

SHOWN_SUSPECTS = 10  # in the summary; --report has them all


def add_parser(commands) -> None:
    book = commands.add_parser(
        "book",
        help="speak a book (.txt, .md, .epub, .pdf) into an audiobook",
        description="Speak a book into one audio file with its chapters: an EPUB's "
        "table of contents, a Markdown file's headings, a PDF's outline, or a plain "
        "text file as one chapter; what a reader skips is left out (--list shows "
        "the plan). Run again after any stop, it resumes where it was.",
    )
    book.add_argument("file", metavar="FILE", help="the book: .txt, .md, .epub or .pdf")
    book.add_argument(
        "-o",
        "--output",
        default=None,
        help="the audiobook: .m4b (AAC with chapters), .mp3, .opus, .flac or .wav "
        "(default: FILE's name with .m4b, here)",
    )
    book.add_argument(
        "--format", default=None, help="container (default: from the output suffix)"
    )
    book.add_argument(
        "--chapters-dir",
        default=None,
        metavar="DIR",
        help="also write each chapter as a file of its own in DIR",
    )
    book.add_argument(
        "--captions",
        default=None,
        metavar="FILE",
        help="also write the whole book's captions, one a sentence: WebVTT (.vtt) "
        "or SubRip (.srt)",
    )
    _choice_arguments(book)
    speech_arguments(book)
    sampling_arguments(book)


def _take_arguments(book) -> None:
    """How each sentence's take is checked, and what is told of it."""
    book.add_argument(
        "--retakes",
        type=_retakes,
        default=2,
        metavar="N",
        help="speak a take again, up to N times, while it is suspect: it ran to "
        "the frame budget, or its length is far from what its text implies; the "
        "best is kept (default: 2; 0 checks without retaking)",
    )
    book.add_argument(
        "--report",
        default=None,
        metavar="FILE",
        help="write the sentences still suspect there, a line each: chapter, time and text",
    )


def _choice_arguments(book) -> None:
    """What is read and spoken, and how the file sounds."""
    book.add_argument(
        "--list",
        action="store_true",
        help="print each chapter's number, title, sentences and estimated minutes, "
        "and what is left out and why, then stop (no model is loaded)",
    )
    book.add_argument(
        "--chapters",
        default=None,
        metavar="LIST",
        help="speak only these chapters, by the numbers --list shows: 3-5,7",
    )
    book.add_argument(
        "--redo",
        default=None,
        metavar="LIST",
        help="speak these chapters again with another seed (3-5,7), keeping every "
        "other sentence kept; later runs keep the new takes",
    )
    book.add_argument(
        "--dialogue-voice",
        default=None,
        metavar="NAME",
        help="speak what the book quotes in this voice, the narration in --voice "
        "(a voice tag in the text still wins)",
    )
    _take_arguments(book)
    book.add_argument(
        "--cover",
        default=None,
        metavar="IMAGE",
        help="the cover to embed, a JPEG or PNG (default: the EPUB's own)",
    )
    book.add_argument(
        "--loudness",
        default=-18.0,
        type=_loudness,
        metavar="LUFS|off",
        help="bring each chapter to this integrated loudness (EBU R128), its true "
        "peak under -1 dBTP; off leaves the audio as spoken (default: -18)",
    )
    book.add_argument(
        "--footnotes",
        choices=("skip", "chapter-end"),
        default="skip",
        help="skip a book's notes (default), or read each chapter's at its end",
    )


def run(args: argparse.Namespace) -> None:
    from ..book.contents import chosen_chapters
    from ..book.source import read_book

    output = _checked_output(args)
    # a bad book fails before the model loads
    book = read_book(args.file, footnotes=args.footnotes)
    if args.list:
        print(_contents(book))
        return
    if args.cover is not None:
        book = replace(book, cover=_cover(Path(args.cover)))
    chapters = chosen_chapters(args.chapters, len(book.chapters))
    redo = chosen_chapters(args.redo, len(book.chapters)) or frozenset()
    _check_places(args, book, output)
    with _batch_for_books():
        _speak_and_write(args, book, output, chapters, redo)


def _speak_and_write(
    args: argparse.Namespace, book, output: Path, chapters, redo: frozenset[int]
) -> None:
    from ..book.speech import BookSpeech
    from ..book.store import SpokenStore, kept_takes, redone

    loading = time.perf_counter()
    tts = loaded_model(args)
    folder = _store_folder(output)
    takes = redone(kept_takes(folder), redo)
    request = speech_request(args, "")
    speech = BookSpeech(
        tts,
        book,
        request,
        chapters=chapters,
        takes=takes,
        dialogue_voice=args.dialogue_voice,
        retakes=args.retakes,
    )
    started = time.perf_counter()
    print(f"model loaded in {started - loading:.1f} s", file=sys.stderr)
    with SpokenStore(folder) as store:
        if redo:
            store.keep_takes(takes)
        try:
            spoken_now = _speak(speech, store, BOOK_BATCH)
            _write_all(speech, store, output, args)
        except KeyboardInterrupt:
            print(
                f"\nstopped: {speech.kept(store)} of {len(speech.sentences)} sentences "
                f"are kept in {folder}: run the same command again to finish",
                file=sys.stderr,
            )
            raise
        seconds = sum(c.end - c.start for c in speech.captions(store)) / speech.rate
        took = time.perf_counter() - started
        print(_summary(output, speech, seconds, spoken_now, took))
        _tell_suspects(speech.suspects(store), args.report)
        print(
            f"kept {store.size() / 1e6:.0f} MB of spoken sentences in {folder}: run "
            "again after an edit and only what changed is spoken; delete it when done"
        )


def _check_places(args: argparse.Namespace, book, output: Path) -> None:
    """Every file the command will write, before the model loads
    (``places``), and a chapter count the format holds."""
    from ..audio.chapters import book_format, check_chapter_count
    from ..book.files import chapter_paths
    from .places import check_places

    check_chapter_count(book_format(output, args.format), len(book.chapters))
    files = [output]
    if args.captions is not None:
        files.append(Path(args.captions))
    if args.report is not None:
        files.append(Path(args.report))
    folders = [_store_folder(output)]
    if args.chapters_dir is not None:
        folders.append(Path(args.chapters_dir))
        titles = [chapter.title for chapter in book.chapters]
        files += chapter_paths(titles, Path(args.chapters_dir), output.suffix)
    check_places(Path(args.file), files, folders)


def _retakes(text: str) -> int:
    from ..book.speech import MAX_RETAKES

    try:
        retakes = int(text)
    except ValueError:
        retakes = -1
    if not 0 <= retakes <= MAX_RETAKES:
        raise argparse.ArgumentTypeError(f"a number of retakes, 0 to {MAX_RETAKES}")
    return retakes


def _loudness(text: str) -> float | None:
    """``--loudness``: LUFS, or "off"."""
    from ..audio.loudness import TARGETS_LUFS, is_target

    if text.lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        message = f"{text!r} is no loudness: give LUFS (-18) or off"
        raise argparse.ArgumentTypeError(message) from None
    if not is_target(value):
        low, high = TARGETS_LUFS
        raise argparse.ArgumentTypeError(f"{text} LUFS is outside {low:g} to {high:g}")
    return value


def _cover(path: Path):
    from ..audio.pictures import picture_of

    try:
        with open(path, "rb") as file:
            data = file.read(64 * 1024 * 1024)
    except OSError as error:
        raise RuntimeError(f"cannot read the cover {path}: {error.strerror}") from None
    return picture_of(data, str(path))


def _contents(book) -> str:
    """``--list``: the chapters as they would be spoken, and what is not."""
    from ..book.contents import book_contents

    contents = book_contents(book)
    width = max(len(chapter.title) for chapter in contents)
    lines = [f"{book.title or 'Untitled'}" + (f", by {book.author}" if book.author else "")]
    lines.append(f"{'#':>4}  {'chapter':<{width}}  sentences  minutes")
    for chapter in contents:
        lines.append(
            f"{chapter.number:>4}  {chapter.title:<{width}}  {chapter.sentences:>9}"
            f"  {chapter.minutes:>7.1f}"
        )
    sentences = sum(chapter.sentences for chapter in contents)
    minutes = sum(chapter.minutes for chapter in contents)
    lines.append(
        f"{len(contents)} chapter(s), {sentences} sentences, about {minutes:.1f} min "
        "(estimated at a narrator's pace)"
    )
    lines += [f"left out: {what}" for what in book.left_out]
    return "\n".join(lines)


def _store_folder(output: Path) -> Path:
    return output.with_name(output.name + ".spoken")


@contextlib.contextmanager
def _batch_for_books() -> Iterator[None]:
    """While a book is spoken, the engine steps ``BOOK_BATCH`` of its
    sentences together (set before the model loads, which warms its shapes);
    after, its batch is back as it was (``main`` may run in a caller's
    process)."""
    from ..engine import shared_engine

    engine = shared_engine()
    before = engine.max_batch
    engine.configure(BOOK_BATCH, engine.max_parked)
    try:
        yield
    finally:
        engine.configure(before, engine.max_parked)


def _speak(speech, store, in_flight: int) -> int:
    """Speak what the store lacks, with its progress; how many were spoken."""
    from ..book.assembly import sentence_lengths
    from .progress import BookProgress

    done = [s for s in speech.sentences if store.has(s.key)]
    total = len(speech.sentences)
    if done:
        print(
            f"resuming: {len(done)} of {total} sentences were spoken before "
            f"(kept in {store.folder})",
            file=sys.stderr,
        )
    progress = BookProgress(
        speech, {s.key for s in done}, sum(sentence_lengths(store, done)), sys.stderr
    )
    try:
        speech.speak(store, in_flight=in_flight, spoken=progress)
    except OSError as error:
        raise _disk_error(error, f"keep a spoken sentence in {store.folder}") from None
    finally:
        progress.close()
    return total - len(done)


def _write_all(speech, store, output: Path, args: argparse.Namespace) -> None:
    """The book, its chapters and its captions, each whole or not at all."""
    from ..book.assembly import sentence_lengths
    from ..text.captions import srt, webvtt
    from .progress import WritingProgress

    total = sum(sentence_lengths(store, speech.sentences))
    progress = WritingProgress(total, speech.rate, sys.stderr)
    try:
        _write_whole(
            output,
            lambda path: speech.write(
                store, path, args.format, written=progress, loudness=args.loudness
            ),
            store.folder,
        )
    finally:
        progress.close()
    if args.chapters_dir is not None:
        folder = Path(args.chapters_dir)
        try:
            speech.write_chapters(
                store, folder, output.suffix, args.format, loudness=args.loudness
            )
        except OSError as error:
            raise _disk_error(
                error, f"write the chapters in {folder}", store.folder
            ) from None
    if args.captions is not None:
        path = Path(args.captions)
        write = webvtt if path.suffix.lower() == ".vtt" else srt
        text = write(speech.captions(store))
        _write_whole(path, lambda p: p.write_text(text, encoding="utf-8"), store.folder)


def _write_whole(path: Path, write: Callable[[Path], object], kept: Path | None) -> None:
    """``write`` into ``path``, whole or not at all (``book.files``)."""
    from ..book.files import write_whole

    try:
        write_whole(path, write)
    except OSError as error:
        raise _disk_error(error, f"write {path}", kept) from None


def _disk_error(error: OSError, doing: str, kept: Path | None = None) -> RuntimeError:
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return RuntimeError(
            f"cannot {doing}: {reason}; every sentence spoken so far is kept"
            + (f" in {kept}" if kept else "")
            + ": free some space and run the same command again to finish"
        )
    return RuntimeError(f"cannot {doing}: {reason}")


def _checked_output(args: argparse.Namespace) -> Path:
    """The audiobook's path, checked before any work (with the other files)."""
    from ..audio.chapters import book_format

    output = Path(args.output or Path(args.file).with_suffix(".m4b").name)
    if output.is_dir():
        raise RuntimeError(f"cannot write {output}: it is a directory; name a file in it")
    book_format(output, args.format)
    if args.captions and Path(args.captions).suffix.lower() not in (".vtt", ".srt"):
        raise RuntimeError(
            f"cannot write captions to {args.captions}: name a .vtt or .srt file"
        )
    return output


def _tell_suspects(found: list, report: str | None) -> None:
    """The sentences still suspect, after the summary (the first few) and in
    ``report`` (all of them, or a line saying none is)."""
    from ..book.report import report_text

    if found:
        more = f" (all in {report})" if report else " (--report FILE lists them all)"
        print(f"{len(found)} sentence(s) still suspect after their retakes{more}:")
        for suspect in found[:SHOWN_SUSPECTS]:
            print(f"  {suspect.line()}")
        if len(found) > SHOWN_SUSPECTS:
            print(f"  ... and {len(found) - SHOWN_SUSPECTS} more")
    if report is not None:
        text = report_text(found)
        _write_whole(Path(report), lambda p: p.write_text(text, encoding="utf-8"), None)


def _summary(output: Path, speech, seconds: float, spoken_now: int, took: float) -> str:
    minutes = seconds / 60
    chapters = len(speech.chapter_sentences())
    pace = f"{seconds / took:.1f} times real time" if took > 0 else "at once"
    return (
        f"wrote {output}: {chapters} chapter(s), {minutes:.1f} min of audio; "
        f"{spoken_now} of {len(speech.sentences)} sentences spoken now, in "
        f"{took:.1f} s ({pace})"
    )
