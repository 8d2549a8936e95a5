"""The VoxCPM2 patch loop, one latent patch per step, on mlx-audio's modules.

Each step: the diffusion head turns the two language models' last hidden
states into the next latent patch (conditioned on the previous patch), the
stop head decides whether this was the last one (the one host sync), and the
patch is fed back through the feature encoder into both language models. The
diffusion noise comes from MLX's global key: run it under
``GlobalRandomKey.installed()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

MIN_PATCHES = 2  # mlx-audio's min_tokens: no stop before this many patches


@dataclass(frozen=True)
class Settings:
    max_patches: int
    timesteps: int = 10  # mlx-audio's defaults
    cfg_value: float = 2.0


def prompt_rows(model, text: str, reference: np.ndarray | None):
    """The prefill: (token ids, latent features, text mask, audio mask), each with
    a batch axis. A reference clip (at the model's output rate) leads as a
    bracketed run of its own latent patches."""
    ids = mx.array(model._tokenize(text) + [model.audio_start_token], dtype=mx.int32)
    silent = mx.zeros((ids.shape[0], model.patch_size, model.audio_vae.latent_dim))
    ones, zeros = mx.ones(ids.shape[0]), mx.zeros(ids.shape[0])
    tokens, features, text_mask, audio_mask = ids, silent, ones, zeros
    if reference is not None:
        prefix = model._make_ref_prefix(model._encode_wav(reference, padding_mode="right"))
        ref_tokens, ref_features, ref_text_mask, ref_audio_mask = prefix
        tokens = mx.concatenate([ref_tokens, ids])
        features = mx.concatenate([ref_features, silent], axis=0)
        text_mask = mx.concatenate([ref_text_mask, ones])
        audio_mask = mx.concatenate([ref_audio_mask, zeros])
    return tokens[None], features[None], text_mask[None], audio_mask[None]


def patches(model, prompt, settings: Settings) -> Iterator[mx.array]:
    """Yields latent patches ``[1, patch, dim]``, the last being the one the stop
    head chose."""
    tokens, features, text_mask, audio_mask = prompt
    feature_rows = model.enc_to_lm_proj(model.feat_encoder(features))
    scale = model.args.lm_config.scale_emb if model.args.lm_config.use_mup else 1.0
    text_rows = model.base_lm.embed_tokens(tokens) * scale
    rows = text_mask[..., None] * text_rows + audio_mask[..., None] * feature_rows
    lm_out, lm_cache = model.base_lm(rows)
    # Audio positions go through the scalar quantizer, as in training.
    lm_out = model.fsq_layer(lm_out) * audio_mask[..., None] + lm_out * text_mask[..., None]
    residual_out, residual_cache = model.residual_lm(
        model.fusion_concat_proj(
            mx.concatenate([lm_out, audio_mask[..., None] * feature_rows], axis=-1)
        )
    )
    lm_hidden, residual_hidden = lm_out[:, -1, :], residual_out[:, -1, :]
    previous = features[:, -1, :, :]
    for step in range(settings.max_patches):
        patch = model.feat_decoder.sample(
            mu=mx.concatenate(
                [model.lm_to_dit_proj(lm_hidden), model.res_to_dit_proj(residual_hidden)],
                axis=-1,
            ),
            n_timesteps=settings.timesteps,
            patch_size=model.patch_size,
            cond=previous.transpose(0, 2, 1),
            cfg_value=settings.cfg_value,
        ).transpose(0, 2, 1)
        stop_logits = model.stop_head(nn.silu(model.stop_proj(lm_hidden)))
        mx.eval(patch, stop_logits)
        stops = step > MIN_PATCHES and mx.argmax(stop_logits, axis=-1).item() == 1
        yield patch
        if stops:
            return
        patch_row = model.enc_to_lm_proj(model.feat_encoder(patch[:, None, :, :]))
        lm_out, lm_cache = model.base_lm(inputs_embeds=patch_row, cache=lm_cache)
        lm_hidden = model.fsq_layer(lm_out[:, -1, :])
        residual_out, residual_cache = model.residual_lm(
            inputs_embeds=model.fusion_concat_proj(
                mx.concatenate([lm_hidden[:, None, :], patch_row], axis=-1)
            ),
            cache=residual_cache,
        )
        residual_hidden = residual_out[:, -1, :]
        previous = patch
