"""mlx-audio's loader, without its chatter.

mlx-audio prints progress and, for a text or speech tokenizer that fails to
load, only a printed warning; transformers warns about model types it does not
know. Neither belongs on a CLI's or server's output: the printed text is kept
so a family can name the cause when it finds a part missing.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from mlx_audio.tts.utils import load_model


def load_quietly(model_dir: Path):
    """(the model, what loading printed)."""
    from transformers.utils import logging as transformers_logging

    printed = io.StringIO()
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        with contextlib.redirect_stdout(printed):
            model = load_model(model_dir)
    finally:
        transformers_logging.set_verbosity(verbosity)
    return model, printed.getvalue()


def last_warning(printed: str) -> str:
    """The loader's last printed warning, for an error message."""
    lines = [line.strip() for line in printed.splitlines() if "Warning" in line]
    return f" ({lines[-1]})" if lines else ""
