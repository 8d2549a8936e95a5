"""Language names and codes as clients send them, for every family."""

from __future__ import annotations

import pytest

from mlx_speech.families.languages import check_language

QWEN3 = ("auto", "chinese", "english", "german")


@pytest.mark.parametrize(
    ("sent", "used"),
    [
        (None, "auto"),
        ("Auto", "auto"),
        ("English", "english"),
        ("en", "english"),
        ("en-US", "english"),
        ("EN_gb", "english"),
        ("Chinese", "chinese"),
        ("zh", "chinese"),
        ("zh-CN", "chinese"),
        ("de", "german"),
    ],
)
def test_names_and_codes_map_to_the_checkpoints_languages(sent, used):
    assert check_language(sent, QWEN3, "Qwen3-TTS") == used


@pytest.mark.parametrize("sent", ["English", "en", "en-US", "Chinese", "zh", "ja", "Auto"])
def test_families_that_detect_the_language_take_any_known_one(sent):
    assert check_language(sent, None, "MOSS-TTS-Nano") == "auto"


@pytest.mark.parametrize(
    ("sent", "supported"), [("klingon", None), ("xx", QWEN3), ("fr", QWEN3), (3, None)]
)
def test_other_languages_are_refused_with_what_is_accepted(sent, supported):
    with pytest.raises(ValueError) as error:
        check_language(sent, supported, "A family")
    assert error.value.param == "language"
    assert "auto" in str(error.value) and "names or codes" in str(error.value)


def test_every_family_takes_vllm_omnis_language_names(speaking_tts, qwen3_tts, voxcpm2_tts):
    assert speaking_tts.prepare("Hi.", language="English").segments
    custom_voice = qwen3_tts["custom_voice"]
    assert custom_voice.prepare("Hi.", language="English").language == "english"
    assert voxcpm2_tts.prepare("Hi.", language="zh-CN").text == "Hi."
