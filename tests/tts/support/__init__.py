"""Helpers the tests share: importable as ``tests.tts.support``."""
