"""The codec decoder on the host (``host_codec``): MLX's audio bit for bit,
for requests decoded alone and together, with chunks of any size, past the
attention's context."""

from __future__ import annotations

import os
import shutil
import sys

import mlx.core as mx
import numpy as np
import pytest

from mlx_speech.engine.worker import shared_engine
from mlx_speech.families.moss_nano.codec import DecoderState, decode_together
from mlx_speech.families.moss_nano.host_codec import HostDecoder, host_decoder

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not (os.environ.get("CC") or shutil.which("cc")),
    reason="the host decoder needs the C library (Linux, a C compiler)",
)


def _rounds(codec, n_vq: int, decoder: HostDecoder, rounds: int, seed: int):
    """Four requests over ``rounds`` rounds, some sitting out, each due one
    chunk of 1 to 5 frames: (ours, MLX's) audio of every chunk."""
    rng = np.random.default_rng(seed)
    ours = [decoder.state() for _ in range(4)]
    theirs = [DecoderState(codec) for _ in range(4)]
    pairs = []
    for round_ in range(rounds):
        due = [r for r in range(4) if (r + round_) % 3 != 0]
        chunks = {
            r: list(
                mx.array(rng.integers(0, 64, (1 + (r + round_) % 5, n_vq)), dtype=mx.int32)
            )
            for r in due
        }
        got = decoder.decode_together([(ours[r], chunks[r]) for r in due])
        expected = decode_together(codec, n_vq, [(theirs[r], chunks[r]) for r in due])
        pairs += list(zip(got, map(np.asarray, expected), strict=True))
    return pairs


def _assert_same(pairs) -> None:
    for got, expected in pairs:
        assert got.shape == expected.shape
        assert np.isfinite(expected).all()
        np.testing.assert_array_equal(got, expected)


def test_the_service_decodes_on_the_host(speaking_tts):
    assert speaking_tts._service._decodes._host is not None


def test_chunks_decoded_together_equal_mlx_bit_for_bit(speaking_tts):
    service = speaking_tts._service
    decoder, codec = service._decodes._host, service._codec
    n_vq = service._model.config.n_vq
    _assert_same(shared_engine().call(lambda: _rounds(codec, n_vq, decoder, 6, seed=8)))


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
        for layer, context in zip(layers, (3, 5, 7, 2, 4, 6, 3), strict=False):
            layer.self_attn.context = context
        try:
            decoder = host_decoder(codec, n_vq)
            assert decoder is not None
            return _rounds(codec, n_vq, decoder, 8, seed=9)
        finally:
            for layer, context in zip(layers, contexts, strict=True):
                layer.self_attn.context = context

    _assert_same(shared_engine().call(run))


def test_no_host_decoder_for_a_positional_embedding_it_lacks(speaking_tts):
    service = speaking_tts._service
    codec, n_vq = service._codec, service._model.config.n_vq
    stage = next(stage for stage in codec.decoder if hasattr(stage, "transformer"))
    before = stage.transformer.positional_embedding

    def run():
        stage.transformer.positional_embedding = "sin_rope"
        try:
            return [host_decoder(codec, n_vq)]
        finally:
            stage.transformer.positional_embedding = before

    assert shared_engine().call(run) == [None]
