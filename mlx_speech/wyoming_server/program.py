"""What ``describe`` answers: one TTS program, the loaded model, with every
voice a client may name (built at each ``describe``, so voices saved or
removed meanwhile are listed as they are)."""

from __future__ import annotations

from importlib.metadata import version

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

from ..tts import TTS
from ..voices.resolve import DEFAULT_VOICE
from ..voices.store import SavedVoice

PROGRAM = "mlx-speech"
_ATTRIBUTION = Attribution(
    name="mlx-speech", url="https://pypi.org/project/mlx-speech-server/"
)


def program_info(tts: TTS, model: str, saved: list[SavedVoice]) -> Info:
    languages = list(tts.languages)

    def voice(name: str, description: str) -> TtsVoice:
        return TtsVoice(
            name=name,
            attribution=_ATTRIBUTION,
            installed=True,
            description=description,
            version=None,
            languages=languages,
        )

    voices = [
        voice(DEFAULT_VOICE, f"{model}'s own voice"),
        *(voice(name, f"{model}'s preset voice {name}") for name in tts.voices),
        *(voice(one.name, f"saved voice ({one.duration_s:.1f} s clip)") for one in saved),
    ]
    program = TtsProgram(
        name=PROGRAM,
        attribution=_ATTRIBUTION,
        installed=True,
        description=f"{model} through mlx-speech",
        version=version("mlx-speech-server"),
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program])
