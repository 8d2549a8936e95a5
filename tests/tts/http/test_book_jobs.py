"""Book jobs over HTTP against a real uvicorn server on a tiny checkpoint: a
long text or a book file spoken in the background into a chaptered
audiobook with captions; cancelled, deleted, bounded, behind the key; and
resumed by the next server after a stop, its kept sentences reused."""

from __future__ import annotations

import concurrent.futures
import errno
import json
import os
import time
from pathlib import Path

import httpx
import pytest

from mlx_speech.book.source import MAX_BOOK_BYTES
from mlx_speech.http.books.request import parse_book_request
from mlx_speech.http.openapi import openapi_document
from mlx_speech.http.speech.request import RequestRules
from mlx_speech.server import ServerSettings
from mlx_speech.serving import books as books_module
from tests.tts.support.field_reads import FieldReads
from tests.tts.support.full_disk import fill_after
from tests.tts.support.markdown_book import CHAPTERS, markdown_book
from tests.tts.support.probe import probed
from tests.tts.support.raw_epub import page, raw_epub
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers

KEY = "s3cret"
SHORT = {"max_new_tokens": 3, "seed": 5}
LONG = {"max_new_tokens": 100, "seed": 5}  # seconds a job: long enough to catch it
AAC_FRAME_SECONDS = 1024 / 48000
LONG_BOOK = markdown_book(13)  # 3 headings and 39 sentences: 42


def _settings(speaking_dir, tmp_path_factory, **changes) -> ServerSettings:
    return ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("book-voices"),
        books_dir=tmp_path_factory.mktemp("books"),
        **changes,
    )


@pytest.fixture(scope="module")
def server(speaking_dir, tmp_path_factory):
    settings = _settings(speaking_dir, tmp_path_factory, api_key=KEY, public_listings=True)
    with RunningServer(settings) as running:
        yield running


def _client(server: RunningServer) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"authorization": f"Bearer {KEY}"}, timeout=60
    )


@pytest.fixture
def client(server):
    with _client(server) as opened:
        yield opened


