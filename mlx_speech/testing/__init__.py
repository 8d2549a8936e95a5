"""Helpers for tests and benchmarks: random-weight checkpoints in the real layout."""
