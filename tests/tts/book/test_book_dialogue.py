"""Dialogue in its own voice: what a sentence quotes is spoken in the
dialogue voice, the narration in the book's; each quote's audio is that
voice speaking it alone (but for the 2 ms where parts meet), on the
checkpoint that hears its voice; a voice tag in the text still wins."""

from __future__ import annotations

import numpy as np
import pytest

import mlx_speech
from mlx_speech.audio.joins import EDGE_SECONDS
from mlx_speech.book.dialogue import with_dialogue
from mlx_speech.book.speech import speak_book

SHORT = {"max_new_tokens": 4, "seed": 5}
KEPT = 2.0**-23  # a kept sentence is within half a 24-bit step
EDGE = int(EDGE_SECONDS * 48000)


@pytest.fixture(scope="module")
def voiced_tts(speaking_dir, reference_clip, tmp_path_factory):
    tts = mlx_speech.load(speaking_dir, voices_dir=tmp_path_factory.mktemp("dialogue"))
    tts.voice_store.add("grandma", reference_clip.read_bytes())
    return tts


def test_quotes_become_the_dialogue_voices_parts():
    said = with_dialogue('« Où es-tu ? » cria Hélène & "moi".', "grandma")
    assert said == (
        '<speak><voice name="grandma">« Où es-tu ? »</voice> cria Hélène &amp;'
        ' <voice name="grandma">"moi"</voice></speak>'
    )
    assert with_dialogue("No quote here.", "grandma") == "No quote here."
    assert with_dialogue("[pause:1s] « Tagged »", "grandma") == "[pause:1s] « Tagged »"


def test_a_quote_is_the_dialogue_voice_speaking_it_alone(voiced_tts, tmp_path):
    path = tmp_path / "dialogue.txt"
    path.write_text("« Où es-tu ? » cria Hélène.\n")
    book = speak_book(voiced_tts, path, dialogue_voice="grandma", **SHORT)
    (caption,) = book.captions
    assert caption.text == "« Où es-tu ? » cria Hélène."
    spoken = book.chapters[0].audio.samples
    alone = voiced_tts.speak("« Où es-tu ? »", "grandma", **SHORT).samples
    inner = slice(EDGE, len(alone) - EDGE)
    np.testing.assert_allclose(spoken[inner], alone[inner], rtol=0, atol=KEPT)
    narrator = voiced_tts.speak("« Où es-tu ? »", **SHORT).samples
    assert not np.allclose(spoken[inner], narrator[inner], atol=1e-3)  # heard


def test_a_voice_tag_wins_over_the_dialogue_voice(voiced_tts, tmp_path):
    path = tmp_path / "tagged.txt"
    path.write_text("[voice:default] « Tagged. »\n")
    tagged = speak_book(voiced_tts, path, dialogue_voice="grandma", **SHORT)
    plain = speak_book(voiced_tts, path, **SHORT)
    np.testing.assert_array_equal(
        tagged.chapters[0].audio.samples, plain.chapters[0].audio.samples
    )


def test_an_unknown_dialogue_voice_fails_before_any_work(voiced_tts, tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("« Hi. »\n")
    with pytest.raises(ValueError, match="nobody"):
        speak_book(voiced_tts, path, dialogue_voice="nobody", **SHORT)
