"""A picture in an audio file (an audiobook's cover), where players look
for it: MP4's ``covr`` atom (m4b), ID3's front-cover ``APIC`` frame (mp3),
FLAC's ``PICTURE`` block, and Ogg Opus's ``METADATA_BLOCK_PICTURE``
comment; WAV holds none. Written by mutagen into a file already encoded."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from mutagen.flac import FLAC
from mutagen.flac import Picture as FlacPicture
from mutagen.id3 import APIC, ID3, PictureType
from mutagen.mp4 import MP4, MP4Cover
from mutagen.oggopus import OggOpus

PICTURE_FORMATS = ("m4b", "mp3", "flac", "opus")
MEDIA_TYPES = ("image/jpeg", "image/png")
MAX_PICTURE_BYTES = 16 * 1024 * 1024  # FLAC's picture block holds under 16 MiB
_SIGNATURES = {b"\xff\xd8\xff": "image/jpeg", b"\x89PNG\r\n\x1a\n": "image/png"}


@dataclass(frozen=True)
class Picture:
    data: bytes
    media_type: str  # one of MEDIA_TYPES


def picture_of(data: bytes, name: str) -> Picture:
    """An image file's bytes as a ``Picture``, a JPEG or PNG by its own
    bytes (not its name); ``ValueError`` that says what to give otherwise."""
    if len(data) >= MAX_PICTURE_BYTES:
        raise ValueError(f"{name} is {len(data)} bytes: a cover is under 16 MB")
    for signature, media_type in _SIGNATURES.items():
        if data.startswith(signature):
            return Picture(data, media_type)
    raise ValueError(f"{name} is not a JPEG or PNG image: give a cover in one of these")


def embed_picture(path: Path, format_name: str, picture: Picture) -> None:
    """``picture`` as the front cover of the ``format_name`` file at ``path``."""
    front = PictureType.COVER_FRONT
    if format_name == "m4b":
        png = picture.media_type == "image/png"
        kind = MP4Cover.FORMAT_PNG if png else MP4Cover.FORMAT_JPEG
        mp4 = MP4(path)
        mp4["covr"] = [MP4Cover(picture.data, imageformat=kind)]
        mp4.save()
    elif format_name == "mp3":
        tags = ID3(path)
        tags.add(APIC(3, picture.media_type, front, "Cover", picture.data))
        tags.save(path)
    elif format_name in ("flac", "opus"):
        block = FlacPicture()
        block.type, block.mime, block.desc = front, picture.media_type, "Cover"
        block.data = picture.data
        if format_name == "flac":
            flac = FLAC(path)
            flac.add_picture(block)
            flac.save()
        else:
            opus = OggOpus(path)
            encoded = base64.b64encode(block.write()).decode("ascii")
            opus["metadata_block_picture"] = [encoded]
            opus.save()
