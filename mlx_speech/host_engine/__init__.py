"""The host engine: an accelerator for MOSS-TTS-Nano on Linux's CPU, beside
the MLX backend.

MLX's CPU backend evaluates each small piece of a frame as a graph on its own
stream thread, and the waits between pieces cost about as much as the
arithmetic. Here the frame step (``frame_step``) and the codec decoder
(``codec_decoder``) run on host buffers outside MLX's graph, each block one
call into a C library (``csrc/``, built by ``pip install``, loaded and
checked by ``library``) whose products go through the BLAS MLX itself calls
(``blas``). Every part is checked against MLX's numbers on this machine as
the model loads, and a part that differs is not used. The family knows it only through
``families.moss_nano.accelerator``.
"""
