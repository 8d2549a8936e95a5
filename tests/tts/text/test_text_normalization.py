"""Text normalization: the robustness pass and the semantic pass, on a table
of what people write and what the model should be given."""

from __future__ import annotations

import threading

import pytest

from mlx_speech.text.normalization import TextNormalizer, clean_text, script_language

# (written, after the robustness pass)
ROBUST = [
    ("This   is   a   test.", "This is a test."),
    ("hello world", "hello world."),
    ("这 是\u3000一 段  文本。", "这是一段文本。"),
    ("这是Anthropic的npm包", "这是 Anthropic 的 npm 包。"),
    ("今天update到v2.3.1了", "今天 update 到 v2.3.1 了。"),
    ("处理app.js.map文件", "处理 app.js.map 文件。"),
    ("Visit https://example.com/a-b today", "Visit https://example.com/a-b today."),
    ("See https://example.com/a.", "See https://example.com/a."),
    ("Mail ops+tts@example.ai", "Mail ops+tts@example.ai."),
    ("Don't commit .env or .gitignore!!!", "Don't commit .env or .gitignore!"),
    ("Check bundle.min.js and package.json", "Check bundle.min.js and package.json."),
    ("3.0.0-rc.1 is not ready.", "3.0.0-rc.1 is not ready."),
    ("Wait... what?!?!", "Wait. what?!"),
    ("真的假的？？？！！！", "真的假的？！"),
    ("太离谱了……", "太离谱了。"),
    ("[S1]你好。[S2]收到。", '"S1"你好。"S2"收到。'),
    ("Say it {whisper} now", 'Say it "whisper" now.'),
    ("【公告】今天 20:00 维护——预计 30 分钟。", '"公告"今天20:00维护。预计30分钟。'),
    ("我喜欢《哈姆雷特》这本书。", "我喜欢《哈姆雷特》这本书。"),
    ("《新品发布》", "新品发布。"),
    ("It was great -- really great", "It was great. really great."),
    ("A word—then another", "A word, then another."),
    ("first line\nsecond line", "first line.\nsecond line."),
    ("windows\r\nline", "windows.\nline."),
    ("第一行\n第二行", "第一行。\n第二行。"),
    ("第一行\n\n\n第二行。", "第一行。\n第二行。"),
    ("# Heading\n- item one\n- item two", "Heading.\nitem one.\nitem two."),
    ("1. install\n2. run", "install.\nrun."),
    ("> quoted line", "quoted line."),
    (
        "See [the notes](https://example.com/notes)",
        "See the notes https://example.com/notes.",
    ),
    ("zero\u200bwidth\u0007 bell", "zerowidth bell."),
    ("Hello , world !", "Hello, world!"),
    ("Ask @fried_rice about #release-notes", "Ask @fried_rice about #release-notes."),
    ('He said "hi"', 'He said "hi".'),
    ("她说“你好”", "她说“你好”。"),
    ("Well,, okay", "Well, okay."),
    ("I paid $3.50 on 3/4.", "I paid $3.50 on 3/4."),
    ("2026 年 3 月 31 日", "2026年3月31日。"),
    ("( spaced )", "(spaced)."),
    ("Already fine.", "Already fine."),
    ("Is it?", "Is it?"),
    ("...", "."),
    ("wait...\nthen go", "wait.\nthen go."),
    ("Line one\nLine two -- more", "Line one.\nLine two. more."),
]

