"""Saved voices, reference inputs and the reference-code cache."""

from __future__ import annotations

import base64
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile

import mlx_speech
from mlx_speech.errors import InvalidRequest
from mlx_speech.server import ServerSettings
from mlx_speech.voices import store as voice_store
from mlx_speech.voices.store import VoiceStore
from tests.tts.support.case_insensitive import case_insensitive
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers and the command

FRAME = 960


def clip_bytes(seconds: float, rate: int = 24000, fmt: str = "WAV", seed: int = 0) -> bytes:
    import io

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    audio = 0.3 * np.sin(2 * np.pi * (180 + 40 * seed) * t) + 0.02 * rng.standard_normal(
        t.size
    )
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, rate, format=fmt)
    return buffer.getvalue()


def _wait_for_stored_codes(voice, timeout: float = 10.0) -> None:
    """Codes are written off the request's path, moments after the encode."""
    deadline = time.monotonic() + timeout
    while not list(voice.folder.glob("codes-*.npy")):
        assert time.monotonic() < deadline, f"no stored codes for {voice.name}"
        time.sleep(0.01)


@pytest.fixture
def voices_tts(speaking_dir, tmp_path):
    return mlx_speech.load(speaking_dir, voices_dir=tmp_path / "voices")


def test_a_saved_voice_is_encoded_once_then_reuses_its_stored_codes(
    voices_tts, reference_clip
):
    voice = voices_tts.voice_store.add(
        "narrator", reference_clip.read_bytes(), ref_text="hi"
    )
    before = voices_tts.stats()
    first = voices_tts.speak("Hello there.", voice="narrator", seed=3, max_new_tokens=6)
    assert voices_tts.stats()["reference_encodes"] == before["reference_encodes"] + 1
    _wait_for_stored_codes(voice)
    second = voices_tts.speak("Hello there.", voice="narrator", seed=3, max_new_tokens=6)
    after = voices_tts.stats()
    assert after["reference_encodes"] == before["reference_encodes"] + 1  # no encoder work
    assert after["saved_voice_code_hits"] == before["saved_voice_code_hits"] + 1
    direct = voices_tts.speak(
        "Hello there.", voice=str(reference_clip), seed=3, max_new_tokens=6
    )
    np.testing.assert_array_equal(first.samples, direct.samples)
    np.testing.assert_array_equal(second.samples, direct.samples)
    unvoiced = voices_tts.speak("Hello there.", seed=3, max_new_tokens=6)
    assert not np.array_equal(first.samples, unvoiced.samples)


def test_a_saved_voice_first_met_in_the_cache_still_stores_its_codes(
    voices_tts, reference_clip
):
    voices_tts.speak("Hi.", voice=reference_clip.read_bytes(), seed=1, max_new_tokens=2)
    voice = voices_tts.voice_store.add("echo", reference_clip.read_bytes())
    encodes = voices_tts.stats()["reference_encodes"]
    voices_tts.speak("Hi.", voice="echo", seed=1, max_new_tokens=2)
    assert voices_tts.stats()["reference_encodes"] == encodes
    _wait_for_stored_codes(voice)


def test_the_same_clip_in_any_form_hits_the_cache_with_identical_results(
    voices_tts, reference_clip
):
    data, rate = soundfile.read(reference_clip, dtype="float32")
    cold = voices_tts.speak(
        "Hello.", voice=reference_clip.read_bytes(), seed=2, max_new_tokens=5
    )
    stats = voices_tts.stats()
    for form in (str(reference_clip), reference_clip.read_bytes(), (data, rate)):
        warm = voices_tts.speak("Hello.", voice=form, seed=2, max_new_tokens=5)
        np.testing.assert_array_equal(warm.samples, cold.samples)
    after = voices_tts.stats()
    assert after["reference_cache_hits"] == stats["reference_cache_hits"] + 3
    assert after["reference_encodes"] == stats["reference_encodes"]


