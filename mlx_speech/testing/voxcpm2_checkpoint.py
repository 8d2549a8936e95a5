"""Random-weight VoxCPM2 checkpoints in the real on-disk layout.

``config.json`` (detected by its ``architecture``), one ``model.safetensors``
holding every module including the audio VAE under ``audio_vae.``, and a BPE
text tokenizer trained here, all from mlx-audio's own classes. Every sub-model
shares one head size (they share the RoPE factor lists). The stop head is set
so the model never stops (speaks to the patch budget) or, with ``stops=True``,
stops as soon as mlx-audio allows.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_audio.tts.models.voxcpm2 import Model, ModelConfig

from .hf_tokenizer import build_bpe_tokenizer

HEAD_DIM = 16
PATCH_SIZE = 2
SAMPLES_PER_PATCH = PATCH_SIZE * 2 * 3 * 4  # patch × the VAE decoder's upsampling


def _stack(hidden: int = 32) -> dict:
    return {"hidden_dim": hidden, "ffn_dim": 2 * hidden, "num_heads": 2, "num_layers": 1}


def model_config(vocab_size: int) -> dict:
    rope_factors = [1.0] * (HEAD_DIM // 2)
    return {
        "architecture": "voxcpm2",
        "lm_config": {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 64,
            "vocab_size": vocab_size,  # above the fixed audio token ids 101..104
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "rope_scaling": {
                "type": "longrope",
                "long_factor": rope_factors,
                "short_factor": rope_factors,
                "original_max_position_embeddings": 4096,
            },
            "max_position_embeddings": 4096,
            "scale_emb": 12,
            "dim_model_base": 256,
            "scale_depth": 1.4,
            "use_mup": True,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        "encoder_config": _stack(),
        "dit_config": {
            **_stack(),
            "cfm_config": {
                "sigma_min": 1e-6,
                "solver": "euler",
                "t_scheduler": "log-norm",
                "inference_cfg_rate": 2.0,
            },
        },
        "audio_vae_config": {
            "encoder_dim": 8,
            "encoder_rates": [2, 4],
            "latent_dim": 8,
            "decoder_dim": 32,
            "decoder_rates": [2, 3, 4],
            "depthwise": True,
            "sample_rate": 16000,
            "out_sample_rate": 48000,
            "use_noise_block": False,
            "sr_bin_boundaries": [20000, 30000, 40000],
            "cond_type": "scale_bias",
            "cond_dim": 8,
            "cond_out_layer": False,
        },
        "patch_size": PATCH_SIZE,
        "feat_dim": 8,  # the VAE's latent_dim
        "scalar_quantization_latent_dim": 16,
        "scalar_quantization_scale": 9,
        "residual_lm_num_layers": 1,
        "residual_lm_no_rope": False,
        "max_length": 4096,
    }


def _weights(config: dict, stops: bool) -> dict[str, mx.array]:
    weights = dict(tree_flatten(Model(ModelConfig.from_dict(config)).parameters()))
    # silu(stop_proj(h)) is then a positive constant, so the stop logits are
    # fixed: "go on" wins unless ``stops``.
    projection = weights["stop_proj.weight"]
    weights["stop_proj.weight"] = mx.zeros_like(projection)
    weights["stop_proj.bias"] = mx.ones((projection.shape[0],))
    head = mx.abs(weights["stop_head.weight"])
    go_on, stop = head[0], mx.zeros_like(head[0])
    if stops:
        go_on, stop = stop, head[0]
    weights["stop_head.weight"] = mx.stack([go_on, stop])
    return weights


def build_voxcpm2_checkpoint(directory: Path, stops: bool = False, seed: int = 0) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    mx.random.seed(seed)
    tokens = build_bpe_tokenizer(directory)
    config = model_config(tokens["__len__"])
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    mx.save_safetensors(
        str(directory / "model.safetensors"), _weights(config, stops), {"format": "mlx"}
    )
    return directory
