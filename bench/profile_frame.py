"""Where one MOSS-TTS-Nano frame's time goes, beside mlx-audio, in one process.

    python bench/profile_frame.py CHECKPOINT [--repeats 3] [--backend mlx|host]

Taking turns, ``--repeats`` times: mlx-audio 0.6.2's steady ms/frame (greedy
``generate()`` of 60 frames minus 20, over 40); our frame step (one request
after 24 frames) greedy and sampled (the default), each through MLX (as
without the host step) and on the host (``frame_step``; a sampled one's
products the library's own where the lone order does not hold for every
product shape and ``MLX_SPEECH_EXACT`` is not set); a greedy step of
``--batch`` requests together on the host; a sampled step of ``--batch``
requests together, through MLX and on the host; MLX's matrix
products alone, in the step's order and shapes (12 global layers, 17 local
positions, 16 codebook heads and the text head: the floor the step cannot go
under while MLX computes them with ``sgemm``), alone and for ``--batch``
requests stepped together; and our codec decode per frame in 16-frame chunks,
and of one request's first chunk (one frame) and ``--batch`` requests' first
chunks together, each through MLX and on the host (``codec_decoder``).
The host parts run where the host engine offers them for the model
(``--backend``; default: ``MLX_SPEECH_BACKEND``, else auto: the host engine
where it can run); MLX's take the engine's activations where they apply.
Prints the best of each and what share of mlx-audio's frame it is, then what
each MLX part costs the host per frame (``graph_cost``): the primitives it
evaluates (all, and those that compute), and the times the host waits for
them, for the lone step (greedy and sampled), a step of ``--batch``, and the
codec decode (a 16-frame chunk, and a first chunk of one frame); and for the
steps, the ms the host takes to build a frame before queuing it (while the
device computes the last frame's codes). On Linux it
runs MLX on the system OpenBLAS when one is installed (pass
--reference-blas to keep the bundled reference BLAS).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

TEXT = "Hello there, this is a benchmark of streaming speech on a local machine."


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="rows of the batched products")
    parser.add_argument("--reference-blas", action="store_true")
    parser.add_argument("--backend", default=None, choices=("auto", "mlx", "host"))
    return parser.parse_args()


def _their_steady_ms(theirs) -> float:
    def seconds(frames: int) -> float:
        started = time.perf_counter()
        next(theirs.generate(TEXT, mode="continuation", do_sample=False, max_tokens=frames))
        return time.perf_counter() - started

    short = seconds(20)
    return (seconds(60) - short) / 40 * 1000


def _new_jobs(model, greedy: bool, jobs: int) -> list:
    """``jobs`` requests of the bench text, greedy or with the default sampling."""
    from mlx_speech.families.moss_nano.loop import FrameJob
    from mlx_speech.families.moss_nano.sampling import KeySequence
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling

    options = replace(DEFAULTS, max_new_tokens=10**6)
    sampling = _frame_sampling(replace(options, temperature=0.0) if greedy else options)
    prompt, _ = model.build_inference_input_ids(
        text=TEXT, tokenizer=model.tokenizer, mode="continuation"
    )
    return [FrameJob(model, prompt, sampling, KeySequence(seed)) for seed in range(jobs)]


def _our_step_ms(model, stepper, frames: int = 16, greedy: bool = True, jobs: int = 1):
    """→ ms per frame step of ``jobs`` requests stepped together through
    ``stepper`` (MLX's or the host's), and the first one's frames."""
    import mlx.core as mx

    group = _new_jobs(model, greedy, jobs)
    for _ in range(24):
        stepper.step(group)
    mx.eval([job.frame for job in group])
    made = []
    started = time.perf_counter()
    for _ in range(frames):
        stepper.step(group)
        made.append(group[0].frame)
    mx.eval(made)
    return (time.perf_counter() - started) / frames * 1000, made


def _step_cost(model, stepper, greedy: bool, jobs: int = 1, frames: int = 8):
    """What ``frames`` steps of ``jobs`` requests cost the host, per frame:
    everything each frame evaluates, its tail included (counted by one last
    evaluation, which is not one of the frames' syncs); then, in as many
    more steps timed apart, the median ms the host takes to build a frame
    before queuing it."""
    import statistics

    import mlx.core as mx
    from graph_cost import BuildTime, GraphCost

    group = _new_jobs(model, greedy, jobs)
    for _ in range(4):
        stepper.step(group)

    def state():
        return [(job.inputs, job.history.seen, job.keys._key) for job in group]

    mx.eval(state())
    with GraphCost() as cost:
        for _ in range(frames):
            stepper.step(group)
        mx.eval(state())
    cost.syncs -= 1
    with BuildTime() as build:
        for _ in range(frames):
            build.start()
            stepper.step(group)
    mx.eval(state())
    return cost, frames, statistics.median(build.seconds) * 1000


def _decode_cost(decoder, frames) -> tuple:
    """What decoding ``frames`` as one chunk (after two of history) costs."""
    from graph_cost import GraphCost

    state = decoder.state()
    for _ in range(2):
        decoder.decode_together([(state, frames)])
    with GraphCost() as cost:
        decoder.decode_together([(state, frames)])
    return cost, len(frames), None