def _wait(client: httpx.Client, job_id: str, until, timeout: float = 180) -> dict:
    """The job once ``until(job)`` holds; a job failed otherwise fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/v1/audio/books/{job_id}").json()
        if until(job):
            return job
        assert job["status"] != "failed", job
        assert time.monotonic() < deadline, job
        time.sleep(0.02)


def _done(client: httpx.Client, job_id: str) -> dict:
    return _wait(client, job_id, lambda job: job["status"] in ("done", "cancelled"))


def _seconds(clock: str) -> float:
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_a_markdown_text_becomes_a_chaptered_audiobook_with_captions(client, tmp_path):
    body = {"input": markdown_book(2), "input_format": "markdown", **SHORT}
    created = client.post("/v1/audio/books", json=body)
    assert created.status_code == 202, created.text
    job = created.json()
    assert created.headers["location"] == f"/v1/audio/books/{job['id']}"
    assert job["object"] == "audio.book" and job["status"] in ("queued", "speaking")
    assert (job["title"], job["author"]) == ("A Short Book", "A. Writer")
    assert job["chapters"] == 3 and job["sentences"]["total"] == 9
    assert job["response_format"] == "m4b" and job["audio_url"] is None
    done = _done(client, job["id"])
    assert done["status"] == "done", done
    assert done["sentences"] == {"done": 9, "total": 9}
    assert done["started_at"] >= done["created_at"] and done["finished_at"] is not None
    assert done["audio_url"] == f"/v1/audio/books/{job['id']}/audio"

    audio = client.get(done["audio_url"])
    assert audio.status_code == 200
    assert audio.headers["content-type"] == "audio/mp4"
    assert 'attachment; filename="A Short Book.m4b"' in audio.headers["content-disposition"]
    book = tmp_path / "book.m4b"
    book.write_bytes(audio.content)
    found = probed(book)
    assert [c["tags"]["title"] for c in found["chapters"]] == list(CHAPTERS)
    assert found["format"]["tags"]["title"] == "A Short Book"
    duration = float(found["format"]["duration"])
    assert done["audio_seconds"] == pytest.approx(duration, abs=AAC_FRAME_SECONDS)

    captions = client.get(done["captions_url"])
    assert captions.status_code == 200
    assert captions.headers["content-type"].startswith("text/vtt")
    cues = captions.text.strip().split("\n\n")[1:]
    assert len(cues) == 9  # each heading, then its two sentences
    last_end = _seconds(cues[-1].splitlines()[0].split(" --> ")[1])
    assert abs(last_end - duration) <= AAC_FRAME_SECONDS + 0.001  # cues are in ms


def test_an_uploaded_book_file_is_read_by_its_name(client, tmp_path):
    created = client.post(
        "/v1/audio/books",
        files={"file": ("story.md", markdown_book(1).encode(), "text/markdown")},
        data={"response_format": "mp3", "title": "My Story", **SHORT},
    )
    assert created.status_code == 202, created.text
    job = created.json()
    assert (job["source"], job["title"], job["chapters"]) == ("story.md", "My Story", 3)
    done = _done(client, job["id"])
    assert done["status"] == "done", done
    audio = client.get(done["audio_url"])
    assert audio.headers["content-type"] == "audio/mpeg"
    assert 'filename="My Story.mp3"' in audio.headers["content-disposition"]
    book = tmp_path / "story.mp3"
    book.write_bytes(audio.content)
    found = probed(book)
    assert [c["tags"]["title"] for c in found["chapters"]] == list(CHAPTERS)
    assert found["format"]["tags"]["title"] == "My Story"


def test_a_plain_text_is_one_chapter_named_by_its_title(client, tmp_path):
    body = {"input": "One line.\n\nAnother one.", "title": "Notes", **SHORT}
    job = client.post("/v1/audio/books", json=body).json()
    assert (job["source"], job["chapters"], job["sentences"]["total"]) == (
        "Notes.txt",
        1,
        2,
    )
    assert _done(client, job["id"])["status"] == "done"
    book = tmp_path / "notes.m4b"
    book.write_bytes(client.get(f"/v1/audio/books/{job['id']}/audio").content)
    assert [c["tags"]["title"] for c in probed(book)["chapters"]] == ["Notes"]


def test_a_running_job_is_cancelled_then_deleted(server, client):
    body = {"input": LONG_BOOK, "input_format": "markdown", **LONG}
    job = client.post("/v1/audio/books", json=body).json()
    running = _wait(client, job["id"], lambda job: job["sentences"]["done"] >= 1)
    assert running["status"] == "speaking", running
    cancelled = client.post(f"/v1/audio/books/{job['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["sentences"]["done"] < 42
    assert client.get(f"/v1/audio/books/{job['id']}").json()["status"] == "cancelled"
    refused = client.get(f"/v1/audio/books/{job['id']}/audio")
    said = refused.json()["error"]["message"]
    assert refused.status_code == 409 and "is cancelled" in said
    assert "not run again: create the job again" in said

    folder = server.app.state.settings.books_dir / job["id"]
    assert (folder / "job.json").is_file()
    deleted = client.delete(f"/v1/audio/books/{job['id']}")
    assert deleted.json() == {
        "id": job["id"],
        "object": "audio.book.deleted",
        "deleted": True,
    }
    assert client.get(f"/v1/audio/books/{job['id']}").status_code == 404
    assert not folder.exists()
    listed = [listed["id"] for listed in client.get("/v1/audio/books").json()["data"]]
    assert job["id"] not in listed


def test_jobs_are_listed_newest_first(client):
    first = client.post("/v1/audio/books", json={"input": "First.", **SHORT}).json()
    second = client.post("/v1/audio/books", json={"input": "Second.", **SHORT}).json()
    listing = client.get("/v1/audio/books").json()
    assert listing["object"] == "list"
    ids = [job["id"] for job in listing["data"]]
    assert ids.index(second["id"]) < ids.index(first["id"])
    assert _done(client, second["id"])["status"] == "done"
    # a done job is left as it is
    done = client.post(f"/v1/audio/books/{second['id']}/cancel").json()
    assert done["status"] == "done"


def test_a_job_not_done_has_no_audio_yet_and_a_queued_one_cancels_at_once(client):
    body = {"input": LONG_BOOK, "input_format": "markdown", **LONG}
    running = client.post("/v1/audio/books", json=body).json()
    queued = client.post("/v1/audio/books", json=body).json()  # behind the first
    refused = client.get(f"/v1/audio/books/{running['id']}/captions")
    assert refused.status_code == 409
    assert "sentences spoken" in refused.json()["error"]["message"]
    cancelled = client.post(f"/v1/audio/books/{queued['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["started_at"] is None
    assert client.delete(f"/v1/audio/books/{running['id']}").status_code == 200
    time.sleep(0.5)  # the runner would have taken it by now
    again = client.get(f"/v1/audio/books/{queued['id']}").json()
    assert again["status"] == "cancelled" and again["sentences"]["done"] == 0
    assert client.delete(f"/v1/audio/books/{queued['id']}").status_code == 200


def test_a_book_over_the_bound_is_refused(client):
    big = (b"word " * (MAX_BOOK_BYTES // 5 + 1))[: MAX_BOOK_BYTES + 1]
    refused = client.post("/v1/audio/books", files={"file": ("big.txt", big)})
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["param"] == "file" and "split it into parts" in error["message"]
    refused = client.post("/v1/audio/books", json={"input": big.decode()})
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "input"


@pytest.mark.parametrize(
    ("request_", "status", "param", "says"),
    [
        (
            {"files": {"file": ("fake.epub", b"just text")}},
            400,
            "file",
            "'fake.epub' is not an EPUB: it is not a zip file",
        ),
        (
            {"files": {"file": ("notes.docx", b"PK")}},
            400,
            "file",
            "a book is a .txt, .md, .epub or .pdf file",
        ),
        (
            {"files": {"file": ("notes.pdf", b"%PDF")}},
            400,
            "file",
            "'notes.pdf' could not be read as a PDF",
        ),
        ({"json": {"input": "Hi.", "voice": "nobody"}}, 404, "voice", "unknown voice"),
        (
            {"json": {"input": "Hi.", "response_format": "aac"}},
            400,
            "response_format",
            "m4b",
        ),
        ({"json": {"input": "Hi.", "input_format": "html"}}, 400, "input_format", "text"),
        ({"json": {"input": "  "}}, 400, "input", "required"),
        ({"json": {"input": "Hi.", "speed": 9}}, 400, "speed", "speed"),
        ({"json": {"input": "Hi.", "max_new_tokens": "x"}}, 400, None, "max_new_tokens"),
        (
            {"json": {"input": "Hi.", "voice": {"ref_audio": "AAAA"}}},
            400,
            "voice",
            "save the clip as a voice first",
        ),
    ],
)
def test_a_bad_book_or_field_is_refused_before_a_job_is_made(
    client, request_, status, param, says
):
    before = len(client.get("/v1/audio/books").json()["data"])
    refused = client.post("/v1/audio/books", **request_)
    assert refused.status_code == status, refused.text
    error = refused.json()["error"]
    assert says in error["message"]
    if param is not None:
        assert error["param"] == param
    assert len(client.get("/v1/audio/books").json()["data"]) == before


@pytest.mark.parametrize(
    "job_id", ["book_" + "0" * 24, "nothing", "..%2F..%2Fetc", "BOOK_1"]
)
def test_an_unknown_job_is_404(client, job_id):
    for path in ("", "/audio", "/captions"):
        assert client.get(f"/v1/audio/books/{job_id}{path}").status_code == 404
    assert client.post(f"/v1/audio/books/{job_id}/cancel").status_code == 404
    assert client.delete(f"/v1/audio/books/{job_id}").status_code == 404


def test_every_book_route_needs_the_key_even_with_public_listings(server, client):
    job = client.post("/v1/audio/books", json={"input": "Keyed.", **SHORT}).json()
    routes = [
        ("POST", "/v1/audio/books"),
        ("GET", "/v1/audio/books"),
        ("GET", f"/v1/audio/books/{job['id']}"),
        ("GET", f"/v1/audio/books/{job['id']}/audio"),
        ("GET", f"/v1/audio/books/{job['id']}/captions"),
        ("POST", f"/v1/audio/books/{job['id']}/cancel"),
        ("DELETE", f"/v1/audio/books/{job['id']}"),
    ]
    for method, path in routes:
        refused = httpx.request(method, f"{server.url}{path}", json={"input": "Hi."})
        assert refused.status_code == 401, (method, path)
    assert httpx.get(f"{server.url}/v1/audio/voices").status_code == 200  # it is public
    assert client.get(f"/v1/audio/books/{job['id']}").status_code == 200


def test_past_max_books_new_jobs_are_refused_until_one_is_deleted(
    speaking_dir, tmp_path_factory
):
    settings = _settings(speaking_dir, tmp_path_factory, max_books=2)
    with RunningServer(settings) as running, _client(running) as client:
        jobs = [
            client.post("/v1/audio/books", json={"input": f"Job {n}.", **SHORT}).json()
            for n in range(2)
        ]
        refused = client.post("/v1/audio/books", json={"input": "One more.", **SHORT})
        assert refused.status_code == 429
        assert refused.json()["error"]["message"] == (
            "2 book jobs are kept; delete finished ones (DELETE /v1/audio/books/{id})"
        )
        _done(client, jobs[0]["id"])  # finished ones count too
        assert client.post("/v1/audio/books", json={"input": "Again."}).status_code == 429
        client.delete(f"/v1/audio/books/{jobs[0]['id']}")
        again = client.post("/v1/audio/books", json={"input": "Now.", **SHORT})
        assert again.status_code == 202


def _kept_files(folder) -> dict:
    """Each kept sentence: its bytes and the file that holds them (a sentence
    spoken again is a new file, even with the same bytes)."""
    return {
        path.name: (path.read_bytes(), os.stat(path).st_ino, os.stat(path).st_mtime_ns)
        for path in (folder / "spoken").glob("*.flac")
    }


def test_a_job_stopped_with_its_server_resumes_on_the_next(speaking_dir, tmp_path_factory):
    settings = _settings(speaking_dir, tmp_path_factory)
    body = {"input": LONG_BOOK, "input_format": "markdown", **LONG}
    with RunningServer(settings) as first, _client(first) as client:
        job = client.post("/v1/audio/books", json=body).json()
        _wait(client, job["id"], lambda job: job["sentences"]["done"] >= 3)
    folder = settings.books_dir / job["id"]
    kept = _kept_files(folder)
    stopped = json.loads((folder / "job.json").read_text())
    assert stopped["status"] == "speaking" and stopped["error"] is None
    assert 3 <= len(kept) < 42, len(kept)

    with RunningServer(settings) as second, _client(second) as client:
        resumed = _wait(client, job["id"], lambda job: job["status"] != "queued")
        assert resumed["sentences"]["done"] >= len(kept)  # counted as it starts again
        done = _done(client, job["id"])
        assert done["status"] == "done", done
        assert done["sentences"] == {"done": 42, "total": 42}
        assert client.get(done["audio_url"]).status_code == 200
    after = _kept_files(folder)
    assert len(after) == 42
    assert {name: after[name] for name in kept} == kept


def test_a_full_disk_fails_the_job_and_keeps_what_was_spoken(
    speaking_dir, tmp_path_factory, monkeypatch
):
    fill_after(monkeypatch, kept=4)
    settings = _settings(speaking_dir, tmp_path_factory)
    with RunningServer(settings) as running, _client(running) as client:
        body = {"input": markdown_book(2), "input_format": "markdown", **SHORT}
        job = client.post("/v1/audio/books", json=body).json()
        failed = _wait(client, job["id"], lambda job: job["status"] == "failed")
        assert failed["error"] == (
            "no space left on the server's disk (No space left on device); the 4 "
            "sentences spoken so far stay in this job until it is deleted: free some "
            "space and create the job again"
        )
        assert failed["sentences"] == {"done": 4, "total": 9}
        refused = client.get(f"/v1/audio/books/{job['id']}/audio")
        assert (
            refused.status_code == 409 and "is failed" in refused.json()["error"]["message"]
        )
    kept = settings.books_dir / job["id"] / "spoken"
    assert len(list(kept.glob("*.flac"))) == 4 and not list(kept.glob("*.partial"))


def test_a_full_disk_while_keeping_a_new_book_makes_no_job(server, client, monkeypatch):
    def full(*_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    before = client.get("/v1/audio/books").json()["data"]
    monkeypatch.setattr(books_module, "write_job", full)
    refused = client.post("/v1/audio/books", json={"input": "Hi.", **SHORT})
    assert refused.status_code == 507
    assert "no job was made" in refused.json()["error"]["message"]
    assert client.get("/v1/audio/books").json()["data"] == before
    folder = server.app.state.settings.books_dir
    assert not [entry for entry in folder.iterdir() if entry.name.startswith(".pending")]


def test_the_described_fields_are_those_the_parser_reads():
    body = FieldReads(input="Hi.")
    parse_book_request(body, RequestRules(max_ref_bytes=1000))
    document = openapi_document(ServerSettings(model="tiny"))
    content = document["paths"]["/v1/audio/books"]["post"]["requestBody"]["content"]
    described = content["application/json"]["schema"]["properties"]
    assert body.read - set(described) == {"ref_audio"}  # a clip, refused
    assert set(described) <= body.read
    form = content["multipart/form-data"]["schema"]["properties"]
    assert set(form) == set(described) - {"input", "input_format"} | {"file"}


def test_one_server_at_a_time_keeps_jobs_in_a_books_folder(speaking_dir, tmp_path_factory):
    settings = _settings(speaking_dir, tmp_path_factory)
    with RunningServer(settings) as first, _client(first) as client:
        job = client.post("/v1/audio/books", json={"input": "Mine.", **SHORT}).json()
        with RunningServer(settings) as second, _client(second) as other:
            refused = other.post("/v1/audio/books", json={"input": "Mine too.", **SHORT})
            assert refused.status_code == 503
            said = refused.json()["error"]["message"]
            assert "give each server its own --books-dir" in said
            assert str(settings.books_dir) not in said
            assert other.get("/v1/audio/books").status_code == 503
        assert _done(client, job["id"])["status"] == "done"


def test_a_book_with_sentences_without_audio_is_done(client):
    body = {"input": "Hello there.\n\n[pause:0s]\n\nBye now.", **SHORT}
    job = client.post("/v1/audio/books", json=body).json()
    done = _done(client, job["id"])
    assert done["status"] == "done" and done["sentences"] == {"done": 3, "total": 3}
    captions = client.get(done["captions_url"]).text
    assert captions.count(" --> ") == 2 and "Bye now." in captions


def test_more_chapters_than_the_format_marks_is_refused_at_once(client):
    many = "".join(f"# C{n}\n\nWords {n}.\n\n" for n in range(1000))
    body = {"input": many, "input_format": "markdown", "response_format": "opus"}
    refused = client.post("/v1/audio/books", json=body)
    assert refused.status_code == 400
    assert "1000 chapters" in refused.json()["error"]["message"]
    body["response_format"] = "m4b"
    job = client.post("/v1/audio/books", json=body).json()
    assert job["chapters"] == 1000
    client.delete(f"/v1/audio/books/{job['id']}")


def test_an_epub_that_repeats_a_document_or_has_an_empty_toc_is_read(client):
    body = "<h1>One</h1>" + "<p>Words and more words in a paragraph here.</p>" * 2000
    repeated = raw_epub(
        {"one.xhtml": page(body)}, ["one.xhtml"] * 1000, [("One", "one.xhtml")]
    )
    created = client.post("/v1/audio/books", files={"file": ("r.epub", repeated)})
    assert created.status_code == 202, created.text
    assert created.json()["sentences"]["total"] == 2001  # the heading, each paragraph
    client.delete(f"/v1/audio/books/{created.json()['id']}")
    documents = {
        "a.xhtml": page("<h1>A</h1><p>Alpha.</p>"),
        "b.xhtml": page("<p>Beta.</p>"),
    }
    untitled = raw_epub(documents, list(documents), None)
    created = client.post("/v1/audio/books", files={"file": ("e.epub", untitled)})
    assert created.status_code == 202, created.text
    assert created.json()["chapters"] == 2
    assert _done(client, created.json()["id"])["status"] == "done"


def test_downloads_while_a_job_is_deleted_are_whole_or_404(client):
    statuses = []
    for _ in range(4):
        body = {"input": "Hello there.", "title": "x\u202eexe", **SHORT}
        job = _done(client, client.post("/v1/audio/books", json=body).json()["id"])
        whole = client.get(job["audio_url"])
        assert "%E2%80%AE" not in whole.headers["content-disposition"]  # no bidi control
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            gets = [pool.submit(client.get, job["audio_url"]) for _ in range(12)]
            pool.submit(client.delete, f"/v1/audio/books/{job['id']}").result()
            for get in gets:
                answer = get.result()
                statuses.append(answer.status_code)
                assert answer.status_code in (200, 404), answer.text
                if answer.status_code == 200:
                    assert answer.content == whole.content


def test_a_failed_job_names_no_folder_of_the_server(server, client):
    body = {"input": "One here. Two here. Three here.", **LONG}
    job = client.post("/v1/audio/books", json=body).json()
    books_dir = server.app.state.settings.books_dir
    # where the audio is written before it is renamed into place: taken
    (books_dir / job["id"] / ".book.m4b.partial.m4b").mkdir()
    failed = _wait(client, job["id"], lambda job: job["status"] == "failed", timeout=300)
    assert failed["error"] and str(books_dir) not in failed["error"]
    assert str(books_dir.resolve()) not in failed["error"]
    client.delete(f"/v1/audio/books/{job['id']}")


def test_a_job_shows_its_contents_and_speaks_the_chapters_asked(client):
    fixture = Path(__file__).parents[1] / "book" / "fixtures" / "lighthouse-epub3.epub"
    created = client.post(
        "/v1/audio/books",
        files={"file": ("lighthouse.epub", fixture.read_bytes())},
        data={"chapters": "2-3", "footnotes": "chapter-end", **SHORT},
    )
    assert created.status_code == 202, created.text
    job = created.json()
    assert [c["title"] for c in job["contents"]] == ["Préface", "La Tempête", "Le Matin"]
    assert job["contents"][1]["sentences"] == 8  # with its note, read at its end
    assert "the table of contents (nav.xhtml)" in job["left_out"]
    assert (job["chapters_asked"], job["footnotes"], job["chapters"]) == (
        "2-3",
        "chapter-end",
        2,
    )
    done = _done(client, job["id"])
    captions = client.get(done["captions_url"]).text
    assert "Préface" not in captions and "Une tempête de force dix." in captions
    refused = client.post(
        "/v1/audio/books", json={"input": "One.", "chapters": "3", **SHORT}
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "chapters"


def test_a_job_speaks_its_quotes_in_the_dialogue_voice_asked(client):
    body = {"input": "« Où es-tu ? » cria-t-elle.", **SHORT}
    refused = client.post("/v1/audio/books", json={**body, "dialogue_voice": "nobody"})
    assert refused.status_code == 404 and "nobody" in refused.json()["error"]["message"]
    job = client.post("/v1/audio/books", json={**body, "dialogue_voice": "default"}).json()
    assert job["dialogue_voice"] == "default"
    assert _done(client, job["id"])["status"] == "done"


@pytest.mark.parametrize("loudness", [-41, -4.5, True, "loud"])
def test_a_loudness_outside_the_documented_range_is_refused(client, loudness):
    body = {"input": "Hi.", "loudness": loudness, **SHORT}
    refused = client.post("/v1/audio/books", json=body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "loudness"
    assert "from -40 to -5, or off" in refused.json()["error"]["message"]


def test_a_jobs_suspect_takes_are_retaken_as_asked_and_listed(client):
    """The speaking checkpoint never stops: every take runs to its budget."""
    body = {"input": "# One\n\nHello there.\n", "input_format": "markdown", **SHORT}
    job = client.post("/v1/audio/books", json={**body, "retakes": 1}).json()
    assert (job["retakes"], job["suspects"]) == (1, [])
    done = _done(client, job["id"])
    why = "ran to the frame budget without stopping"
    assert [(s["chapter"], s["title"], s["text"], s["why"]) for s in done["suspects"]] == [
        (1, "One", "One", why),
        (1, "One", "Hello there.", why),
    ]
    assert done["suspects"][0]["start_seconds"] == 0


@pytest.mark.parametrize("retakes", [11, -1, 1.5, True, "2"])
def test_a_retake_count_outside_the_documented_range_is_refused(client, retakes):
    body = {"input": "Hi.", "retakes": retakes, **SHORT}
    refused = client.post("/v1/audio/books", json=body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "retakes"
    assert "from 0 to 10" in refused.json()["error"]["message"]
