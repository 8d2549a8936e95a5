"""Errors the public API raises."""


class InvalidRequest(ValueError):
    """A bad request; ``param`` names the offending field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class ModelLoadError(RuntimeError):
    """The model could not be found, fetched or loaded."""


class GenerationError(RuntimeError):
    """Generation failed after the request was accepted (e.g. non-finite audio)."""
