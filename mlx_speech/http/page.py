"""The page at ``/``: plain files shipped in the package (``mlx_speech/page``),
served as they are; no build step, nothing fetched from elsewhere."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

from .errors import ApiError

PAGE_DIR = Path(__file__).parents[1] / "page"
ASSETS = {"page.js": "text/javascript", "page.css": "text/css"}
PUBLIC_PATHS = ("/", *(f"/page/{name}" for name in ASSETS))  # open without the API key
_HEADERS = {
    "cache-control": "no-cache",
    # no other site may frame the page (a click on it could then be another's)
    "content-security-policy": (
        "default-src 'self'; media-src 'self' blob: data:; img-src 'self' data:; "
        "frame-ancestors 'self'"
    ),
    "x-frame-options": "SAMEORIGIN",  # the same, for browsers without CSP 3
}


async def page(request: Request) -> Response:
    return FileResponse(PAGE_DIR / "index.html", media_type="text/html", headers=_HEADERS)


async def page_asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        raise ApiError(404, "no such route")
    return FileResponse(PAGE_DIR / name, media_type=ASSETS[name], headers=_HEADERS)
