"""One heavy operation issued as two halves that run at once.

MLX's CPU backend runs an element-wise operation on one thread. The codec's
attention softmax (exp) and exact GELU (erf) are such operations over large
arrays and take most of a decode, as is the transformer's GELU (tanh, power)
over a prompt's rows. Issued in two halves, the second on another
CPU stream (which has its own thread), they use two cores. Every element is
computed as before, so results do not change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import mlx.core as mx

_streams = threading.local()  # MLX streams belong to the thread that made them


def in_halves(operation: Callable[..., mx.array], axis: int, *arrays: mx.array) -> mx.array:
    """``operation(*arrays)``, for an operation that works independently
    along ``axis``: each half of the arrays along it on its own CPU thread.
    On other devices, or with nothing to split, in one piece."""
    size = arrays[0].shape[axis]
    if size < 2 or mx.default_device().type != mx.cpu:
        return operation(*arrays)
    middle = size // 2
    first = operation(*(_part(array, axis, 0, middle) for array in arrays))
    with mx.stream(_second_stream()):
        second = operation(*(_part(array, axis, middle, size) for array in arrays))
    return mx.concatenate([first, second], axis=axis)


def _part(array: mx.array, axis: int, start: int, end: int) -> mx.array:
    index = [slice(None)] * array.ndim
    index[axis] = slice(start, end)
    return array[tuple(index)]


def _second_stream() -> mx.Stream:
    if not hasattr(_streams, "second"):
        _streams.second = mx.new_stream(mx.cpu)
    return _streams.second
