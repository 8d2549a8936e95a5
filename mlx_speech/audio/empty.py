"""Files with no samples that decoders still read, for a model that stops
before its first audio. libsndfile writes nothing for an empty FLAC, and
only the header pages of an empty Ogg Opus stream (no end-of-stream page),
so both are completed here; WAV's header is already whole, and PCM has no
header, so its empty file is empty. MP3 and AAC cannot hold zero samples
(a decoder finds them by their frames, and 0 bytes is no file to FFmpeg), so
theirs is the least silence FFmpeg recognizes unnamed: two MP3 frames, one
ADTS frame."""

from __future__ import annotations

import struct

from .aac import silent_adts_frame

_FLAC_BLOCK = 4096  # STREAMINFO's block sizes; any valid size, as no block follows
_OGG_END_OF_STREAM = 0x04
# An Opus packet that is a TOC byte alone: CELT, fullband, 20 ms, one frame
# of zero bytes, which decoders read as silence (RFC 6716, 3.1).
_OPUS_SILENT_TOC = 0xF8
_OPUS_STEREO_BIT = 0x04


# MPEG audio: (version bits, sample rate index, bytes per kbit/s) per rate;
# 32 kbit/s is in every version's table (index 1 in MPEG-1's, 4 in the others').
_MPEG_FRAMES = {
    48000: (0b11, 1, 144),
    44100: (0b11, 0, 144),
    32000: (0b11, 2, 144),
    24000: (0b10, 1, 72),
    22050: (0b10, 0, 72),
    16000: (0b10, 2, 72),
    12000: (0b00, 1, 72),  # MPEG-2.5
    11025: (0b00, 0, 72),
    8000: (0b00, 2, 72),
}
_MP3_KBITS = 32
# FFmpeg's MP3 probe needs two frames in a row to know an unnamed file.
_MP3_EMPTY_FRAMES = 2


def completed_empty(name: str, written: bytes, sample_rate: int, channels: int) -> bytes:
    """``written`` (what the encoder wrote for no samples) as a whole file."""
    if name == "flac":
        return empty_flac(sample_rate, channels)
    if name == "opus":
        return written + opus_end_page(written, channels)
    if name == "mp3":
        return silent_mp3(sample_rate, channels)
    if name == "aac":
        return silent_adts_frame(sample_rate, channels)
    return written


def silent_mp3(sample_rate: int, channels: int) -> bytes:
    """Two Layer III frames of silence: 1152 samples each at 32 kHz and
    above, 576 below. Their side information is all zeros (no reservoir, no
    coded values), which every decoder reads as silence."""
    version, rate_index, bytes_per_kbit = _MPEG_FRAMES[sample_rate]
    bitrate_index = 1 if version == 0b11 else 4
    mono = 0b11 if channels == 1 else 0b00
    header = bytes(
        [
            0xFF,
            0xE0 | version << 3 | 0b01 << 1 | 1,  # Layer III, no CRC
            bitrate_index << 4 | rate_index << 2,  # no padding
            mono << 6,
        ]
    )
    size = bytes_per_kbit * _MP3_KBITS * 1000 // sample_rate
    return (header + bytes(size - len(header))) * _MP3_EMPTY_FRAMES


def empty_flac(sample_rate: int, channels: int) -> bytes:
    """``fLaC`` and a STREAMINFO of 16-bit samples, counting none."""
    # rate: 20 bits, channels − 1: 3, bits per sample − 1: 5, total samples: 36
    packed = (sample_rate << 44) | ((channels - 1) << 41) | (15 << 36)
    info = (
        struct.pack(">HH", _FLAC_BLOCK, _FLAC_BLOCK)
        + bytes(6)  # smallest and largest frame sizes: unknown
        + packed.to_bytes(8, "big")
        + bytes(16)  # no MD5 signature
    )
    last_block_streaminfo = 0x80
    return b"fLaC" + bytes([last_block_streaminfo]) + len(info).to_bytes(3, "big") + info


def opus_end_page(headers: bytes, channels: int) -> bytes:
    """The last Ogg page of an Opus stream with the pages ``headers`` and no
    audio: one silent packet whose granule position is the pre-skip, so
    decoders drop all of it (RFC 7845, 4.4) and read zero samples."""
    pages = list(_ogg_pages(headers))
    serial, last_sequence = pages[0][1], pages[-1][2]
    opus_head = pages[0][3]
    pre_skip = struct.unpack_from("<H", opus_head, 10)[0]
    packet = bytes([_OPUS_SILENT_TOC | (_OPUS_STEREO_BIT if channels > 1 else 0)])
    return _ogg_page(_OGG_END_OF_STREAM, pre_skip, serial, last_sequence + 1, packet)


def _ogg_pages(data: bytes):
    """(header type, serial, sequence, body) of each page in ``data``."""
    offset = 0
    while offset < len(data):
        _, kind, _, serial, sequence, _, segments = struct.unpack_from(
            "<BBqIIIB", data, offset + 4
        )
        lacing = data[offset + 27 : offset + 27 + segments]
        start = offset + 27 + segments
        offset = start + sum(lacing)
        yield kind, serial, sequence, data[start:offset]


def _ogg_page(kind: int, granule: int, serial: int, sequence: int, packet: bytes) -> bytes:
    """One page holding one packet shorter than 255 bytes."""
    header = b"OggS" + struct.pack("<BBqIII", 0, kind, granule, serial, sequence, 0)
    page = header + bytes([1, len(packet)]) + packet
    return page[:22] + struct.pack("<I", _ogg_crc(page)) + page[26:]


def _ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32: polynomial 0x04C11DB7, unreflected, no final xor."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc
