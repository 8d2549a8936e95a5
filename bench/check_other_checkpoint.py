"""Parity and first-chunk timing on a tiny checkpoint of other dimensions than the
test suite's (other widths, codebooks, tokenizer and codec hop).

    python bench/check_other_checkpoint.py
"""

import tempfile
import time
from pathlib import Path

import numpy as np
from mlx_audio.tts.utils import load_model

import mlx_speech
from mlx_speech.testing.nano_checkpoint import (
    NanoSize,
    Patch,
    Transformer,
    build_nano_checkpoint,
)

d = Path(tempfile.mkdtemp()) / "nano-other"
size = NanoSize(
    width=48,
    layers=3,
    heads=4,
    inner=96,
    text_vocab=320,
    n_vq=6,
    codebook=128,
    codec_latent=24,
    codec_rvq=24,
    codec_stages=(Transformer(24, 1, 24), Patch(2), Transformer(24, 1, 1920), Patch(1920)),
)
build_nano_checkpoint(d, size=size, seed=42)
tts = mlx_speech.load(d)
text = (
    "Greetings from a checkpoint the suite never built. It has other dimensions, 还有中文。"
)
ours = tts.speak(text, temperature=0, max_new_tokens=40).samples
ref = load_model(d)
theirs = np.asarray(
    next(ref.generate(text, mode="continuation", do_sample=False, max_tokens=40)).audio
).mean(axis=1)
print("samples", ours.shape, theirs.shape, "max |diff|", float(np.abs(ours - theirs).max()))
for _ in range(3):
    t0 = time.perf_counter()
    s = tts.stream("Hello there.", temperature=0, max_new_tokens=40)
    first = next(s)
    t1 = time.perf_counter() - t0
    frames = (len(first.samples) + sum(len(c.samples) for c in s)) // 1920
    total = time.perf_counter() - t0
    print(
        f"first chunk {len(first.samples)} samples after {t1 * 1000:.1f} ms; "
        f"{frames} frames in {total * 1000:.1f} ms; ratio {t1 / total:.3f}"
    )
