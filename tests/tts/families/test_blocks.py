"""Our compiled GPT-2 pieces give mlx-audio's module outputs bit for bit, for
the shapes Nano checkpoints may take: RoPE or absolute positions, one layer or
several, other activations, per-layer attention scaling."""

from __future__ import annotations

import gc

import mlx.core as mx
import pytest
from mlx_audio.tts.models.moss_tts_nano.config import GPT2Config
from mlx_audio.tts.models.moss_tts_nano.gpt2 import GPT2Model, KVCache

from mlx_speech.families.moss_nano.forward import LocalPass, forward_rows
from mlx_speech.families.moss_nano.kv_cache import block_caches, snapshot, snapshot_bytes

VARIANTS = {
    "rope": {},
    "absolute": {"position_embedding_type": "absolute"},
    "gelu-scaled": {"activation_function": "gelu", "scale_attn_by_inverse_layer_idx": True},
}


def _transformer(seed: int, **overrides) -> GPT2Model:
    mx.random.seed(seed)
    config = GPT2Config(
        n_embd=48, n_layer=2, n_head=4, n_inner=96, n_positions=64, **overrides
    )
    model = GPT2Model(config, use_token_embedding=False)
    mx.eval(model.parameters())
    return model


@pytest.mark.parametrize("variant", VARIANTS)
def test_local_pass_equals_the_module_step_by_step(variant):
    transformer = _transformer(1, **VARIANTS[variant])
    rows = mx.random.normal((3, 6, 48))  # 3 jobs, 6 positions
    cache = [KVCache() for _ in transformer.h]
    local = LocalPass(transformer, positions=6)
    for position in range(6):
        theirs = transformer(inputs_embeds=rows[:, position : position + 1], cache=cache)
        ours = local(rows[:, position])
        assert mx.array_equal(ours, theirs[:, -1]).item(), position


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_rows_equals_the_module_per_job(variant):
    """Prompts of different lengths together, then single rows together (the
    compiled path), each job against the module run for it alone."""
    transformer = _transformer(2, **VARIANTS[variant])
    lengths = [5, 2, 7]
    prompts = [mx.random.normal((1, n, 48)) for n in lengths]
    theirs_caches = [[KVCache() for _ in transformer.h] for _ in lengths]
    ours_caches = [block_caches(len(transformer.h)) for _ in lengths]
    for round_ in range(3):
        inputs = prompts if round_ == 0 else [mx.random.normal((1, 1, 48)) for _ in lengths]
        ours = forward_rows(transformer, inputs, ours_caches)
        for job, rows in enumerate(inputs):
            theirs = transformer(inputs_embeds=rows, cache=theirs_caches[job])
            assert mx.array_equal(ours[job], theirs[0, -1]).item(), (round_, job)


def test_a_snapshot_holds_its_positions_not_the_block_buffers():
    """A cached prompt prefix costs what the prefix-cache bound counts."""
    transformer = _transformer(3)
    rows = mx.random.normal((1, 5, 48))
    mx.eval(rows)
    gc.collect()  # earlier tests' arrays
    before = mx.get_active_memory()
    caches = block_caches(len(transformer.h))
    forward_rows(transformer, [rows], [caches])
    taken = snapshot(caches)
    del caches
    gc.collect()
    # the block buffers would be 50 times more; MLX may keep a few small
    # temporaries of earlier graphs alive a while (a kilobyte or two)
    held = mx.get_active_memory() - before
    assert snapshot_bytes(taken) <= held < 2 * snapshot_bytes(taken)