def test_store_rules(tmp_path):
    store = VoiceStore(tmp_path)
    with pytest.raises(InvalidRequest, match="voice names are"):
        store.add("../escape", clip_bytes(1))
    with pytest.raises(InvalidRequest, match="voice names are"):
        store.add(".hidden", clip_bytes(1))
    with pytest.raises(InvalidRequest, match="reserved"):
        store.add("default", clip_bytes(1))
    with pytest.raises(InvalidRequest, match="could not be decoded"):
        store.add("noise", b"not audio")
    with pytest.raises(InvalidRequest, match="clips must be 0.5-30 s"):
        store.add("short", clip_bytes(0.3))
    with pytest.raises(InvalidRequest, match="clips must be 0.5-30 s"):
        store.add("long", clip_bytes(31, rate=8000))
    store.add("ok", clip_bytes(1))
    assert [v.name for v in store.list()] == ["ok"]


def test_names_are_exact_on_a_case_insensitive_volume(tmp_path, monkeypatch):
    store = VoiceStore(tmp_path)
    store.add("grandma", clip_bytes(1))
    with case_insensitive(tmp_path, monkeypatch):
        assert (tmp_path / "GRANDMA" / "voice.json").is_file()  # as APFS opens it
        assert store.find("grandma").name == "grandma"
        assert store.find("GRANDMA") is None and store.find("Grandma") is None
        with pytest.raises(voice_store.UnknownVoice):
            store.remove("GRANDMA")
    assert [voice.name for voice in store.list()] == ["grandma"]


@pytest.mark.parametrize("can_swap", [True, False], ids=["swapped", "renamed-away"])
def test_saving_a_name_again_replaces_the_voice(tmp_path, monkeypatch, can_swap):
    if not can_swap:
        monkeypatch.setattr(voice_store, "_swap", lambda first, second: False)
    store = VoiceStore(tmp_path)
    old = store.add("ann", clip_bytes(1), ref_text="old")
    old.save_codes("codec", np.zeros((3, 2), dtype=np.int32))
    new = store.add("ann", clip_bytes(2, fmt="FLAC"), ref_text="new")
    found = store.get("ann")
    assert (found.ref_text, found.duration_s, found.clip_name) == ("new", 2.0, "clip.flac")
    assert found.version == new.version != old.version
    assert found.load_codes("codec") is None  # the old clip's codes are not the new one's
    old.save_codes("codec", np.ones((3, 2), dtype=np.int32))  # a late write for the old
    assert store.get("ann").load_codes("codec") is None
    assert [p.name for p in tmp_path.iterdir()] == ["ann"]  # nothing left behind


def test_readers_see_the_old_voice_or_the_new_during_replacements(tmp_path):
    store = VoiceStore(tmp_path)
    clips = {1.0: clip_bytes(1), 2.0: clip_bytes(2, fmt="FLAC")}
    store.add("bob", clips[1.0])
    stop = threading.Event()

    def replace_again_and_again():
        while not stop.is_set():
            for clip in clips.values():
                store.add("bob", clip)

    writer = threading.Thread(target=replace_again_and_again)
    writer.start()
    try:
        seen = set()
        for _ in range(3000):
            voice = store.find("bob")
            assert voice is not None
            seen.add(voice.duration_s)
    finally:
        stop.set()
        writer.join()
    assert seen <= set(clips)


def test_a_legacy_voice_without_a_version_is_read_and_replaced(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "clip.wav").write_bytes(clip_bytes(1))
    meta = {"clip": "clip.wav", "ref_text": None, "created": 1.0, "duration_s": 1.0}
    (folder / "voice.json").write_text(json.dumps(meta))
    np.save(folder / "codes-codec.npy", np.zeros((2, 2), dtype=np.int32))
    store = VoiceStore(tmp_path)
    assert store.get("old").load_codes("codec") is not None
    store.add("old", clip_bytes(2))
    assert store.get("old").duration_s == 2.0
    assert store.get("old").load_codes("codec") is None