# (written, language, what the model is given)
SEMANTIC = [
    # English: numbers, ordinals, decimals, fractions, negatives
    ("I have 3 apples.", "en", "I have three apples."),
    ("He came 1st and she was 22nd.", "en", "He came first and she was twenty second."),
    ("Pi is 3.14.", "en", "Pi is three point one four."),
    ("Take 3/4 cup.", "en", "Take three quarters cup."),
    ("Add 1/2 and 2/3.", "en", "Add one half and two thirds."),
    ("It was -5 degrees.", "en", "It was negative five degrees."),
    ("1,234 people came.", "en", "one thousand two hundred and thirty four people came."),
    ("1,000,000 people", "en", "one million people."),
    ("Room 101.", "en", "Room one hundred and one."),
    ("0.5 of it", "en", "zero point five of it."),
    # money
    ("It costs $3.50 today.", "en", "It costs three dollars and fifty cents today."),
    ("It costs $5.", "en", "It costs five dollars."),
    ("Only $1.", "en", "Only one dollar."),
    ("Just $0.99.", "en", "Just ninety nine cents."),
    (
        "$1,234.56 was paid.",
        "en",
        "one thousand two hundred and thirty four dollars and fifty six cents was paid.",
    ),
    ("A $1.2 billion deal.", "en", "A one point two billion dollars deal."),
    ("Pay €20 or £7.25.", "en", "Pay twenty euros or seven pounds and twenty five pence."),
    ("It is ¥100.", "en", "It is one hundred yen."),
    ("It is ₹5.", "en", "It is five rupees."),
    ("A loss of -$3.", "en", "A loss of minus three dollars."),
    # percentages, dates, times, years
    ("25% off!", "en", "twenty five percent off!"),
    (
        "On Jan. 5, 2024 we met.",
        "en",
        "On the fifth of january, twenty twenty four we met.",
    ),
    ("Due 2024-03-05.", "en", "Due the fifth of march twenty twenty four."),
    ("Meet at 10:30 am.", "en", "Meet at ten thirty AM."),
    ("At 7:05 pm.", "en", "At seven o five PM."),
    ("In 1999 and 2024.", "en", "In nineteen ninety nine and twenty twenty four."),
    ("In 2010.", "en", "In twenty ten."),
    ("The 1990s were fun.", "en", "The nineteen nineties were fun."),
    ("Back in the 80s.", "en", "Back in the eighties."),
    # phone numbers
    (
        "Call 555-123-4567.",
        "en",
        "Call five five five, one two three, four five six seven.",
    ),
    (
        "Call +1 555 123 4567.",
        "en",
        "Call plus one, five five five, one two three, four five six seven.",
    ),
    # units and measures
    ("It weighs 5 kg.", "en", "It weighs five kilograms."),
    ("It is 3.2 km away.", "en", "It is three point two kilometers away."),
    (
        "He ran 100m in 9.58s.",
        "en",
        "He ran one hundred meters in nine point five eight seconds.",
    ),
    ("Drive 60 mph.", "en", "Drive sixty miles per hour."),
    ("It was -5°C outside.", "en", "It was negative five degrees Celsius outside."),
    ("It's 72°F.", "en", "It's seventy two degrees Fahrenheit."),
    # abbreviations
    ("Dr. Smith is here.", "en", "doctor Smith is here."),
    ("Mr. and Mrs. Jones.", "en", "Mister and Misses Jones."),
    ("No. 5 and #1 hit.", "en", "number five and number one hit."),
    # symbols
    ("Tom & Jerry.", "en", "Tom and Jerry."),
    ("1+1=2", "en", "one plus one equals two."),
    ("A+ grade.", "en", "A plus grade."),
    ("x ≥ 5", "en", "x greater than or equal to five."),
    ("About ~5 minutes.", "en", "About about five minutes."),
    ("Open 24/7.", "en", "Open twenty four seven."),
    # quotes survive the grammars unescaped
    ('He said "hi" to me.', "en", 'He said "hi" to me.'),
    # lines stay lines
    ("Costs $5\nor $6", "en", "Costs five dollars.\nor six dollars."),
    # kept as written
    ("Version v2.3.1 is out.", "en", "Version v2.3.1 is out."),
    ("See https://example.com/a-b today.", "en", "See https://example.com/a-b today."),
    ("Mail ops@example.ai now.", "en", "Mail ops@example.ai now."),
    ("Edit package.json first.", "en", "Edit package.json first."),
    ("No numbers here, just words.", "en", "No numbers here, just words."),
    ("It's fine.", "en", "It's fine."),
    # Chinese
    ("2024年3月5日", "zh", "二零二四年三月五日。"),
    ("价格是3.5元，打8折", "zh", "价格是三点五元，打八折。"),
    ("25%的人", "zh", "百分之二十五的人。"),
    ("今天气温-3°C", "zh", "今天气温负三摄氏度。"),
    ("3/4的人", "zh", "四分之三的人。"),
    ("第2天", "zh", "第二天。"),
    ("下午3:30开会", "zh", "下午三点三十分开会。"),
    ("他跑了100米", "zh", "他跑了一百米。"),
    ("重5kg", "zh", "重五千克。"),
    ("1+1=2", "zh", "一加一等于二."),
    ("10-20个", "zh", "十到二十个。"),
    ("中文-英文", "zh", "中文，英文。"),
    ("电话：010-12345678", "zh", "电话：零一零一二三四五六七八。"),
    ("我爱你", "zh", "我爱你。"),
    # mixed Chinese and Latin
    ("我有3个apple", "zh", "我有三个 apple。"),
    ("这是Anthropic的npm包v2.3.1", "zh", "这是 Anthropic 的 npm 包 v2.3.1。"),
    ("访问https://example.com了解", "zh", "访问 https://example.com 了解。"),
    # other languages: the robustness pass only
    ("Il coûte 3 euros", "fr", "Il coûte 3 euros."),
    ("Es kostet 5 Euro", "de", "Es kostet 5 Euro."),
]

