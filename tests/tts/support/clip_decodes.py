"""Counting the decodes of reference clips (each a file or bytes read)."""

from __future__ import annotations

from mlx_speech.families import reference_audio


def counted_decodes(monkeypatch) -> list:
    """A list that gets an entry for every clip decoded from now on."""
    decodes = []
    decode = reference_audio._read_file

    def counted(*arguments):
        decodes.append(arguments)
        return decode(*arguments)

    monkeypatch.setattr(reference_audio, "_read_file", counted)
    return decodes
