"""The HTTP adapter on the serving core: the Starlette app (``app``), request
parsing, containers, the ASGI audio adapter and the error shape.
``mlx_speech.server`` sets it beside the other protocols."""
