"""Read what we emit with real decoders: libsndfile (soundfile) for the
formats it reads, FFmpeg (through PyAV) for AAC."""

from __future__ import annotations

import io

import av
import numpy as np
import soundfile


def decode_with_ffmpeg(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float samples and rate, as FFmpeg's decoders read ``data``."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray().reshape(-1) for frame in container.decode(stream)]
        rate = stream.rate
    return np.concatenate(frames).astype(np.float32), rate


def decode(data: bytes, response_format: str, rate: int | None = None):
    """(samples, rate) of a response body; headerless ``pcm`` needs ``rate``."""
    if response_format == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768, rate
    if response_format == "aac":
        return decode_with_ffmpeg(data)
    samples, found = soundfile.read(io.BytesIO(data), dtype="float32")
    return samples, found


def decode_channels(
    data: bytes, response_format: str, channels: int, rate: int | None = None
):
    """(samples ``[n, channels]``, rate) of a body; headerless ``pcm`` needs ``rate``."""
    if response_format == "pcm":
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768
        return samples.reshape(-1, channels), rate
    if response_format == "aac":
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            assert stream.channels == channels
            planes = [frame.to_ndarray() for frame in container.decode(stream)]
            return np.concatenate(planes, axis=1).T.astype(np.float32), stream.rate
    samples, found = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert samples.shape[1] == channels
    return samples, found
