"""A tiny random-weight chat model in mlx-lm's layout (a Llama with the test
BPE tokenizer), for running mlx-lm beside mlx-speech without a download."""

from __future__ import annotations

import json
from pathlib import Path

from .hf_tokenizer import build_bpe_tokenizer


def build_lm_checkpoint(directory: Path, seed: int = 0) -> Path:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = build_bpe_tokenizer(directory)["__len__"]
    config = {
        "model_type": "llama",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    mx.random.seed(seed)
    model = Model(ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(directory / "model.safetensors"), weights)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory
