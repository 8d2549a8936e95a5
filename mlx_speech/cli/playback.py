"""Playing audio through the sound card as it arrives (``sounddevice``, an
optional dependency: ``pip install 'mlx-speech-server[play]'``)."""

from __future__ import annotations

import numpy as np


class PlaybackUnavailable(RuntimeError):
    """No sound library or no output device: a message for the user."""


class Player:
    """``write`` blocks while the device plays, so a stream read through it
    is read at the pace it is heard."""

    def __init__(self, sample_rate: int, channels: int = 1):
        self._channels = channels
        try:
            import sounddevice
        except ImportError:
            raise PlaybackUnavailable(
                "playing needs the sounddevice package: "
                "pip install 'mlx-speech-server[play]'"
            ) from None
        except OSError as error:  # the package is there, PortAudio is not
            raise PlaybackUnavailable(
                f"cannot play: {error} (install PortAudio, e.g. "
                "`brew install portaudio` or `apt-get install libportaudio2`)"
            ) from None
        try:
            self._stream = sounddevice.OutputStream(
                samplerate=sample_rate, channels=channels, dtype="float32"
            )
            self._stream.start()
        except sounddevice.PortAudioError as error:
            raise PlaybackUnavailable(f"cannot play: {error} (no output device?)") from None

    def write(self, samples: np.ndarray) -> None:
        frames = np.ascontiguousarray(samples, dtype=np.float32)
        self._stream.write(frames.reshape(-1, self._channels))

    def close(self) -> None:
        self._stream.stop()  # waits for what was written to be heard
        self._stream.close()

    def __enter__(self) -> Player:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
