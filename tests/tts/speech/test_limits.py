"""The one length limit, passed every way a text can pass it, says the
limit one way: as written, as read out (normalization, the lexicon), over
a text's parts (SSML) and over a text stream."""

from __future__ import annotations

import pytest

from mlx_speech.request import TextTooLong
from mlx_speech.text.lexicon import Lexicon

LIMIT = 40


@pytest.fixture
def limited_tts(speaking_tts):
    speaking_tts.max_text_chars = LIMIT
    yield speaking_tts
    speaking_tts.max_text_chars = None
    speaking_tts.lexicon = None


def _refusal(call) -> str:
    with pytest.raises(TextTooLong) as refused:
        call()
    assert refused.value.param == "text"
    return str(refused.value)


def test_each_way_past_the_limit_says_it_one_way(limited_tts):
    said = {
        "as written": _refusal(lambda: limited_tts.prepare("a" * 45)),
        "read out": _refusal(lambda: limited_tts.prepare("It is 1234567 now.")),
        "in parts": _refusal(
            # 31 characters; each part within the limit read out, not both
            lambda: limited_tts.stream("<speak>123 <break/> 456</speak>")
        ),
        "streamed": _refusal(
            lambda: list(limited_tts.stream_text(["Twelve chars. " * 4], max_new_tokens=1))
        ),
    }
    assert (
        said["as written"] == "the text is 45 characters; the limit is 40: send it in parts"
    )
    assert said["read out"] == (
        "the text is 18 characters and more than 40 as it is read out; the limit is "
        "40: send it in parts, or with normalization off"
    )
    assert said["in parts"] == (
        "the text is more than 40 characters as it is read out; the limit is 40: "
        "send it in parts"
    )
    assert said["streamed"] == (
        "this text passed 40 characters as it is read out; the limit is 40: the rest "
        "is not spoken"
    )


def test_the_lexicon_counts_as_reading_out(limited_tts):
    limited_tts.lexicon = Lexicon([("tts", "text to speech, spoken aloud by a machine")])
    said = _refusal(lambda: limited_tts.prepare("tts", normalize=False))
    assert said == (
        "the text is 3 characters and more than 40 as it is read out; the limit is 40: "
        "send it in parts"
    )
