"""Build a TINY random-weight VoxCPM2 checkpoint that mlx_audio.tts.utils.load_model()
(mlx-audio 0.6.2) loads, then generate a few patches.

Usage: python build_voxcpm2.py [--out DIR] [--max-tokens N] [--timesteps T] [--no-build]

Layout written:
  <out>/config.json        "architecture": "voxcpm2" (model_type_from_config reads
                           config["model_type"] or config["architecture"])
  <out>/model.safetensors  ALL weights incl. audio_vae.* (MLX layout)
  <out>/tokenizer.json, tokenizer_config.json  (AutoTokenizer.from_pretrained(<out>))
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

sys.path.insert(0, str(Path(__file__).parent))
from tiny_tokenizer import build_tokenizer  # noqa: E402

HEAD_DIM = 16   # base_lm, residual_lm, feat_encoder and DiT share the rope factor lists,
                # so every sub-model must have the same head_dim (hidden/heads or kv_channels)


def make_config(vocab: int) -> dict:
    half = HEAD_DIM // 2
    return {
        "architecture": "voxcpm2",
        "lm_config": {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 64,
            "vocab_size": vocab,          # must be > 104 (audio_start=101 .. ref_audio_end=104 hard-coded)
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "rope_scaling": {             # from_dict maps this to rope_* fields; factors len == head_dim//2
                "type": "longrope",
                "long_factor": [1.0] * half,
                "short_factor": [1.0] * half,
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
        "encoder_config": {"hidden_dim": 32, "ffn_dim": 64, "num_heads": 2, "num_layers": 1},
        "dit_config": {"hidden_dim": 32, "ffn_dim": 64, "num_heads": 2, "num_layers": 1,
                       "cfm_config": {"sigma_min": 1e-6, "solver": "euler",
                                      "t_scheduler": "log-norm", "inference_cfg_rate": 2.0}},
        "audio_vae_config": {
            "encoder_dim": 8,
            "encoder_rates": [2, 4],          # chunk_size 8 samples @16k per latent frame
            "latent_dim": 8,
            "decoder_dim": 32,
            "decoder_rates": [2, 3, 4],       # decode_chunk_size 24 samples @48k per latent frame
            "depthwise": True,
            "sample_rate": 16000,
            "out_sample_rate": 48000,
            "use_noise_block": False,
            "sr_bin_boundaries": [20000, 30000, 40000],
            "cond_type": "scale_bias",
            "cond_dim": 8,
            "cond_out_layer": False,
        },
        "patch_size": 2,
        "feat_dim": 8,                        # must == audio_vae latent_dim
        "scalar_quantization_latent_dim": 16,
        "scalar_quantization_scale": 9,
        "residual_lm_num_layers": 1,
        "residual_lm_no_rope": False,
        "max_length": 4096,
    }


def build(out: Path):
    from mlx_audio.tts.models.voxcpm2 import Model, ModelConfig

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    mx.random.seed(0)
    tok = build_tokenizer(out)
    cfg = make_config(tok["__len__"])
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    model = Model(ModelConfig.from_dict(cfg))
    w = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out / "model.safetensors"), w, metadata={"format": "mlx"})
    print(f"built voxcpm2 at {out}: {len(w)} tensors, "
          f"{sum(v.size for v in w.values())/1e6:.3f}M params")


def run(out: Path, max_tokens: int, timesteps: int):
    from mlx_audio.tts.utils import load_model
    import numpy as np

    t = time.time()
    model = load_model(out)
    print(f"loaded {type(model).__module__}.{type(model).__name__} in {time.time()-t:.2f}s, "
          f"sr={model.sample_rate} tokenizer={type(model.tokenizer).__name__}")
    mx.random.seed(1234)
    for label, kw in [
        ("zero-shot", {}),
        ("voice-design", {"instruct": "A young woman, warm voice"}),
        ("clone", {"ref_audio": mx.array(np.random.RandomState(0).randn(4800).astype(np.float32) * 0.1)}),
    ]:
        t = time.time()
        res = list(model.generate("Hello world.", max_tokens=max_tokens, min_tokens=2,
                                  inference_timesteps=timesteps, **kw))
        r = res[0]
        print(f"  {label}: {len(res)} result(s) audio.shape={tuple(r.audio.shape)} sr={r.sample_rate} "
              f"finite={bool(mx.all(mx.isfinite(r.audio)).item())} in {time.time()-t:.2f}s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="./ckpt_voxcpm2")
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--timesteps", type=int, default=4)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    if not a.no_build:
        build(out)
    run(out, a.max_tokens, a.timesteps)
