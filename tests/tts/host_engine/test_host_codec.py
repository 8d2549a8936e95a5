"""The host engine's codec decoder (``host_engine.codec_decoder``): MLX's audio bit for bit,
for requests decoded alone and together, with chunks of any size, past the
attention's context."""

from __future__ import annotations

import logging

import mlx.core as mx
import numpy as np
import pytest

from mlx_speech.engine.worker import shared_engine
from mlx_speech.families.moss_nano.codec import DecoderState, decode_together
from mlx_speech.host_engine import codec_decoder as host_codec
from mlx_speech.host_engine.codec_decoder import HostDecoder
from tests.tts.support.host_engine import host_decoder_for, needs_host_library

pytestmark = needs_host_library


# The fast mode's contract for the audio (docs/speech/families.md, "Codec math:
# exact and fast").
FAST_MAX_ABS = 1e-4


def _schedule(n_vq: int, rounds: int, seed: int) -> list[dict]:
    """Four requests over ``rounds`` rounds, some sitting out: per round, each
    due request's chunk of 1 to 5 frames."""
    rng = np.random.default_rng(seed)
    schedule = []
    for round_ in range(rounds):
        due = [r for r in range(4) if (r + round_) % 3 != 0]
        schedule.append(
            {
                r: list(
                    mx.array(
                        rng.integers(0, 64, (1 + (r + round_) % 5, n_vq)), dtype=mx.int32
                    )
                )
                for r in due
            }
        )
    return schedule


def _host_audio(decoder: HostDecoder, schedule: list[dict], alone: bool = False) -> list:
    """Each request's chunks through ``decoder``: the due requests together,
    or (``alone``) each in a pass of its own; audio in the schedule's order."""
    states = [decoder.state() for _ in range(4)]
    audio = []
    for chunks in schedule:
        passes = [[r] for r in chunks] if alone else [list(chunks)]
        for due in passes:
            audio += decoder.decode_together([(states[r], chunks[r]) for r in due])
    return audio


def _mlx_audio(codec, n_vq: int, schedule: list[dict]) -> list:
    states = [DecoderState(codec) for _ in range(4)]
    audio = []
    for chunks in schedule:
        due = list(chunks)
        together = decode_together(codec, n_vq, [(states[r], chunks[r]) for r in due])
        audio += [np.asarray(samples) for samples in together]
    return audio


def _assert_same(got_audio, expected_audio) -> None:
    assert len(got_audio) == len(expected_audio)
    for got, expected in zip(got_audio, expected_audio, strict=True):
        assert got.shape == expected.shape
        assert np.isfinite(expected).all()
        np.testing.assert_array_equal(got, expected)


def _assert_within_contract(got_audio, exact_audio) -> None:
    assert len(got_audio) == len(exact_audio)
    for got, exact in zip(got_audio, exact_audio, strict=True):
        assert got.shape == exact.shape
        assert np.all(np.abs(got - exact) <= FAST_MAX_ABS)


def test_the_service_decodes_on_the_host_with_the_fast_attention(speaking_tts):
    decoder = speaking_tts._service._decodes._decoder
    assert isinstance(decoder, HostDecoder) and decoder.fast


def test_the_exact_service_decodes_with_the_exact_attention(exact_speaking_tts):
    decoder = exact_speaking_tts._service._decodes._decoder
    assert isinstance(decoder, HostDecoder) and not decoder.fast


def _decoders(service) -> dict[bool, HostDecoder]:
    """Worker thread: a host decoder of each mode for the service's codec."""
    codec, n_vq = service._codec, service._model.config.n_vq
    return {fast: host_decoder_for(codec, n_vq, fast=fast) for fast in (False, True)}


def test_chunks_decoded_together_equal_mlx_bit_for_bit_in_the_exact_mode(speaking_tts):
    service = speaking_tts._service
    codec, n_vq = service._codec, service._model.config.n_vq

    def run():
        schedule = _schedule(n_vq, 6, seed=8)
        exact = _decoders(service)[False]
        return _host_audio(exact, schedule), _mlx_audio(codec, n_vq, schedule)

    _assert_same(*shared_engine().call(run))


