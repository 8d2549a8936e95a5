"""``mlx-speech voices push``: upload saved voices to a server with vLLM-Omni's
voices API (``POST /v1/audio/voices``, multipart), ours included."""

from __future__ import annotations

import json
import mimetypes
import secrets
import urllib.error
import urllib.request

from .store import SavedVoice

TIMEOUT_SECONDS = 60


def voices_url(server: str) -> str:
    """``http://host:port``, with or without ``/v1``, to its voices route."""
    base = server.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/audio/voices"


def _multipart(fields: dict[str, str], clip: SavedVoice) -> tuple[bytes, str]:
    boundary = f"mlx-speech-{secrets.token_hex(12)}"
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
            f"{value}\r\n".encode()
        )
    media_type = mimetypes.guess_type(clip.clip_name)[0] or "application/octet-stream"
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; '
        f'filename="{clip.clip_name}"\r\nContent-Type: {media_type}\r\n\r\n'.encode()
        + clip.clip.read_bytes()
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def push_voice(voice: SavedVoice, url: str, api_key: str | None) -> str | None:
    """Upload one voice; None when the server took it, else why not."""
    # vLLM-Omni requires a consent id; the voice's name stands for it.
    fields = {"name": voice.name, "consent": voice.name}
    if voice.ref_text:
        fields["ref_text"] = voice.ref_text
    body, content_type = _multipart(fields, voice)
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", content_type)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS):
            return None
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}: {_error_message(error.read())}"
    except (urllib.error.URLError, OSError) as error:
        return f"cannot reach {url}: {getattr(error, 'reason', error)}"


def _error_message(body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace") or "no message"
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))
    return str(error or answer)[:200]