# (written, the language ``auto`` reads it in)
SCRIPTS = [
    ("Hello there", "en"),
    ("你好", "zh"),
    ("今日はいい天気", "ja"),
    ("안녕하세요", "ko"),
    ("Привет", None),
    ("12345", "en"),
    ("我有3个apple", "zh"),
]


@pytest.fixture(scope="module")
def normalizer() -> TextNormalizer:
    return TextNormalizer()


@pytest.mark.parametrize(("written", "cleaned"), ROBUST)
def test_robustness_pass(written, cleaned):
    assert clean_text(written) == cleaned
    assert clean_text(cleaned) == cleaned  # idempotent


@pytest.mark.parametrize(("written", "language", "given"), SEMANTIC)
def test_semantic_pass(normalizer, written, language, given):
    assert normalizer.normalize(written, language) == given


def test_auto_reads_by_script(normalizer):
    assert normalizer.normalize("It costs $5.") == "It costs five dollars."
    assert normalizer.normalize("It costs $5.", "auto") == "It costs five dollars."
    assert normalizer.normalize("价格是3.5元") == "价格是三点五元。"
    assert normalizer.normalize("It costs $5.", "English") == "It costs five dollars."
    assert normalizer.normalize("It costs $5.", "en-US") == "It costs five dollars."


@pytest.mark.parametrize(("written", "language"), SCRIPTS)
def test_script_language(written, language):
    assert script_language(written) == language


def test_the_table_is_large_enough():
    assert len(ROBUST) + len(SEMANTIC) >= 100


def test_a_piece_the_grammars_cannot_read_is_kept(normalizer):
    # wetext 0.1.8 fails on "[1]" alone; the words around it are still read
    before = normalizer.stats()["text_normalization_fallbacks"]
    assert normalizer.normalize("x ⟦1⟧ and 2 more", "en").endswith("and two more.")
    assert normalizer.stats()["text_normalization_fallbacks"] >= before


def test_blank_after_normalization_keeps_the_text(normalizer):
    assert normalizer.normalize("\u200b\u200b", "en") == "\u200b\u200b"


def test_costs_are_counted(normalizer):
    before = normalizer.stats()
    normalizer.normalize("It costs $5.", "en")
    after = normalizer.stats()
    assert after["text_normalizations"] == before["text_normalizations"] + 1
    assert after["text_normalization_seconds"] > before["text_normalization_seconds"]


def test_threads_share_one_normalizer(normalizer):
    results, errors = [], []

    def read():
        try:
            for _ in range(20):
                results.append(normalizer.normalize("I paid $3.50 on 3/4, 25% off.", "en"))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert set(results) == {
        "I paid three dollars and fifty cents on three quarters, twenty five percent off."
    }


def test_long_text_is_read_a_sentence_at_a_time(normalizer):
    assert normalizer.normalize("Then it costs $5. " * 60, "en") == " ".join(
        ["Then it costs five dollars."] * 60
    )
    unbroken = "and 5 more " * 60  # no sentence marks: cut at spaces
    assert normalizer.normalize(unbroken, "en") == ("and five more " * 60).strip() + "."
    # a short word before a period does not end a sentence for the grammars
    assert (
        normalizer.normalize("Dr. Smith paid $3.", "en")
        == "doctor Smith paid three dollars."
    )


def test_a_short_text_waits_for_one_part_of_a_long_one_not_all():
    from mlx_speech.text.normalization.grammars import _TakenInTurn

    lock, order = _TakenInTurn(), []

    def read(name: str, parts: int) -> None:
        for part in range(parts):
            with lock:
                order.append(name)
                if part == 10:  # the short text asks while a part is read
                    asked = lock._next_ticket
                    short.start()
                    while lock._next_ticket == asked:
                        threading.Event().wait(0.001)

    short = threading.Thread(target=read, args=("short", 1))
    long = threading.Thread(target=read, args=("long", 200))
    long.start()
    long.join(timeout=30)
    short.join(timeout=30)
    assert order.index("short") == 11 and len(order) == 201


def test_reading_stops_once_the_text_passes_the_most_asked(normalizer):
    digits = "1234567 " * 500  # 37,000 characters read out
    cut = normalizer.normalize(digits, "English", most=100)
    # it stops after the part (up to 200 characters as written) that passed it
    assert 100 < len(cut) < 4000 and cut.startswith("one million two hundred")
    short = "It costs $5."
    assert normalizer.normalize(short, "English", most=100) == normalizer.normalize(short)