def _upload(url, name, clip, ref_text=None, **kwargs):
    data = {"name": name} if ref_text is None else {"name": name, "ref_text": ref_text}
    return httpx.post(
        f"{url}/v1/audio/voices",
        data=data,
        files={"audio_sample": ("clip.wav", clip, "audio/wav")},
        timeout=60,
        **kwargs,
    )


def _speech(url, **body):
    return httpx.post(
        f"{url}/v1/audio/speech",
        json={"input": "Hello.", "response_format": "wav", **body},
        timeout=60,
    )


@pytest.fixture
def voice_server(speaking_dir, tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path / "voices",
        allowed_local_media_path=media,
        max_ref_bytes=2 * 1024 * 1024,
    )
    with RunningServer(settings) as running:
        running.media = media
        running.settings = settings
        yield running


def test_the_server_and_its_model_share_the_voices_dir(voice_server):
    app = voice_server.app
    assert app.state.slot.tts.voice_store is app.state.store
    assert app.state.store.directory == voice_server.settings.voices_dir


def test_voice_lifecycle_over_http(voice_server):
    url = voice_server.url
    first = _upload(url, "alice", clip_bytes(1), ref_text="An earlier take.")
    assert first.status_code == 201, first.text
    created = _upload(url, "alice", clip_bytes(1.5), ref_text="Hello world.")  # replaces
    assert created.status_code == 201, created.text
    voice = created.json()
    assert voice["id"] == voice["name"] == "alice" and voice["kind"] == "saved"
    assert voice["ref_text"] == "Hello world."
    assert abs(voice["duration_s"] - 1.5) < 0.01
    assert voice["success"] is True and voice["voice"]["name"] == "alice"  # vLLM-Omni
    listing = httpx.get(f"{url}/v1/audio/voices").json()
    assert [(v["id"], v["kind"]) for v in listing["voices"]] == [
        ("default", "default"),
        ("alice", "saved"),
    ]
    uploaded = listing["uploaded_voices"]
    assert [v["name"] for v in uploaded] == ["alice"]
    assert uploaded[0]["mime_type"] == "audio/x-wav" and uploaded[0]["file_size"] > 0
    assert uploaded[0]["ref_text"] == "Hello world."
    for voice in ("alice", {"id": "alice"}):
        response = _speech(
            url,
            voice=voice,
            seed=4,
            max_new_tokens=4,
            response_format="pcm",
            sample_rate=48000,
        )
        assert response.status_code == 200 and len(response.content) == 4 * FRAME * 2
    removed = httpx.delete(f"{url}/v1/audio/voices/alice")
    assert removed.status_code == 200 and removed.json()["success"] is True
    assert httpx.delete(f"{url}/v1/audio/voices/alice").status_code == 404
    assert _speech(url, voice="alice").status_code == 404


@pytest.mark.parametrize(
    "name, clip, status, param",
    [
        ("../x", clip_bytes(1), 400, "name"),
        ("a" * 65, clip_bytes(1), 400, "name"),
        ("default", clip_bytes(1), 400, "name"),
        ("short", clip_bytes(0.2), 400, "audio_sample"),
        ("junk", b"not audio at all", 400, "audio_sample"),
        ("huge", b"\0" * (3 * 1024 * 1024), 413, "audio_sample"),
    ],
)
def test_bad_uploads(voice_server, name, clip, status, param):
    response = _upload(voice_server.url, name, clip)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param
    assert httpx.get(f"{voice_server.url}/v1/audio/voices").json()["uploaded_voices"] == []


def test_upload_must_be_multipart(voice_server):
    response = httpx.post(f"{voice_server.url}/v1/audio/voices", json={"name": "x"})
    assert response.status_code == 415


def test_second_request_for_a_voice_does_no_encoding(voice_server):
    url = voice_server.url
    assert _upload(url, "bob", clip_bytes(2, seed=1)).status_code == 201

    def encodes():
        for line in httpx.get(f"{url}/metrics").text.splitlines():
            if line.startswith("mlx_speech_reference_encodes_total "):
                return int(line.split()[1])

    first = _speech(url, voice="bob", seed=9, max_new_tokens=5, response_format="pcm")
    after_first = encodes()
    second = _speech(url, voice="bob", seed=9, max_new_tokens=5, response_format="pcm")
    assert encodes() == after_first
    assert first.content == second.content


