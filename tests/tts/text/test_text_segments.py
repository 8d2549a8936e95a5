"""Cutting streamed text into segments: the same segments whatever the deltas."""

from __future__ import annotations

import pytest

from mlx_speech.text.segments import MAX_WHOLE_CHARS, TextSegmenter


def segments(text: str, split: str = "sentence", delta: int = 1, **options) -> list[str]:
    segmenter = TextSegmenter(split, **options)
    found = []
    for start in range(0, len(text), delta):
        found += segmenter.feed(text[start : start + delta])
    return found + segmenter.finish()


SENTENCES = [
    ("Hello there. How are you?", ["Hello there.", "How are you?"]),
    ("It costs 3.5 dollars. Cheap!", ["It costs 3.5 dollars.", "Cheap!"]),
    ("Dr. Smith is in. Mr. Jones too.", ["Dr. Smith is in.", "Mr. Jones too."]),
    ("Use tools, e.g. a hammer. Done.", ["Use tools, e.g. a hammer.", "Done."]),
    ("Fruit, i.e. apples, etc. and more.", ["Fruit, i.e. apples, etc. and more."]),
    ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),
    ("Wait... no. Well... Fine.", ["Wait... no.", "Well...", "Fine."]),
    ("Really?! Yes.", ["Really?!", "Yes."]),
    ('He said "Stop." Then left.', ['He said "Stop."', "Then left."]),
    ("(Quietly.) Loudly!", ["(Quietly.)", "Loudly!"]),
    ("Visit example.com/?q=1 now. Ok.", ["Visit example.com/?q=1 now.", "Ok."]),
    ("Version 2.0.1 is out. Great.", ["Version 2.0.1 is out.", "Great."]),
    ("你好。今天天气很好！我们走吧？", ["你好。", "今天天气很好！", "我们走吧？"]),
    ("Hello 世界。Next one.", ["Hello 世界。", "Next one."]),
    ("No ending at all", ["No ending at all"]),
    ("  Spaces around.   ", ["Spaces around."]),
    ("One.\n\nTwo.", ["One.", "Two."]),
    # quotation marks and what ends inside them stay with their sentence
    ("« Où es-tu ? » cria Hélène. Rien.", ["« Où es-tu ? » cria Hélène.", "Rien."]),
    ("« Je viens. » Il partit.", ["« Je viens. »", "Il partit."]),
    ("„Wo bist du?“, rief sie. Dann.", ["„Wo bist du?“, rief sie.", "Dann."]),
    ("„Gdzie jesteś?” zapytała. Tak.", ["„Gdzie jesteś?” zapytała.", "Tak."]),
    ("Dije ¿dónde estás? y nada. Fin.", ["Dije ¿dónde estás? y nada.", "Fin."]),
    ("¿Vienes? Sí.", ["¿Vienes?", "Sí."]),
    ("「どこ？」と叫んだ。去った。", ["「どこ？」と叫んだ。", "去った。"]),
    ("“Stop! Now!” he said. She ran.", ["“Stop! Now!” he said.", "She ran."]),
]


@pytest.mark.parametrize("text, expected", SENTENCES)
@pytest.mark.parametrize("delta", [1, 3, 1000], ids=["chars", "triples", "whole"])
def test_sentences(text, expected, delta):
    assert segments(text, delta=delta) == expected


def test_clauses_also_end_at_commas_and_cjk_pauses():
    assert segments("First, second; third: fourth. 3,000 stays.", "clause") == [
        "First,",
        "second;",
        "third:",
        "fourth.",
        "3,000 stays.",
    ]
    assert segments("我们，你们、他们。", "clause") == ["我们，", "你们、", "他们。"]


def test_none_waits_for_the_end():
    segmenter = TextSegmenter("none")
    assert segmenter.feed("One. Two. ") == []
    assert segmenter.finish() == ["One. Two."]


def test_a_segment_is_handed_out_once_its_end_is_certain():
    segmenter = TextSegmenter()
    assert segmenter.feed("Dr.") == []
    assert segmenter.feed(" Smith arrived.") == []  # "arrived.5" is no end
    assert segmenter.feed(" ") == ["Dr. Smith arrived."]  # the space decides
    assert segmenter.feed("Wait... ") == []  # "wait... no" would go on
    assert segmenter.feed("He") == ["Wait..."]
    assert segmenter.feed("llo。") == ["Hello。"]  # CJK text puts no space after it
    assert segmenter.feed("x") == []
    assert segmenter.finish() == ["x"]


def test_a_long_run_without_punctuation_is_cut_at_a_space():
    words = " ".join(f"word{i}" for i in range(100))
    found = segments(words, max_chars=50)
    assert all(len(segment) <= 50 for segment in found)
    assert " ".join(found) == words
    cjk = "字" * 120
    assert segments(cjk, max_chars=50) == ["字" * 50, "字" * 50, "字" * 20]


def test_an_unknown_split_is_refused():
    with pytest.raises(ValueError, match="split must be one of sentence, clause, none"):
        TextSegmenter("paragraph")


def test_split_none_holds_a_bounded_text():
    segmenter = TextSegmenter("none")
    assert segmenter.feed("a" * MAX_WHOLE_CHARS) == []
    with pytest.raises(ValueError, match="passed 12800 characters before its end"):
        segmenter.feed("a")


def test_a_commit_cuts_what_is_pending_and_the_split_goes_on():
    segmenter = TextSegmenter("sentence")
    assert segmenter.feed("One. Two") == ["One."]
    assert segmenter.commit() == ["Two"]
    assert segmenter.feed("Dr.") == []  # an abbreviation? what follows decides
    assert segmenter.commit() == ["Dr."]
    # a document spoken whole until the commit; the sentence split after it
    assert segmenter.feed("<speak>A. B.</speak>") == []
    assert segmenter.commit() == ["<speak>A. B.</speak>"]
    assert segmenter.feed("Three. Four. ") == ["Three.", "Four."]
    assert segmenter.commit() == []
