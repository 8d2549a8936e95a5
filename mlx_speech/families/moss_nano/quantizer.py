"""The codec quantizer's decode (codes → the decoder's input) with each
weight-normalized projection's weight computed once.

mlx-audio's ``ResidualLFQ.decode_codes`` rebuilds every projection's weight
from its direction and norm at each call: five operations per codebook,
most of a one-frame lookup. The weights are constant, so they are built
once, with the same operations; everything else is mlx-audio's, in its
order, so the numbers are the same.
"""

from __future__ import annotations

import mlx.core as mx

Projection = tuple[mx.array, mx.array]  # a 1x1 convolution's weight and bias


class QuantizerLookup:
    def __init__(self, quantizer):
        def projection(convolution) -> Projection:
            weight = convolution._source_layout_weight().transpose(0, 2, 1)
            return weight, convolution.bias

        self._tables = [each.codebook.weight for each in quantizer.quantizers]
        self._projections = [projection(each.out_proj) for each in quantizer.quantizers]
        self._output = projection(quantizer.output_proj)
        self._width = quantizer.rvq_dim
        mx.eval(self._projections, self._output)

    def decode(self, codes: mx.array) -> mx.array:
        """``[quantizers, batch, steps]`` codes → ``[batch, channels, steps]``."""
        used = codes.shape[0]
        return _decoded(
            codes, self._tables[:used], self._projections[:used], self._output, self._width
        )


def _decoded(
    codes: mx.array,
    tables: list[mx.array],
    projections: list[Projection],
    output: Projection,
    width: int,
) -> mx.array:
    total = mx.zeros((codes.shape[1], width, codes.shape[2]), dtype=mx.float32)
    for index, (table, projection) in enumerate(zip(tables, projections, strict=True)):
        vectors = table[codes[index]].transpose(0, 2, 1).astype(mx.float32)
        total = total + _projected(vectors, projection).astype(mx.float32)
    return _projected(total, output).astype(mx.float32)


def _projected(x: mx.array, projection: Projection) -> mx.array:
    """``WNConv1d.__call__`` (``x``: ``[batch, channels, steps]``) with its
    weight already built."""
    weight, bias = projection
    return (mx.conv1d(x.transpose(0, 2, 1), weight) + bias).transpose(0, 2, 1)