def test_ref_audio_from_an_allowed_file(voice_server):
    clip = voice_server.media / "clip.wav"
    clip.write_bytes(clip_bytes(1))
    response = _speech(voice_server.url, ref_audio=clip.as_uri(), seed=1, max_new_tokens=3)
    assert response.status_code == 200, response.text


def test_ref_audio_as_a_path_or_a_list_as_vllm_omni_clients_send_it(voice_server):
    clip = voice_server.media / "clip.wav"
    clip.write_bytes(clip_bytes(1))
    body = {"seed": 1, "max_new_tokens": 3}
    by_uri = _speech(voice_server.url, ref_audio=clip.as_uri(), **body)
    assert by_uri.status_code == 200, by_uri.text
    for reference in (
        str(clip),
        [str(clip), "ignored: only the first clip is used"],
        [base64.b64encode(clip.read_bytes()).decode()],
    ):
        response = _speech(voice_server.url, ref_audio=reference, **body)
        assert response.status_code == 200, response.text
        assert response.content == by_uri.content
    empty = _speech(voice_server.url, ref_audio=[])
    assert empty.status_code == 400 and "empty list" in empty.json()["error"]["message"]


def test_base64_that_starts_like_a_path_is_still_base64(voice_server):
    encoded = base64.b64encode(clip_bytes(1, fmt="MP3")).decode()
    assert encoded.startswith("/")  # MP3 frames start with 0xFF
    response = _speech(voice_server.url, ref_audio=encoded, seed=1, max_new_tokens=3)
    assert response.status_code == 200, response.text


def test_a_reference_in_no_accepted_form_is_told_the_accepted_ones(voice_server):
    response = _speech(voice_server.url, ref_audio="%%% not a clip")
    message = response.json()["error"]["message"]
    assert response.status_code == 400
    assert "base64, a data: URI, or a file:// URI or absolute path" in message


def test_local_files_are_refused_unless_a_directory_is_allowed(speaking_dir, tmp_path):
    clip = tmp_path / "clip.wav"
    clip.write_bytes(clip_bytes(1))
    settings = ServerSettings(model=str(speaking_dir), voices_dir=tmp_path / "voices")
    with RunningServer(settings) as running:
        for reference in (str(clip), clip.as_uri()):
            response = _speech(running.url, ref_audio=reference)
            assert response.status_code == 400
            assert "--allowed-local-media-path" in response.json()["error"]["message"]


def test_file_references_are_confined_to_the_allowed_directory(voice_server, tmp_path):
    outside = tmp_path / "outside.wav"
    outside.write_bytes(clip_bytes(1))
    link = voice_server.media / "link.wav"
    link.symlink_to(outside)
    for uri in (
        f"file://{voice_server.media}/../outside.wav",  # traversal
        link.as_uri(),  # symlink escaping the directory
        outside.as_uri(),  # absolute path elsewhere
        str(outside),
        f"{voice_server.media}/../outside.wav",
        "file:///etc/passwd",
    ):
        response = _speech(voice_server.url, ref_audio=uri)
        assert response.status_code == 400, uri
        assert "outside the allowed media directory" in response.json()["error"]["message"]
    missing = _speech(
        voice_server.url, ref_audio=(voice_server.media / "nope.wav").as_uri()
    )
    assert missing.status_code == 400


def test_oversize_file_reference_is_413(voice_server):
    big = voice_server.media / "big.wav"
    big.write_bytes(clip_bytes(25, rate=48000))
    assert _speech(voice_server.url, ref_audio=big.as_uri()).status_code == 413