def _their_step_cost(theirs, frames: int = 8) -> tuple:
    """What mlx-audio's greedy frame costs the host, its loop's setup left
    out: ``frames`` more frames' cost over ``frames`` (the same prompt)."""
    from graph_cost import GraphCost

    prompt, _ = theirs.build_inference_input_ids(
        text=TEXT, tokenizer=theirs.tokenizer, mode="continuation"
    )

    def cost_of(count: int) -> GraphCost:
        with GraphCost() as cost:
            theirs.generate_audio_token_ids(
                prompt_input_ids=prompt, max_new_frames=count, do_sample=False
            )
        return cost

    short, long = cost_of(frames), cost_of(2 * frames)
    long.by_primitive.subtract(short.by_primitive)
    long.syncs -= short.syncs
    return long, frames, None


def _their_decode_cost(theirs, frames) -> tuple:
    """What mlx-audio's codec decode of ``frames`` costs (it decodes a
    request's frames once, after the last)."""
    import mlx.core as mx
    from graph_cost import GraphCost

    codes = mx.stack(list(frames)).reshape(1, len(frames), -1).astype(mx.int32)
    theirs.decode_audio_token_ids(codes)  # its first use loads the tokenizer
    with GraphCost() as cost:
        mx.eval(theirs.decode_audio_token_ids(codes))
    return cost, len(frames), None


def _print_ratios(costs: dict) -> None:
    """Ours over mlx-audio's, per piece: computing primitives and syncs a frame."""
    pieces = {
        "the greedy step": ("greedy step alone, through MLX", "mlx-audio's greedy step"),
        "the codec decode (ours in 16-frame chunks)": (
            "codec decode, 16-frame chunk, through MLX",
            "mlx-audio's codec decode, 16 frames at once",
        ),
        "a first chunk of one frame": (
            "codec decode, 1-frame chunk, through MLX",
            "mlx-audio's codec decode, 1 frame",
        ),
    }
    print("ours over mlx-audio's, per frame      computing        syncs")
    for piece, (ours, theirs) in pieces.items():
        (mine, mine_frames, _), (its, its_frames, _) = costs[ours], costs[theirs]
        computing = (mine.computing / mine_frames) / (its.computing / its_frames)
        syncs = f"{mine.syncs / mine_frames:.2f} / {its.syncs / its_frames:.2f}"
        print(f"{piece:44} {computing:5.2f} {syncs:>14}")


def _print_costs(rows) -> dict:
    print(
        f"{'per frame':44} {'primitives':>10} {'computing':>10} {'syncs':>6} "
        f"{'host builds (ms)':>16}"
    )
    for name, (cost, frames, build_ms) in rows.items():
        build = "" if build_ms is None else f"{build_ms:.1f}"
        print(
            f"{name:44} {cost.primitives / frames:10.0f} {cost.computing / frames:10.0f} "
            f"{cost.syncs / frames:6.2f} {build:>16}"
        )
    return rows


def _products_alone_ms(model, rows: int = 1) -> float:
    """The frame step's matrix products for ``rows`` requests stepped
    together, chained as in the step."""
    import mlx.core as mx

    def linears(transformer):
        return [
            (block.attn.c_attn, block.attn.c_proj, block.mlp.fc_in, block.mlp.fc_out)
            for block in transformer.h
        ]

    def through(layers, h, outputs):
        for qkv, projection, inner, outer in layers:
            outputs += [qkv(h), projection(h)]
            h = outer(inner(h))
            outputs.append(h)
        return h

    h = mx.random.normal((1, rows, model.config.gpt2_config.n_embd))
    mx.eval(h)
    started = time.perf_counter()
    outputs: list = []
    h = through(linears(model.transformer), h, outputs)
    outputs.append(h[0] @ model.transformer.wte.weight[:2].T)  # the text head
    local = linears(model.local_transformer)
    for embedding in [*model.audio_embeddings, None]:
        h = through(local, h, outputs)
        if embedding is not None:
            outputs.append(h[0] @ embedding.weight.T)
    mx.eval(outputs)
    return (time.perf_counter() - started) * 1000


def _decode_ms_per_frame(decoder, frames) -> float:
    """Decoding ``frames`` after two chunks of history, through ``decoder``
    (MLX's, or the service's host decoder)."""
    state = decoder.state()

    def decode() -> None:
        decoder.decode_together([(state, frames)])

    for _ in range(2):  # some history, as mid-utterance
        decode()
    started = time.perf_counter()
    decode()
    return (time.perf_counter() - started) / len(frames) * 1000


