"""mlx-audio's GPT-2 block for Nano's transformers, as two row-wise pieces
around attention, each of which MLX can compile into fused kernels.

A frame step pushes only a few rows through each block, so dispatching its
many small operations one by one costs about as much as their arithmetic.
Compiled, the layer norms, rotations, residual adds and activation run as a
few fused kernels. The pieces do mlx-audio's operations in its order and
precision, and MLX's CPU compiler (``g++ -O3``, no ``-march``) does not
contract multiply-adds, so on the CPU backend results are bit for bit those of
mlx-audio's modules (the parity tests hold them to that). Where no C++
compiler is found, MLX runs the same operations unfused.

A block is passed as its module: MLX hands the compiled function its
parameters as nested dicts.

A quantized layer (``--quantize``) takes MLX's quantized product.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn
from mlx_audio.tts.models.moss_tts_nano.gpt2 import gelu_new

from .accelerator import MLX_OPS, ArrayOps
from .halves import in_halves
from .kv_cache import keys_and_values
from .pair_rotation import rotate_pairs

Rotation = tuple[mx.array, mx.array]  # cos, sin: broadcastable to [batch, rows, heads, dim]


def linear(x: mx.array, weight: mx.array, bias: mx.array | None = None) -> mx.array:
    """``x @ weight.T`` (plus ``bias``), as mlx-audio's ``nn.Linear`` computes it."""
    return x @ weight.T if bias is None else mx.addmm(bias, x, weight.T)


class BlockSettings(NamedTuple):
    heads: int
    scale: float
    eps: float
    activation: str


def settings(block) -> BlockSettings:
    attention = block.attn
    return BlockSettings(
        heads=attention.num_heads,
        scale=attention.scale,
        eps=block.ln_1.eps,
        activation=block.mlp.activation_function,
    )


def attention_inputs(
    block,
    x: mx.array,
    rotation: Rotation | None,
    heads: int,
    eps: float,
) -> tuple[mx.array, mx.array]:
    """``ln_1`` and ``c_attn`` of ``x`` (``[batch, rows, width]``) → queries
    (``[batch, rows, heads, head_dim]``) and keys and values side by side
    (``[batch, rows, 2, heads, head_dim]``), queries and keys rotated when
    the block uses RoPE."""
    parts = _attention_parts(block, x, rotation, heads, eps)
    return parts[:, :, 0], parts[:, :, 1:]


def _attention_parts(
    block, x: mx.array, rotation: Rotation | None, heads: int, eps: float
) -> mx.array:
    """``attention_inputs`` side by side in one array, ``[batch, rows, 3,
    heads, head_dim]``, so keys and values can be kept together."""
    normed = mx.fast.layer_norm(x, block["ln_1"]["weight"], block["ln_1"]["bias"], eps)
    qkv = _apply(block["attn"]["c_attn"], normed)
    parts = qkv.reshape(*qkv.shape[:2], 3, heads, -1)
    return parts if rotation is None else _rotated(parts, rotation)