def test_voices_survive_a_restart(speaking_dir, tmp_path):
    settings = ServerSettings(model=str(speaking_dir), voices_dir=tmp_path / "voices")
    with RunningServer(settings) as running:
        assert _upload(running.url, "carol", clip_bytes(1), ref_text="x").status_code == 201
        before = _speech(running.url, voice="carol", seed=2, max_new_tokens=3).content
    with RunningServer(settings) as running:
        voices = httpx.get(f"{running.url}/v1/audio/voices").json()["voices"]
        assert [v["name"] for v in voices] == ["default", "carol"]
        assert (
            _speech(running.url, voice="carol", seed=2, max_new_tokens=3).content == before
        )


def test_openai_sdk_reaches_a_saved_voice(voice_server, tmp_path):
    openai = pytest.importorskip("openai")
    assert _upload(voice_server.url, "dave", clip_bytes(1, seed=2)).status_code == 201
    client = openai.OpenAI(base_url=f"{voice_server.url}/v1", api_key="local")
    target = tmp_path / "dave.wav"
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="dave",
        input="Hi!",
        response_format="wav",
        extra_body={"max_new_tokens": 4, "seed": 1},
    ) as response:
        response.stream_to_file(target)
    assert len(soundfile.read(target)[0]) == 4 * FRAME


WRITER = """
import sys, io, numpy as np, soundfile
from mlx_speech import VoiceStore
store = VoiceStore(sys.argv[1])
t = np.arange(48000 * 25) / 48000
buffer = io.BytesIO()
soundfile.write(buffer, np.stack([np.sin(t), np.cos(t)], axis=1), 48000, format="WAV")
clip = buffer.getvalue()
buffer = io.BytesIO()
soundfile.write(buffer, np.sin(t[:48000]), 48000, format="FLAC")
other = buffer.getvalue()
print("ready", flush=True)
index = 0
while True:
    store.add(f"voice{index}", clip)
    store.add("replaced", clip if index % 2 else other)
    index += 1
"""


def test_killed_writer_leaves_the_store_consistent(tmp_path):
    directory = tmp_path / "voices"
    store = VoiceStore(directory)
    keeper = store.add("keeper", clip_bytes(1), ref_text="keep me")
    keeper_clip = keeper.clip.read_bytes()
    for delay in (0.05, 0.13, 0.31, 0.57):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(delay)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        for voice in store.list():
            meta = json.loads((voice.folder / "voice.json").read_text())
            data, rate = soundfile.read(voice.clip)
            assert abs(len(data) / rate - meta["duration_s"]) < 1e-6
        assert store.get("keeper").clip.read_bytes() == keeper_clip
        if store.find("voice1") is not None:
            assert store.find("replaced") is not None  # replaced, never lost
    store.sweep()
    assert not [p for p in directory.iterdir() if p.name.startswith(".")]


def test_cli_manages_the_same_directory(tmp_path, speaking_dir):
    from tests.tts.support.cli import run

    directory = str(tmp_path / "voices")
    clip = tmp_path / "clip.flac"
    clip.write_bytes(clip_bytes(1, fmt="FLAC"))
    added = run(
        "voices", "add", "erin", str(clip), "--ref-text", "Hi.", "--voices-dir", directory
    )
    assert added.returncode == 0, added.stderr
    listed = run("voices", "list", "--voices-dir", directory)
    assert listed.stdout.startswith("erin\t1.00 s")
    out = tmp_path / "erin.wav"
    spoken = run(
        "speak",
        "Hello.",
        "--voice",
        "erin",
        "--voices-dir",
        directory,
        "--model",
        str(speaking_dir),
        "-o",
        str(out),
        "--max-new-tokens",
        "3",
    )
    assert spoken.returncode == 0, spoken.stderr
    assert run("voices", "rm", "erin", "--voices-dir", directory).returncode == 0
    empty = run("voices", "list", "--voices-dir", directory).stdout
    assert empty.startswith(f"no saved voices in {directory} (save one with: ")
    again = run("voices", "rm", "erin", "--voices-dir", directory)
    assert again.returncode == 1 and "no saved voice named 'erin'" in again.stderr