def test_the_fast_attention_keeps_the_contract_and_ignores_company(speaking_tts):
    """The fast mode's audio: within the contract of the exact decode, and
    each request's the same to the bit whether decoded with others or alone."""
    service = speaking_tts._service
    codec, n_vq = service._codec, service._model.config.n_vq

    def run():
        schedule = _schedule(n_vq, 6, seed=8)
        decoders = _decoders(service)
        assert decoders[True].fast
        together = _host_audio(decoders[True], schedule)
        alone = _host_audio(decoders[True], schedule, alone=True)
        return together, alone, _mlx_audio(codec, n_vq, schedule)

    together, alone, exact = shared_engine().call(run)
    _assert_within_contract(together, exact)
    pairs = zip(together, exact, strict=True)
    assert any(not np.array_equal(got, want) for got, want in pairs)
    _assert_same(together, alone)


@pytest.mark.parametrize("fast", [False, True], ids=["exact", "fast"])
def test_a_request_s_audio_does_not_depend_on_its_chunking(speaking_tts, fast):
    service = speaking_tts._service
    n_vq = service._model.config.n_vq

    def run():
        decoder = _decoders(service)[fast]
        rng = np.random.default_rng(5)
        frames = [mx.array(rng.integers(0, 64, n_vq), dtype=mx.int32) for _ in range(24)]
        audio = []
        for plan in ([1, 1, 1, 1, 2, 3, 4, 6, 5], [24], [16, 8]):
            state, start, chunks = decoder.state(), 0, []
            for size in plan:
                chunks += decoder.decode_together([(state, frames[start : start + size])])
                start += size
            audio.append(np.concatenate(chunks))
        return audio

    first, *others = shared_engine().call(run)
    for other in others:
        np.testing.assert_array_equal(other, first)


def test_a_fast_attention_that_strays_is_not_used(speaking_tts, monkeypatch, caplog):
    service = speaking_tts._service
    codec, n_vq = service._codec, service._model.config.n_vq
    monkeypatch.setattr(host_codec, "FAST_LARGEST_ERROR", -1.0)
    with caplog.at_level(logging.INFO, logger="mlx_speech.engine"):
        decoder = shared_engine().call(lambda: host_decoder_for(codec, n_vq, fast=True))
    assert decoder is not None and not decoder.fast
    assert "fast codec attention strays" in caplog.text


def test_history_past_the_attention_context(speaking_tts):
    """With a context of a few steps, each request's history is cut to its
    last context - 1 steps as MLX's is, chunk after chunk."""
    service = speaking_tts._service
    codec, n_vq = service._codec, service._model.config.n_vq
    layers = [
        layer
        for stage in codec.decoder
        if hasattr(stage, "transformer")
        for layer in stage.transformer.layers
    ]
    contexts = [layer.self_attn.context for layer in layers]

    def run():
        schedule = _schedule(n_vq, 8, seed=9)
        for layer, context in zip(layers, (3, 5, 7, 2, 4, 6, 3), strict=False):
            layer.self_attn.context = context
        try:
            decoders = _decoders(service)
            assert decoders[True].fast
            return (
                _host_audio(decoders[False], schedule),
                _host_audio(decoders[True], schedule),
                _mlx_audio(codec, n_vq, schedule),
            )
        finally:
            for layer, context in zip(layers, contexts, strict=True):
                layer.self_attn.context = context

    exact, fast, mlx = shared_engine().call(run)
    _assert_same(exact, mlx)
    _assert_within_contract(fast, mlx)


def test_no_host_decoder_for_a_positional_embedding_it_lacks(speaking_tts):
    service = speaking_tts._service
    codec, n_vq = service._codec, service._model.config.n_vq
    stage = next(stage for stage in codec.decoder if hasattr(stage, "transformer"))
    before = stage.transformer.positional_embedding

    def run():
        stage.transformer.positional_embedding = "sin_rope"
        try:
            return [host_decoder_for(codec, n_vq, fast=True)]
        finally:
            stage.transformer.positional_embedding = before

    assert shared_engine().call(run) == [None]