def _rotated(parts: mx.array, rotation: Rotation) -> mx.array:
    """mlx-audio's RoPE, ``x * cos + rotate_half(x) * sin``, of the queries
    and keys in ``parts`` (``[batch, rows, 3, heads, head_dim]``), the values
    selected unchanged, in one element-wise pass (``rotate_pairs``)."""
    *outer, size = parts.shape
    pairs = parts.reshape(*outer, size // 2, 2)
    cos, sin = (table.reshape(*table.shape[:2], 1, 1, size // 2, 2) for table in rotation)
    turned = rotate_pairs(pairs, pairs[..., ::-1], cos, sin)
    is_value = mx.array([False, False, True]).reshape(1, 1, 3, 1, 1, 1)
    return mx.where(is_value, pairs, turned).reshape(parts.shape)


def block_output(
    block,
    x: mx.array,
    attended: mx.array,
    eps: float,
    activation: str,
    activate: Callable[[mx.array, str], mx.array] | None = None,
) -> mx.array:
    """The rest of the block after attention (``attended``: ``[batch, rows,
    width]``): ``c_proj`` and the residual, then ``ln_2``, the MLP (its
    activation through ``activate`` when given) and its residual."""
    projected = _apply(block["attn"]["c_proj"], attended)
    x, normed = _add_and_norm(x, projected, block["ln_2"], eps)
    inner = _apply(block["mlp"]["fc_in"], normed)
    inner = (activate or _activate)(inner, activation)
    return x + _apply(block["mlp"]["fc_out"], inner)


def _add_and_norm(
    x: mx.array, delta: mx.array, norm, eps: float
) -> tuple[mx.array, mx.array]:
    x = x + delta
    return x, mx.fast.layer_norm(x, norm["weight"], norm["bias"], eps)


def local_step(
    transformer,
    x: mx.array,
    caches: list[mx.array],
    rotations: Rotation | None,
    blocks: tuple[BlockSettings, ...],
    final_eps: float,
) -> tuple[mx.array, list[mx.array]]:
    """The next position of a short transformer for ``batch`` sequences side
    by side (``x``: ``[batch, 1, width]``) → ``ln_f`` of its output, and the
    caches grown by it.

    ``caches`` hold each layer's keys and values so far (``[2, batch,
    heads, position, head_dim]``; none at position 0), and ``rotations`` the RoPE
    tables of all positions (``[1, positions, 1, head_dim]``). Every sequence
    is at the same position, so the one query sees every key and needs no
    mask. (Compiled, ``blocks`` arrive as plain tuples, hence the unpacking.)
    """
    position = caches[0].shape[3] if caches else 0
    rotation = None
    if rotations is not None:
        rotation = tuple(table[:, position : position + 1] for table in rotations)
    grown = []
    for layer, (block, shape) in enumerate(zip(transformer["h"], blocks, strict=True)):
        heads, scale, eps, activation = shape
        parts = _attention_parts(block, x, rotation, heads, eps)
        history = caches[layer] if caches else None
        attended, kept = _attend_position(parts, history, scale)
        grown.append(kept)
        x = block_output(block, x, attended, eps, activation)
    ln_f = transformer["ln_f"]
    return mx.fast.layer_norm(x, ln_f["weight"], ln_f["bias"], final_eps), grown


def _attend_position(
    parts: mx.array, history: mx.array | None, scale: float
) -> tuple[mx.array, mx.array]:
    """One position's queries, keys and values (``[batch, 1, 3, heads,
    head_dim]``) with the keys and values before it → the attended rows
    (``[batch, 1, width]``) and the keys and values so far, together: one
    concatenation a position, not two."""
    queries = parts[:, :, 0].transpose(0, 2, 1, 3)
    kept = parts[:, :, 1:].transpose(2, 0, 3, 1, 4)  # [2, batch, heads, 1, head_dim]
    if history is not None:
        kept = mx.concatenate([history, kept], axis=3)
    keys, values = keys_and_values(kept)
    attended = mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale)
    batch, heads, rows, size = attended.shape
    return attended.transpose(0, 2, 1, 3).reshape(batch, rows, heads * size), kept


attention_inputs_compiled = mx.compile(attention_inputs)
block_output_compiled = mx.compile(block_output)
local_step_compiled = mx.compile(local_step)


def _apply(layer, x: mx.array) -> mx.array:
    if "scales" in layer:
        return _quantized_linear(layer, x)
    return linear(x, layer["weight"], layer.get("bias"))


def _quantized_linear(layer, x: mx.array) -> mx.array:
    """mlx's ``QuantizedLinear`` on its parameters; its group size and bits
    follow from the shapes (``weight`` packs ``bits``-bit values into 32-bit
    words, ``scales`` has one column per group)."""
    width = x.shape[-1]
    weight, scales = layer["weight"], layer["scales"]
    out = mx.quantized_matmul(
        x,
        weight,
        scales,
        layer.get("biases"),
        transpose=True,
        group_size=width // scales.shape[-1],
        bits=32 * weight.shape[-1] // width,
    )
    return out + layer["bias"] if "bias" in layer else out


def activate_rows(x: mx.array, name: str, ops: ArrayOps = MLX_OPS) -> mx.array:
    """The activation of a prompt's rows, outside a compiled step: ``ops``'
    ``gelu_tanh`` where it applies, else MLX's with each half of the features
    on its own CPU thread. Either way the numbers are MLX's."""
    gelu = ops.takes("gelu_tanh", x) if name == "gelu_new" else None
    return gelu(x) if gelu is not None else in_halves(partial(_activate, name=name), -1, x)


def _activate(x: mx.array, name: str) -> mx.array:
    if name == "gelu_new":
        return gelu_new(x)
    if name == "silu":
        return nn.silu(x)
    return nn.gelu(x)
