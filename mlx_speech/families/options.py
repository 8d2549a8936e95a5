"""Sampling keywords, spelled the same on every surface and for every family."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Any

from ..errors import InvalidRequest, finite_number, shown

SEED_LIMIT = 2**63


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    max_new_tokens: int
    seed: int | None = None


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidRequest(name, f"{name} must be an integer, got {shown(value)}")
    return int(value)


def parse_sampling(
    options: dict[str, Any], defaults: SamplingOptions, max_new_tokens_limit: int
) -> SamplingOptions:
    """Validate sampling keywords over ``defaults``; ``seed`` is always filled in."""
    unknown = sorted(set(options) - set(SamplingOptions.__dataclass_fields__))
    if unknown:
        allowed = ", ".join(SamplingOptions.__dataclass_fields__)
        raise InvalidRequest(
            unknown[0], f"unknown option {', '.join(unknown)}; allowed: {allowed}"
        )
    given = {name: value for name, value in options.items() if value is not None}
    parsed = replace(defaults, **given)

    temperature = finite_number("temperature", parsed.temperature)
    if temperature < 0:
        raise InvalidRequest(
            "temperature", f"temperature must be >= 0 (0 is greedy), got {temperature}"
        )
    top_p = finite_number("top_p", parsed.top_p)
    if not 0 < top_p <= 1:
        raise InvalidRequest("top_p", f"top_p must be in (0, 1], got {top_p}")
    top_k = _integer("top_k", parsed.top_k)
    if top_k < 0:
        raise InvalidRequest(
            "top_k", f"top_k must be >= 0 (0 keeps every token), got {top_k}"
        )
    penalty = finite_number("repetition_penalty", parsed.repetition_penalty)
    if penalty <= 0:
        raise InvalidRequest(
            "repetition_penalty", f"repetition_penalty must be > 0, got {penalty}"
        )
    max_new_tokens = _integer("max_new_tokens", parsed.max_new_tokens)
    if not 1 <= max_new_tokens <= max_new_tokens_limit:
        raise InvalidRequest(
            "max_new_tokens",
            f"max_new_tokens must be in 1..{max_new_tokens_limit}, got {max_new_tokens}",
        )
    if parsed.seed is None:
        seed = secrets.randbelow(SEED_LIMIT)
    else:
        seed = _integer("seed", parsed.seed)
        if not 0 <= seed < SEED_LIMIT:
            raise InvalidRequest("seed", f"seed must be in 0..{SEED_LIMIT - 1}, got {seed}")
    return SamplingOptions(temperature, top_p, top_k, penalty, max_new_tokens, seed)