def _first_chunks_ms(decoder, frame, requests: int) -> float:
    """Decoding the first chunk (one frame) of ``requests`` new requests
    together, through ``decoder`` (MLX's or the host's)."""

    def decode() -> None:
        decoder.decode_together([(decoder.state(), [frame]) for _ in range(requests)])

    decode()  # warm
    started = time.perf_counter()
    decode()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    args = _arguments()
    if args.reference_blas:
        import mlx.core  # noqa: F401 - first: mlx_speech then leaves MLX on it
    import mlx_speech  # noqa: F401 - else first: it brings OpenBLAS under MLX

    # isort: split
    from mlx_audio.tts.utils import load_model

    from mlx_speech.backends import accelerator_for, requested_backend
    from mlx_speech.families import LoadOptions
    from mlx_speech.families.moss_nano.codec import MlxDecoder
    from mlx_speech.families.moss_nano.codec_math import codec_math
    from mlx_speech.families.moss_nano.loop import MlxFrameStep
    from mlx_speech.families.moss_nano.service import FAMILY, load
    from mlx_speech.host_engine.blas import active_blas
    from mlx_speech.host_engine.codec_decoder import HostDecoder
    from mlx_speech.host_engine.frame_step import HostStep

    accelerator, _ = accelerator_for(requested_backend(args.backend), FAMILY)
    service = load(Path(args.checkpoint), LoadOptions(accelerator=accelerator))
    model, codec = service._model, service._codec
    stepper, decoding = service._batch._stepper, service._decodes._decoder
    host = stepper if isinstance(stepper, HostStep) else None
    decoder = decoding if isinstance(decoding, HostDecoder) else None
    # MLX's frame step and decoder as the service runs them where the host's
    # do not apply: with its activations (the decoder in the exact mode)
    mlx = MlxFrameStep(model, service._ops)
    mlx_decoder = MlxDecoder(codec, model.config.n_vq, codec_math(service._ops))
    theirs = load_model(Path(args.checkpoint))
    _their_steady_ms(theirs)  # warm-up
    runs: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        runs.setdefault("mlx-audio steady frame", []).append(_their_steady_ms(theirs))
        step_ms, made = _our_step_ms(model, mlx)
        runs.setdefault("our greedy step, through MLX", []).append(step_ms)
        if host is not None:
            host_ms = _our_step_ms(model, host)[0]
            runs.setdefault("our greedy step, alone on the host", []).append(host_ms)
            greedy_together = f"our greedy step, {args.batch} together, on the host"
            runs.setdefault(greedy_together, []).append(
                _our_step_ms(model, host, jobs=args.batch)[0]
            )
        products_ms = _products_alone_ms(model)
        runs.setdefault("  MLX's matrix products alone", []).append(products_ms)
        batch_ms = _products_alone_ms(model, args.batch)
        runs.setdefault(f"  the same for {args.batch} rows", []).append(batch_ms)
        sampled_ms = _our_step_ms(model, mlx, greedy=False)[0]
        runs.setdefault("our sampled step, through MLX", []).append(sampled_ms)
        if host is not None:
            runs.setdefault("our sampled step, alone on the host", []).append(
                _our_step_ms(model, host, greedy=False)[0]
            )
        together = f"our sampled step, {args.batch} together"
        runs.setdefault(f"{together}, through MLX", []).append(
            _our_step_ms(model, mlx, greedy=False, jobs=args.batch)[0]
        )
        if host is not None:
            runs.setdefault(f"{together}, on the host", []).append(
                _our_step_ms(model, host, greedy=False, jobs=args.batch)[0]
            )
        decode_ms = _decode_ms_per_frame(mlx_decoder, made)
        runs.setdefault("our codec decode per frame, through MLX", []).append(decode_ms)
        if decoder is not None:
            decode_ms = _decode_ms_per_frame(decoder, made)
            runs.setdefault("our codec decode per frame, on the host", []).append(decode_ms)
        for requests in (1, args.batch):
            for place, where in (("through MLX", mlx_decoder), ("on the host", decoder)):
                if where is None:
                    continue
                name = f"first chunks (1 frame) of {requests}, {place}"
                runs.setdefault(name, []).append(_first_chunks_ms(where, made[0], requests))
    best = {name: min(values) for name, values in runs.items()}
    theirs_ms = best["mlx-audio steady frame"]
    print(
        f"checkpoint {args.checkpoint}; backend {service.backend}; BLAS {active_blas()}; "
        f"best of {args.repeats}"
    )
    for name, value in best.items():
        print(f"{name:44} {value:7.1f} ms  {value / theirs_ms:5.2f} of mlx-audio's frame")
    costs = _print_costs(
        {
            "greedy step alone, through MLX": _step_cost(model, mlx, greedy=True),
            "sampled step alone, through MLX": _step_cost(model, mlx, greedy=False),
            f"greedy step, {args.batch} together, through MLX": _step_cost(
                model, mlx, greedy=True, jobs=args.batch
            ),
            f"sampled step, {args.batch} together, through MLX": _step_cost(
                model, mlx, greedy=False, jobs=args.batch
            ),
            "codec decode, 16-frame chunk, through MLX": _decode_cost(mlx_decoder, made),
            "codec decode, 1-frame chunk, through MLX": _decode_cost(mlx_decoder, made[:1]),
            "mlx-audio's greedy step": _their_step_cost(theirs),
            "mlx-audio's codec decode, 16 frames at once": _their_decode_cost(theirs, made),
            "mlx-audio's codec decode, 1 frame": _their_decode_cost(theirs, made[:1]),
        }
    )
    _print_ratios(costs)


if __name__ == "__main__":
    main()