def test_saved_voice_base64_and_upload_give_the_same_audio(voice_server):
    clip = clip_bytes(1.2, seed=3)
    assert _upload(voice_server.url, "frank", clip).status_code == 201
    by_name = _speech(voice_server.url, voice="frank", seed=8, max_new_tokens=4).content
    inline = _speech(
        voice_server.url,
        ref_audio=base64.b64encode(clip).decode(),
        seed=8,
        max_new_tokens=4,
    ).content
    assert by_name == inline


def test_the_prompt_prefix_of_a_voice_is_reused_with_identical_results(
    voices_tts, reference_clip
):
    clip = reference_clip.read_bytes()
    first = voices_tts.speak("One sentence here.", voice=clip, seed=6, max_new_tokens=5)
    hits = voices_tts.stats()["prompt_prefix_cache_hits"]
    second = voices_tts.speak("One sentence here.", voice=clip, seed=6, max_new_tokens=5)
    assert voices_tts.stats()["prompt_prefix_cache_hits"] == hits + 1
    np.testing.assert_array_equal(first.samples, second.samples)


def test_a_voice_deleted_while_in_use_does_not_fail_the_request(voices_tts, reference_clip):
    voice = voices_tts.voice_store.add("fleeting", reference_clip.read_bytes())
    stream = voices_tts.stream("Hello.", voice="fleeting", seed=3, max_new_tokens=3)
    voices_tts.voice_store.remove("fleeting")  # before the worker encodes and stores codes
    audio = [chunk.samples for chunk in stream]
    assert sum(len(samples) for samples in audio) == 3 * FRAME
    assert not voice.folder.exists()


def test_voices_push_uploads_to_another_server(speaking_dir, tmp_path):
    from tests.tts.support.cli import run

    local = tmp_path / "local"
    store = VoiceStore(local)
    store.add("gina", clip_bytes(1, seed=3), ref_text="Gina speaking.")
    store.add("hal", clip_bytes(1.5, fmt="FLAC"))
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path / "remote", api_key="secret"
    )
    with RunningServer(settings) as remote:
        refused = run("voices", "push", remote.url, "--voices-dir", str(local))
        assert refused.returncode == 1
        assert "gina: failed, HTTP 401" in refused.stdout
        assert refused.stderr.strip() == "mlx-speech: error: 2 of 2 voices were not pushed"
        unknown = run(
            "voices",
            "push",
            remote.url,
            "ivy",
            "--voices-dir",
            str(local),
            "--api-key",
            "x",
        )
        assert "no saved voice named 'ivy'" in unknown.stderr
        pushed = run(
            "voices",
            "push",
            f"{remote.url}/v1",
            "--api-key",
            "secret",
            "--voices-dir",
            str(local),
        )
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.count("pushed to") == 2
        listing = httpx.get(
            f"{remote.url}/v1/audio/voices", headers={"authorization": "Bearer secret"}
        ).json()
    saved = {voice["name"]: voice for voice in listing["uploaded_voices"]}
    assert saved["gina"]["ref_text"] == "Gina speaking." and "ref_text" not in saved["hal"]
    copied = VoiceStore(tmp_path / "remote")
    for name in ("gina", "hal"):
        assert copied.get(name).clip.read_bytes() == store.get(name).clip.read_bytes()


def test_a_full_disk_on_upload_is_507_and_the_old_voice_stays(voice_server, monkeypatch):
    """The disk cannot be filled here: the store's writes fail as a full
    one fails them (ENOSPC). It answered 500 with a traceback."""
    assert (
        _upload(voice_server.url, "dora", clip_bytes(1), ref_text="old").status_code == 201
    )

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(voice_store, "_write_file", full)
    response = _upload(voice_server.url, "dora", clip_bytes(2), ref_text="new")
    assert response.status_code == 507
    assert "no space left" in response.json()["error"]["message"]
    monkeypatch.undo()
    listed = httpx.get(f"{voice_server.url}/v1/audio/voices").json()["voices"]
    dora = next(voice for voice in listed if voice["name"] == "dora")
    assert dora["ref_text"] == "old" and round(dora["duration_s"]) == 1
