"""Pieces of the HTTP transport: request parsing, containers, the ASGI audio
adapter, metrics and the error shape. ``mlx_speech.server`` assembles them."""
