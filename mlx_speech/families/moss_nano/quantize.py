"""Quantized transformer weights (``mlx-speech serve --quantize 8|4``).

The linear layers of the global and local transformers' blocks hold nearly
all of a frame step's weight traffic; quantized, a frame reads a quarter
(8 bits) or an eighth (4 bits) of it, in groups of ``GROUP_SIZE`` inputs
sharing a scale and offset (MLX's affine quantization, as mlx-audio's
converter makes it). Embeddings and heads stay float: the loop indexes and
multiplies them as tables, and the text head decides when speech ends. The
codec is a separate model and stays float.
"""

from __future__ import annotations

import mlx.nn as nn

QUANTIZE_BITS = (8, 4)
GROUP_SIZE = 64
_BLOCKS = ("transformer.h.", "local_transformer.h.")


def quantize_transformers(model: nn.Module, bits: int) -> None:
    """Quantizes the blocks' linear layers of ``model`` in place (those whose
    input width is a whole number of groups)."""

    def chosen(path: str, module: nn.Module) -> bool:
        return (
            isinstance(module, nn.Linear)
            and path.startswith(_BLOCKS)
            and module.weight.shape[-1] % GROUP_SIZE == 0
        )

    nn.quantize(model, group_size=GROUP_SIZE, bits=bits, class_predicate=chosen)
