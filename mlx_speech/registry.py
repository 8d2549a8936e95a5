"""Which family serves a checkpoint: read from its ``config.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .errors import ModelLoadError, ModelNotFetched
from .families import LoadOptions, SpeechService, moss_nano, qwen3, voxcpm2

# model_type (or architecture) in config.json → the family's loader (runs on the worker).
FAMILIES: dict[str, Callable[[Path, LoadOptions], SpeechService]] = {
    moss_nano.FAMILY: moss_nano.load,
    qwen3.FAMILY: qwen3.load,
    voxcpm2.FAMILY: voxcpm2.load,
}


def resolve_model_dir(model: str | Path) -> Path:
    """A local checkpoint directory, or a hub id fetched with huggingface_hub."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{model} is a file; pass the checkpoint directory")
        return path.resolve()
    text = str(model)
    if isinstance(model, Path) or text.startswith(("/", ".", "~")) or text.count("/") != 1:
        raise ModelLoadError(f"model directory not found: {text}")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(text))
    except Exception as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ModelNotFetched(text, reason) from error


def family_loader(model_dir: Path) -> Callable[[Path, LoadOptions], SpeechService]:
    return FAMILIES[model_family(model_dir)]


def model_family(model_dir: Path) -> str:
    """The family (a key of ``FAMILIES``) that serves the checkpoint."""
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise ModelLoadError(
            f"{model_dir} has no config.json; is it a checkpoint?"
        ) from None
    except (OSError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"cannot read {config_path}: {error}") from None
    # VoxCPM2 checkpoints name their family in "architecture", as mlx-audio reads it.
    model_type = (
        config.get("model_type") or config.get("architecture")
        if isinstance(config, dict)
        else None
    )
    if model_type not in FAMILIES:
        supported = ", ".join(sorted(FAMILIES))
        raise ModelLoadError(
            f"unsupported model_type {model_type!r} in {config_path}; "
            f"supported: {supported}"
        )
    return model_type
