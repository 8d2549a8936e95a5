"""Random-weight MOSS-TTS-Nano checkpoints in the real on-disk layout.

config.json + model.safetensors + a sentencepiece tokenizer.model trained here,
and audio_tokenizer/{config.json,model.safetensors}, all instantiated from
mlx-audio's own classes. The text head is biased through the local
transformer's final LayerNorm: by default "continue" always wins, so the
model speaks to the frame budget; ``stops=True`` calibrates a narrow margin
so that sampled runs stop by themselves after a varying number of frames.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
import sentencepiece as spm
from mlx.utils import tree_flatten, tree_map, tree_unflatten
from mlx_audio.codec.models.moss_audio_tokenizer import (
    AudioTokenizerConfig,
    MossAudioTokenizer,
)
from mlx_audio.tts.models.moss_tts_nano import Model, ModelConfig
from mlx_audio.tts.models.moss_tts_nano.text import load_tokenizer

CORPUS = [
    "Hello there, this is a small test of the speech model.",
    "The quick brown fox jumps over the lazy dog.",
    "A longer text. With two sentences, and a clause or two!",
    "Numbers like one, two, three and four are spoken clearly.",
    "Streaming audio arrives before the whole utterance is done.",
    "Voice cloning copies the timbre of a short reference clip.",
    "Reference Instruction Tokens Quality Sound Event Ambient Language Text None",
    "user assistant inst",
    "今天天气很好，我们去公园散步吧。",
    "你好，欢迎使用语音合成服务。这是第二句话！",
    "机器学习模型可以把文字变成声音。",
]
SPECIAL_PIECES = [
    "<pad>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_user_slot|>",
    "<|audio_assistant_slot|>",
]


@dataclass(frozen=True)
class Transformer:
    """A codec transformer stage (decode direction): ``width`` wide, ``outputs`` out."""

    width: int
    layers: int
    outputs: int


@dataclass(frozen=True)
class Patch:
    size: int


@dataclass(frozen=True)
class NanoSize:
    width: int = 32
    layers: int = 2
    heads: int = 2
    inner: int = 64
    # Scales the global transformer's queries, keys, values and MLP outputs:
    # at width 32 random layers add too little to the residual for the last
    # row to depend on the text or the reference, so every input gave the
    # same codes; at 4 they do (the guard test in tests/tts holds it).
    mixing_gain: float = 4.0
    text_vocab: int = 256
    n_vq: int = 4
    codebook: int = 64
    # Codec, decode direction: codes → quantizer output → stages → 1 interleaved channel.
    codec_latent: int = 16
    codec_rvq: int = 16
    # one head of 64 dimensions, as the full codec's heads (its attention's
    # fast path takes only those)
    codec_stages: tuple = (
        Transformer(64, 1, 16),
        Patch(2),
        Transformer(64, 1, 960),
        Patch(960),
    )


TINY = NanoSize()
# MOSS-TTS-Nano-100M dimensions; a codec of the Nano class (48 kHz stereo
# interleaved, 3840-sample hop, 16×1024 residual LFQ, ~25 M parameters).
FULL = NanoSize(
    width=768,
    layers=12,
    heads=12,
    inner=3072,
    mixing_gain=1.0,  # it hears its input as initialized
    text_vocab=16384,
    n_vq=16,
    codebook=1024,
    codec_latent=768,
    codec_rvq=512,
    codec_stages=(
        Patch(4),
        Transformer(512, 2, 512),
        Patch(2),
        Transformer(384, 2, 512),
        Patch(2),
        Transformer(256, 2, 384),
        Patch(2),
        Transformer(256, 1, 240),
        Patch(240),
    ),
)
SIZES = {"tiny": TINY, "full": FULL}


def _train_tokenizer(directory: Path, vocab: int) -> None:
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 4) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(directory / "tokenizer"),
        vocab_size=vocab,
        hard_vocab_limit=False,
        character_coverage=1.0,
        model_type="bpe",
        user_defined_symbols=SPECIAL_PIECES,
        minloglevel=2,
    )
    corpus.unlink()
    (directory / "tokenizer.vocab").unlink()


def _model_config(size: NanoSize) -> dict:
    return {
        "model_type": "moss_tts_nano",
        "gpt2_config": {
            "n_embd": size.width,
            "n_layer": size.layers,
            "n_head": size.heads,
            "n_inner": size.inner,
            "vocab_size": size.text_vocab,
            "n_positions": 4096,
            "n_ctx": 4096,
            "position_embedding_type": "rope",
        },
        "n_vq": size.n_vq,
        "audio_vocab_size": size.codebook,
        "audio_codebook_sizes": [size.codebook] * size.n_vq,
        "audio_pad_token_id": size.codebook,
        "pad_token_id": 3,
        "im_start_token_id": 4,
        "im_end_token_id": 5,
        "audio_start_token_id": 6,
        "audio_end_token_id": 7,
        "audio_user_slot_token_id": 8,
        "audio_assistant_slot_token_id": 9,
        "audio_tokenizer_sample_rate": 48000,
        "local_transformer_layers": 1,
        "hidden_size": size.width,
        "vocab_size": size.text_vocab,
    }


def _transformer_kwargs(inputs: int, stage: Transformer, outputs: int) -> dict:
    return {
        "module_type": "Transformer",
        "input_dimension": inputs,
        "output_dimension": outputs,
        "d_model": stage.width,
        "num_heads": max(1, stage.width // 64) if stage.width >= 64 else 2,
        "num_layers": stage.layers,
        "dim_feedforward": 4 * stage.width,
        "causal": True,
        "norm": "layer_norm",
        "positional_embedding": "rope",
        "max_period": 10000,
        "layer_scale": 0.1,
        "conv_layout": True,
        "gating": "none",
    }


def _codec_config(size: NanoSize) -> dict:
    """Stereo, channel-interleaved; the encoder mirrors the decoder."""
    decoder, encoder = [], []
    channels = size.codec_latent
    upsampling = 1
    for stage in size.codec_stages:
        if isinstance(stage, Patch):
            decoder.append({"module_type": "PatchedPretransform", "patch_size": stage.size})
            encoder.insert(
                0, {"module_type": "PatchedPretransform", "patch_size": stage.size}
            )
            channels //= stage.size
            upsampling *= stage.size
        else:
            decoder.append(_transformer_kwargs(channels, stage, stage.outputs))
            encoder.insert(0, _transformer_kwargs(stage.outputs, stage, channels))
            channels = stage.outputs
    if channels != 1 or upsampling % 2:
        raise ValueError("codec stages must end in one interleaved stereo channel")
    return {
        "sampling_rate": 48000,
        "sample_rate": 48000,
        "downsample_rate": upsampling // 2,
        "causal_transformer_context_duration": 10.0,
        "number_channels": 2,
        "enable_channel_interleave": True,
        "encoder_kwargs": encoder,
        "decoder_kwargs": decoder,
        "quantizer_type": "rlfq",
        "quantizer_kwargs": {
            "input_dim": size.codec_latent,
            "rvq_dim": size.codec_rvq,
            "output_dim": size.codec_latent,
            "num_quantizers": size.n_vq,
            "codebook_size": size.codebook,
            "codebook_dim": 8 if size.codebook >= 256 else 4,
            "quantizer_type": "rlfq",
        },
    }


CALIBRATION_TEXT = "Hello there."
SPEAKING = (4.0, 8.0)  # (margin scale, bias): "continue" wins by a wide margin
STOPPING_MARGIN_SCALE = 0.5
STOPPING_TYPICAL_MARGIN = 2.5  # logits; P(stop) ≈ 8% per frame when sampling


def _text_head_direction(model: Model, margin_scale: float) -> mx.array:
    """Tie the two candidate logits to one direction of the local hidden state.

    continue − stop = 2·margin_scale·(hidden · direction); the audio heads are
    made blind to that direction so moving the bias leaves the codes alone.
    """
    config = model.config
    direction = mx.random.normal((config.gpt2_config.n_embd,))
    direction = direction / mx.linalg.norm(direction)
    wte = model.transformer.wte.weight
    wte[config.audio_assistant_slot_token_id] = margin_scale * direction
    wte[config.audio_end_token_id] = -margin_scale * direction
    model.transformer.wte.weight = wte
    for embedding in model.audio_embeddings:
        weight = embedding.weight
        embedding.weight = weight - (weight @ direction)[:, None] * direction[None, :]
    return direction


def _stopping_bias(model: Model, direction: mx.array) -> float:
    """A bias giving a typical continue margin of STOPPING_TYPICAL_MARGIN.

    Measured on a forced run of CALIBRATION_TEXT (frame 0 aside: its hidden
    state comes from the prompt, not from a generated row).
    """
    from mlx_speech.families.moss_nano import loop
    from mlx_speech.families.moss_nano.sampling import HeadSampler, KeySequence

    projections: list[float] = []

    def record_and_go_on(model, jobs, text_hidden):  # a forced run
        projections.append((text_hidden[0] @ direction).item())
        return mx.zeros((len(jobs),), dtype=mx.int32)  # 0: another frame

    stop_decision = loop._text_head_choices
    loop._text_head_choices = record_and_go_on
    sampled = HeadSampler(0.8, 25, 0.95)
    sampling = loop.FrameSampling(
        text=sampled, audio=sampled, repetition_penalty=1.2, max_frames=32
    )
    prompt, _ = model.build_inference_input_ids(
        text=CALIBRATION_TEXT, tokenizer=model.tokenizer, mode="continuation"
    )
    try:
        for _ in loop.frames(model, prompt, sampling, KeySequence(0)):
            pass
    finally:
        loop._text_head_choices = stop_decision
    typical = float(np.median(projections[1:]))
    return STOPPING_TYPICAL_MARGIN / (2 * STOPPING_MARGIN_SCALE) - typical


def _amplify_mixing(model: Model, gain: float) -> None:
    """Scale each global block's attention (queries, keys, values) and MLP
    output by ``gain``: sharper attention over the prompt, and more of it
    and of the MLP in the residual."""
    for block in model.transformer.h:
        attention, mlp = block.attn, block.mlp
        attention.c_attn.weight = attention.c_attn.weight * gain
        attention.c_attn.bias = attention.c_attn.bias * gain
        mlp.fc_out.weight = mlp.fc_out.weight * gain


def _unbias_quantizer(codec: MossAudioTokenizer) -> None:
    """Zero the quantizer's biases: random ones outweigh its codebooks'
    entries, and every code decoded to nearly the same audio."""
    biases = [
        (name, mx.zeros_like(value))
        for name, value in tree_flatten(codec.quantizer.parameters())
        if name.endswith("bias")
    ]
    codec.quantizer.update(tree_unflatten(biases))


def _tame_codec_output(codec: MossAudioTokenizer, size: NanoSize) -> None:
    """Random weights make enormous waveforms; scale the last projection so the
    decoded audio sits around 0.3 RMS, like speech."""
    codes = mx.random.randint(0, size.codebook, (8, size.n_vq))
    rms = float(mx.sqrt(mx.mean(mx.square(codec.decode_audio_codes(codes)))))
    last = next(stage for stage in reversed(codec.decoder) if hasattr(stage, "output_proj"))
    last.output_proj.weight = last.output_proj.weight * (0.3 / max(rms, 1e-6))


def _save(module, path: Path) -> None:
    weights = dict(tree_flatten(module.parameters()))
    mx.save_safetensors(str(path), weights)


def build_nano_checkpoint(
    directory: Path,
    *,
    size: NanoSize = TINY,
    stops: bool = False,
    seed: int = 0,
) -> Path:
    directory = Path(directory)
    (directory / "audio_tokenizer").mkdir(parents=True, exist_ok=True)
    mx.random.seed(seed)

    config = _model_config(size)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    _train_tokenizer(directory, vocab=min(size.text_vocab - 16, 1000))
    model = Model(ModelConfig.from_dict(config))
    model.tokenizer = load_tokenizer(directory)
    _amplify_mixing(model, size.mixing_gain)
    if stops:
        direction = _text_head_direction(model, STOPPING_MARGIN_SCALE)
        bias = _stopping_bias(model, direction)
    else:
        margin_scale, bias = SPEAKING
        direction = _text_head_direction(model, margin_scale)
    model.local_transformer.ln_f.bias = bias * direction
    _save(model, directory / "model.safetensors")

    codec_config = _codec_config(size)
    (directory / "audio_tokenizer" / "config.json").write_text(
        json.dumps(codec_config, indent=2)
    )
    codec = MossAudioTokenizer(AudioTokenizerConfig.from_dict(codec_config))
    # Weight-norm directions start at zero in the class; give them values.
    codec.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.3, codec.parameters()))
    _unbias_quantizer(codec)
    _tame_codec_output(codec, size)
    _save(codec, directory / "audio_tokenizer" / "model.safetensors")
    return directory
