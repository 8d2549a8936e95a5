"""``bench_nano.py --with-chat-model``: speech next to a chat model in one
process, as people run mlx-speech beside mlx-lm.

The chat model is a random-weight Llama with Llama-3.2-1B's dimensions (16
layers, 2048 wide, 128256-token vocabulary), built from its config on a
thread of its own (no download), quantized to --chat-bits as such models are
usually run. The same streamed requests are measured three ways: alone, with
the chat model resident but idle, and with it generating tokens all the
while. Reported per condition: time to first audio p50/p95, real-time factor
p50/p95, chunk jitter (how late each chunk came against a player that
started at the first chunk, p95 and max) and peak memory (MLX's, which
counts both models, and the process's peak resident size).
"""

from __future__ import annotations

import resource
import threading
import time

import numpy as np

TEXTS = [
    "Hello there, this is a benchmark of streaming speech on a local machine.",
    "A chat model writes the answer while we read it aloud, one sentence at a time.",
]
LLAMA_3_2_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "vocab_size": 128256,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
}


class ChatModel:
    """A chat model on its own thread: built there, then idle or generating
    until ``stop`` (MLX's streams are per thread, so it never leaves it)."""

    def __init__(self, bits: int | None):
        self._bits = bits
        self._ready = threading.Event()
        self._generate = threading.Event()
        self._stop = threading.Event()
        self.tokens = 0
        self._thread = threading.Thread(target=self._run, name="chat", daemon=True)
        self._thread.start()
        self._ready.wait()

    def generating(self, on: bool) -> None:
        (self._generate.set if on else self._generate.clear)()

    def stop(self) -> None:
        self._stop.set()
        self._generate.set()
        self._thread.join()

    def _run(self) -> None:
        import mlx.core as mx
        import mlx.nn as nn
        from mlx_lm.generate import generate_step
        from mlx_lm.models.llama import Model, ModelArgs

        mx.random.seed(0)
        model = Model(ModelArgs.from_dict(LLAMA_3_2_1B))
        if self._bits is not None:
            nn.quantize(model, group_size=64, bits=self._bits)
        mx.eval(model.parameters())
        self._ready.set()
        prompt = mx.array(np.arange(1, 65) % LLAMA_3_2_1B["vocab_size"], dtype=mx.int32)
        while not self._stop.is_set():
            self._generate.wait()
            for _ in generate_step(prompt, model, max_tokens=256):
                self.tokens += 1
                if self._stop.is_set() or not self._generate.is_set():
                    break


def _one_stream(tts, text: str, frames: int) -> dict:
    started = time.perf_counter()
    first, audio, lateness = None, 0.0, []
    for chunk in tts.stream(text, temperature=0, max_new_tokens=frames):
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            lateness.append(max(0.0, (now - first) - audio))  # the player ran dry
        audio += len(chunk.samples) / chunk.sample_rate
    total = time.perf_counter() - started
    return {"ttfa": first - started, "rtf": total / audio, "lateness": lateness}


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    array = np.asarray(values)
    return {
        "p50": round(float(np.percentile(array, 50)), 3),
        "p95": round(float(np.percentile(array, 95)), 3),
        "max": round(float(array.max()), 3),
    }


def _condition(tts, requests: int, frames: int) -> dict:
    import mlx.core as mx

    mx.reset_peak_memory()
    runs = [_one_stream(tts, TEXTS[i % len(TEXTS)], frames) for i in range(requests)]
    lateness = [late for run in runs for late in run["lateness"]]
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "time_to_first_audio_s": _percentiles([run["ttfa"] for run in runs]),
        "rtf": _percentiles([run["rtf"] for run in runs]),
        "chunk_lateness_s": _percentiles(lateness),
        "mlx_peak_memory_mib": round(mx.get_peak_memory() / 2**20),
        "process_peak_rss_mib": round(peak_rss_kib / 1024),
    }


def run(tts, requests: int, frames: int, chat_bits: int | None) -> dict:
    """The three conditions, in order (the process's peak RSS only grows)."""
    tts.speak(TEXTS[0], temperature=0, max_new_tokens=2)  # warm up
    results = {"alone": _condition(tts, requests, frames)}
    chat = ChatModel(chat_bits)
    try:
        results["chat_model_resident"] = _condition(tts, requests, frames)
        chat.generating(True)
        before, started = chat.tokens, time.perf_counter()
        results["chat_model_generating"] = _condition(tts, requests, frames)
        rate = (chat.tokens - before) / (time.perf_counter() - started)
        results["chat_model_generating"]["chat_tokens_per_s"] = round(rate, 2)
    finally:
        chat.stop()
    return results


def print_table(results: dict) -> None:
    conditions = list(results)
    print("| | " + " | ".join(name.replace("_", " ") for name in conditions) + " |")
    print("|---" * (len(conditions) + 1) + "|")
    rows = [
        ("first audio p50 / p95 (s)", "time_to_first_audio_s", ("p50", "p95")),
        ("real-time factor p50 / p95", "rtf", ("p50", "p95")),
        ("chunk lateness p95 / max (s)", "chunk_lateness_s", ("p95", "max")),
    ]
    for label, key, parts in rows:
        cells = [" / ".join(str(results[c][key][p]) for p in parts) for c in conditions]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in (
        ("MLX peak memory (MiB)", "mlx_peak_memory_mib"),
        ("process peak RSS (MiB)", "process_peak_rss_mib"),
    ):
        print(f"| {label} | " + " | ".join(str(results[c][key]) for c in conditions) + " |")
    generating = results.get("chat_model_generating", {})
    if "chat_tokens_per_s" in generating:
        print(f"chat model: {generating['chat_tokens_per_s']} tokens/s while we spoke")
