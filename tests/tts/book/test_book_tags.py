"""What players expect of an audiobook file beside its audio: the EPUB's
cover (or one given) in each format's own place, and the title, author,
narrator (the voice's name) and the source's details as tags; read back
with ffprobe and mutagen."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from mutagen.flac import FLAC, Picture
from mutagen.id3 import ID3
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus

import mlx_speech
from mlx_speech.audio.pictures import picture_of
from mlx_speech.book.speech import speak_book
from tests.tts.support.probe import probed

FIXTURES = Path(__file__).parent / "fixtures"
SHORT = {"max_new_tokens": 2, "seed": 5}
COVER = (FIXTURES / "cover.png").read_bytes()


@pytest.fixture(scope="module")
def lighthouse(speaking_dir, reference_clip, tmp_path_factory):
    tts = mlx_speech.load(speaking_dir, voices_dir=tmp_path_factory.mktemp("tag-voices"))
    tts.voice_store.add("grandma", reference_clip.read_bytes())
    return speak_book(tts, FIXTURES / "lighthouse-epub3.epub", "grandma", **SHORT)


def _picture(path: Path, name: str) -> bytes:
    if name == "m4b":
        return bytes(MP4(path)["covr"][0])
    if name == "mp3":
        return ID3(path).getall("APIC")[0].data
    if name == "flac":
        return FLAC(path).pictures[0].data
    block = OggOpus(path)["metadata_block_picture"][0]
    return Picture(base64.b64decode(block)).data


@pytest.mark.parametrize("name", ["m4b", "mp3", "flac", "opus"])
def test_the_epubs_cover_is_in_each_formats_place(lighthouse, tmp_path, name):
    path = lighthouse.write(tmp_path / f"lighthouse.{name}")
    assert _picture(path, name) == COVER
    streams = probed(path)["streams"]
    pictures = [s for s in streams if s.get("disposition", {}).get("attached_pic")]
    assert len(pictures) == 1 and pictures[0]["codec_name"] == "png"


@pytest.mark.parametrize(
    ("name", "held"),
    [
        ("m4b", {"composer", "date", "description", "genre"}),
        ("mp3", {"composer", "date", "description", "publisher", "language", "genre"}),
        ("flac", {"composer", "date", "publisher", "language", "genre"}),
        ("opus", {"composer", "date", "publisher", "language", "genre"}),
        ("wav", {"date", "genre"}),
    ],
)
def test_the_narrator_and_the_sources_details_are_tags(lighthouse, tmp_path, name, held):
    path = lighthouse.write(tmp_path / f"lighthouse.{name}")
    found = probed(path)
    tags = dict(found["format"].get("tags", {}))
    for stream in found["streams"]:
        if stream["codec_type"] == "audio":  # Ogg keeps its comments there
            tags.update(stream.get("tags", {}))
    tags = {key.lower(): value for key, value in tags.items()}
    expected = {
        "composer": "grandma",
        "date": "2026-01-15",
        "description": "Une courte histoire d’un phare et de sa gardienne.",
        "publisher": "Petite Presse",
        "language": "fr",
        "genre": "Audiobook",
    }
    assert {key: tags.get(key) for key in held} == {key: expected[key] for key in held}
    assert (tags["title"], tags["artist"]) == ("Le Gardien du Phare", "Marie Dupont")


def test_a_cover_is_a_jpeg_or_a_png_by_its_bytes():
    assert picture_of(COVER, "cover.jpg").media_type == "image/png"
    with pytest.raises(ValueError, match="not a JPEG or PNG"):
        picture_of(b"GIF89a....", "cover.gif")
