"""Random-weight Qwen3-TTS checkpoints in the real on-disk layout.

``config.json``, ``model.safetensors``, ``generation_config.json``, a BPE text
tokenizer trained here, and ``speech_tokenizer/{config.json,model.safetensors}``,
all from mlx-audio's own classes. Dimensions are as small as mlx-audio's loader
allows: its conv-layout guess transposes any kernel-1 conv with at most 64 input
channels, so those convs are kept wider than 64. The codec head's rows for EOS
and for code 0 are zeroed and the other code rows sharpened, so the model
speaks to the frame budget and never picks code 0 for codebook 0 (mlx-audio's
buffered decode counts such frames as padding and trims them).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_audio.tts.models.qwen3_tts.config import ModelConfig, Qwen3TTSTokenizerConfig
from mlx_audio.tts.models.qwen3_tts.qwen3_tts import Model
from mlx_audio.tts.models.qwen3_tts.speech_tokenizer import Qwen3TTSSpeechTokenizer

from .hf_tokenizer import build_bpe_tokenizer

KINDS = ("custom_voice", "base", "voice_design")
CODEBOOK = 32
CODE_GROUPS = 4
SAMPLES_PER_FRAME = 16  # the real model has 1920 (12.5 Hz at 24 kHz)
SPEAKERS = {"vivian": CODEBOOK + 200, "ryan": CODEBOOK + 201, "dylan": CODEBOOK + 202}
LANGUAGES = {"english": CODEBOOK + 150, "chinese": CODEBOOK + 151}


def _transformer(vocab: int, hidden: int = 32) -> dict:
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
    }


def model_config(kind: str, tokens: dict[str, int]) -> dict:
    talker = {
        # Every codec special id lies in the top 1024 ids, which generation suppresses.
        **_transformer(CODEBOOK + 1024),
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "rope_scaling": {
            "interleaved": True,
            "mrope_section": [4, 2, 2],  # sums to head_dim / 2
            "rope_type": "default",
        },
        "num_code_groups": CODE_GROUPS,
        "text_hidden_size": 32,
        "text_vocab_size": tokens["__len__"],
        "codec_pad_id": CODEBOOK + 100,
        "codec_bos_id": CODEBOOK + 101,
        "codec_eos_token_id": CODEBOOK + 102,
        "codec_think_id": CODEBOOK + 106,
        "codec_nothink_id": CODEBOOK + 107,
        "codec_think_bos_id": CODEBOOK + 108,
        "codec_think_eos_id": CODEBOOK + 109,
        "codec_language_id": LANGUAGES,
        "code_predictor_config": {
            **_transformer(CODEBOOK),
            "max_position_embeddings": 64,
            "num_code_groups": CODE_GROUPS,
        },
    }
    if kind == "custom_voice":
        talker["spk_id"] = SPEAKERS
        talker["spk_is_dialect"] = {name: False for name in SPEAKERS}
    config = {
        "model_type": "qwen3_tts",
        "tts_model_type": kind,
        "tts_model_size": "1b7",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "im_start_token_id": tokens["<|im_start|>"],
        "im_end_token_id": tokens["<|im_end|>"],
        "tts_pad_token_id": tokens["<tts_pad>"],
        "tts_bos_token_id": tokens["<tts_text_bos>"],
        "tts_eos_token_id": tokens["<tts_text_eod>"],
        "sample_rate": 24000,
        "talker_config": talker,
    }
    if kind == "base":
        config["speaker_encoder_config"] = {
            "mel_dim": 128,
            "enc_dim": 32,  # the talker width: the x-vector joins the codec stream
            "enc_channels": [72, 72, 72, 72, 216],
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": 72,
            "enc_res2net_scale": 4,
            "enc_se_channels": 72,
            "sample_rate": 24000,
        }
    return config


def speech_tokenizer_config(with_encoder: bool) -> dict:
    config = {
        "model_type": "qwen3_tts_tokenizer_12hz",
        "decoder_config": {
            "codebook_size": CODEBOOK,
            "codebook_dim": 136,
            "latent_dim": 16,
            "decoder_dim": 144,
            "hidden_size": 16,
            "intermediate_size": 32,
            "head_dim": 8,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
            "num_quantizers": CODE_GROUPS,
            "num_semantic_quantizers": 1,
            "sliding_window": 72,
            "upsample_rates": [4],
            "upsampling_ratios": [2, 2],
            "max_position_embeddings": 8000,
        },
        "encoder_valid_num_quantizers": CODE_GROUPS,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": SAMPLES_PER_FRAME,
        "encode_downsample_rate": 1920,
    }
    if with_encoder:  # a Mimi-style encoder at the real 12.5 Hz frame rate
        config["encoder_config"] = {
            "frame_rate": 12.5,
            "audio_channels": 1,
            "codebook_dim": 72,
            "codebook_size": CODEBOOK,
            "compress": 1,
            "dilation_growth_rate": 2,
            "head_dim": 8,
            "hidden_size": 72,
            "intermediate_size": 64,
            "kernel_size": 7,
            "last_kernel_size": 3,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_filters": 72,
            "num_hidden_layers": 1,
            "num_quantizers": CODE_GROUPS,
            "num_residual_layers": 1,
            "num_semantic_quantizers": 1,
            "residual_kernel_size": 3,
            "sampling_rate": 24000,
            "sliding_window": 250,
            "upsampling_ratios": [40, 24],
            "use_causal_conv": True,
            "use_conv_shortcut": False,
            "vector_quantization_hidden_dimension": 16,
        }
    return config


def _talker_weights(config: dict) -> dict[str, mx.array]:
    model = Model(ModelConfig.from_dict(config))
    weights = {
        name: value * 0.5 if value.ndim >= 2 else value
        for name, value in tree_flatten(model.parameters())
    }
    head = weights["talker.codec_head.weight"]
    rows = mx.arange(head.shape[0])[:, None]
    eos = config["talker_config"]["codec_eos_token_id"]
    head = mx.where((rows == eos) | (rows == 0), 0.0, head)
    weights["talker.codec_head.weight"] = mx.where(rows < CODEBOOK, 20.0 * head, head)
    return weights


def _speech_tokenizer_weights(config: dict) -> dict[str, mx.array]:
    tokenizer = Qwen3TTSSpeechTokenizer(
        Qwen3TTSTokenizerConfig(
            encoder_config=config.get("encoder_config"),
            decoder_config=config["decoder_config"],
        )
    )
    weights = {}
    for name, value in tree_flatten(tokenizer.parameters()):
        if name.endswith(("._embedding", "._c2", "._initialized")):
            continue  # derived at load time
        weights[name] = mx.abs(value) + 1.0 if name.endswith("cluster_usage") else value
    return weights


def build_qwen3_checkpoint(
    directory: Path, kind: str, with_encoder: bool | None = None, seed: int = 0
) -> Path:
    """``with_encoder`` (default: for Base) adds the codec encoder cloning needs."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if with_encoder is None:
        with_encoder = kind == "base"
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    mx.random.seed(seed)
    tokens = build_bpe_tokenizer(directory)
    config = model_config(kind, tokens)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    mx.save_safetensors(
        str(directory / "model.safetensors"), _talker_weights(config), {"format": "mlx"}
    )
    (directory / "generation_config.json").write_text(
        json.dumps(
            {
                "temperature": 0.9,
                "top_k": 50,
                "top_p": 1.0,
                "repetition_penalty": 1.05,
                "max_new_tokens": 2048,
            },
            indent=2,
        )
    )
    codec_dir = directory / "speech_tokenizer"
    codec_dir.mkdir(exist_ok=True)
    codec_config = speech_tokenizer_config(with_encoder)
    (codec_dir / "config.json").write_text(json.dumps(codec_config, indent=2))
    mx.save_safetensors(
        str(codec_dir / "model.safetensors"),
        _speech_tokenizer_weights(codec_config),
        {"format": "mlx"},
    )
    return directory
