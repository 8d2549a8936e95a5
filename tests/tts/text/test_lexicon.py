"""A pronunciation lexicon: its files, its matching rules, and every surface
that takes one (Python, the CLI's speak and normalize, the server)."""

from __future__ import annotations

import os

import httpx
import numpy as np
import pytest

import mlx_speech
from mlx_speech.server import ServerSettings
from mlx_speech.text.lexicon import MAX_LEXICON_BYTES, Lexicon, LexiconError, load_lexicon
from tests.tts.support.cli import run
from tests.tts.support.server import RunningServer

PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"
         alphabet="ipa" xml:lang="en-US">
  <meta name="author" content="tests"/>
  <lexeme><grapheme>SQL</grapheme><alias>sequel</alias></lexeme>
  <lexeme>
    <grapheme>nginx</grapheme><grapheme>NGINX server</grapheme>
    <alias>engine x</alias>
  </lexeme>
</lexicon>
"""
SHORT = {"max_new_tokens": 4, "seed": 3}


def test_words_are_matched_whole_by_the_documented_case_rules():
    lexicon = Lexicon(
        [("SQL", "sequel"), ("nginx", "engine x"), ("New York", "the big apple"),
         ("York", "yawk"), ("你好", "您好"), ("MSSQL", "M S SQL")]
    )  # fmt: skip
    assert (
        lexicon.apply("SQL, sql, mySQL, SQL_x and SQL.")
        == "sequel, sql, mySQL, SQL_x and sequel."
    )
    assert (
        lexicon.apply("nginx Nginx NGINX nginxes") == "engine x engine x engine x nginxes"
    )
    assert lexicon.apply("New York and York") == "the big apple and yawk"  # longest first
    assert lexicon.apply("他说你好世界") == "他说您好世界"  # no spaces in its script
    assert lexicon.apply("MSSQL") == "M S SQL"  # an alias is not looked up again


@pytest.mark.parametrize(
    "written, text, said",
    [
        ("µs", "μs", "said"),  # the micro sign folds to the Greek mu
        ("ſt", "ST", "said"),
        ("ϐeta", "Βeta", "said"),
        ("ẛx", "Ṡx", "said"),
        ("ıd", "ID", "ID"),  # a dotless i folds to itself, I to i
    ],
    ids=["micro-mu", "long-s", "beta", "long-s-dot", "dotless-i"],
)
def test_any_case_folds_each_character_one_way(written, text, said):
    """A match in any case is found and said the same way (a micro sign
    matched a Greek mu, then its lookup by lower case failed: a 500)."""
    assert Lexicon([(written, "said")]).apply(f"{text} {written}.") == f"{said} said."


def test_an_alias_is_expanded_only_as_far_as_the_bound(speaking_dir, nano_backend):
    alias = "w" * 10_000
    lexicon = Lexicon([("x", alias)])
    assert len(lexicon.apply("x " * 2048, most=4096)) <= 4096 + len(alias) + 2
    tts = mlx_speech.load(speaking_dir, backend=nano_backend)
    tts.lexicon, tts.max_text_chars = lexicon, 4096
    with pytest.raises(
        ValueError, match="4096 characters and more than 4096 as it is read out"
    ):
        tts.speak("x " * 2048)


def test_a_pls_file_and_a_line_file_say_the_same(tmp_path):
    pls, lines = tmp_path / "words.pls", tmp_path / "words.txt"
    pls.write_text(PLS, encoding="utf-8")
    lines.write_text("# mine\nSQL = sequel\n\nnginx=engine x\nNGINX server = engine x\n")
    assert (
        load_lexicon(pls).entries
        == load_lexicon(lines).entries
        == {
            "SQL": "sequel",
            "nginx": "engine x",
            "NGINX server": "engine x",
        }
    )


@pytest.mark.parametrize(
    "content, said",
    [
        ("SQL sequel\n", "line 1 is not 'WRITTEN = SAID'"),
        (" = nothing\n", "an entry has no written form"),
        ("<lexicon><lexeme><grapheme>a</grapheme><phoneme>b</phoneme></lexeme></lexicon>",
         "lexeme 1 has no <alias>"),
        ("<lexicon>\n<lexeme><grapheme>a</grapheme>\n</lexicon>",
         "mismatched tag (line 3, column 3)"),
        ("<speak>hi</speak>", "not a PLS <lexicon>"),
        ('<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
         "<lexicon><lexeme><grapheme>&lol2;</grapheme><alias>x</alias></lexeme></lexicon>",
         "a document type (<!DOCTYPE ...>) is not accepted"),
        ('<!DOCTYPE l SYSTEM "file:///etc/passwd"><lexicon/>', "is not accepted"),
    ],
    ids=["no-equals", "empty", "phonemes", "malformed", "not-pls", "entities", "external"],
)  # fmt: skip
def test_a_lexicon_that_cannot_be_used_is_refused_saying_where(tmp_path, content, said):
    path = tmp_path / "bad.pls"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LexiconError, match="the lexicon .*bad.pls") as refused:
        load_lexicon(path)
    assert said in str(refused.value)


def test_a_lexicon_is_read_only_from_a_regular_file_within_its_bound(tmp_path):
    fifo = tmp_path / "words.fifo"
    os.mkfifo(fifo)  # no writer: reading it would wait for ever
    with pytest.raises(LexiconError, match="words.fifo: it is not a regular file"):
        load_lexicon(fifo)
    large = tmp_path / "large.txt"
    large.write_bytes(b"# " + b"x" * MAX_LEXICON_BYTES)
    with pytest.raises(LexiconError, match=f"larger than {MAX_LEXICON_BYTES} bytes"):
        load_lexicon(large)


def test_normalize_shows_the_lexicon_before_the_reading_out(tmp_path):
    path = tmp_path / "words.pls"
    path.write_text(PLS, encoding="utf-8")
    done = run("normalize", "SQL costs 5 dollars on nginx", "--lexicon", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sequel costs five dollars on engine x."


def test_speak_and_serve_refuse_a_bad_lexicon_before_loading(tmp_path):
    missing = str(tmp_path / "missing.pls")
    for command in (["speak", "Hi."], ["serve"]):
        done = run(*command, "--lexicon", missing, "--model", str(tmp_path / "no-model"))
        assert done.returncode == 1
        assert "cannot read the lexicon" in done.stderr


def test_python_speech_says_the_lexicons_words(speaking_dir, nano_backend, tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("SQL = sequel\nMSSQL = M S SQL\n")
    tts = mlx_speech.load(speaking_dir, backend=nano_backend, lexicon=path)
    plain = mlx_speech.load(speaking_dir, backend=nano_backend)
    said = tts.speak("SQL works.", **SHORT).samples
    np.testing.assert_array_equal(said, plain.speak("sequel works.", **SHORT).samples)
    assert not np.array_equal(said, plain.speak("SQL works.", **SHORT).samples)
    assert tts.normalized("MSSQL works") == plain.normalized("M S SQL works")
    # text spoken as it is written takes the lexicon once, as one request does
    streamed = np.concatenate(
        [c.samples for c in tts.stream_text(["MSSQL works."], **SHORT)]
    )
    once = plain.speak("M S SQL works.", **SHORT).samples
    np.testing.assert_array_equal(streamed, once)
    assert not np.array_equal(streamed, plain.speak("MSSQL works.", **SHORT).samples)


def test_the_server_says_the_lexicons_words(speaking_dir, nano_backend, tmp_path):
    path = tmp_path / "words.pls"
    path.write_text(PLS, encoding="utf-8")
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path,
        lexicon=load_lexicon(path),
        backend=nano_backend,
    )
    with RunningServer(settings) as server:

        def pcm(text: str) -> bytes:
            body = {"input": text, "response_format": "pcm", **SHORT}
            response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
            assert response.status_code == 200
            return response.content

        assert pcm("We run nginx.") == pcm("We run engine x.")
        assert pcm("We run nginx.") != pcm("We run engine.")
