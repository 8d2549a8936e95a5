"""Errors the public API raises besides ``ValueError`` (a bad request)."""


class ModelLoadError(RuntimeError):
    """The model could not be found, fetched or loaded."""


class GenerationError(RuntimeError):
    """Generation failed after the request was accepted (e.g. non-finite audio)."""
