"""Speak a chat model's answer while it is being written, in one process.

    pip install mlx-lm 'mlx-speech-server[play]'
    python examples/speak_while_chatting.py "Tell me about the moon." --play

mlx-lm writes the answer token by token; ``tts.stream_text`` speaks each
sentence as soon as it is complete, while the next ones are still written.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mlx_lm import load as load_chat_model
from mlx_lm import stream_generate

import mlx_speech
from mlx_speech.cli.playback import Player


def answer_deltas(model, tokenizer, question: str, max_tokens: int):
    """The chat model's answer, piece by piece, echoed as it is written."""
    prompt = question
    if tokenizer.chat_template:
        messages = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    for response in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens):
        print(response.text, end="", flush=True)
        yield response.text
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--chat-model", default="mlx-community/Qwen3-0.6B-4bit")
    parser.add_argument("--speech-model", default=mlx_speech.DEFAULT_MODEL)
    parser.add_argument("--voice", default=None, help="saved voice name or clip to clone")
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--play", action="store_true", help="play through the sound card")
    parser.add_argument("-o", "--output", default=None, help="also write the audio here")
    args = parser.parse_args()

    model, tokenizer = load_chat_model(args.chat_model)
    tts = mlx_speech.load(args.speech_model)
    player = Player(tts.sample_rate) if args.play else None
    started = time.perf_counter()
    first_audio = None
    heard = []
    deltas = answer_deltas(model, tokenizer, args.question, args.max_tokens)
    for chunk in tts.stream_text(deltas, voice=args.voice):
        first_audio = first_audio or time.perf_counter() - started
        heard.append(chunk.samples)
        if player is not None:
            player.write(chunk.samples)
    if player is not None:
        player.close()
    if first_audio is not None:
        print(f"first audio {first_audio * 1000:.0f} ms after the question was asked")
    if args.output and heard:
        mlx_speech.Audio(np.concatenate(heard), tts.sample_rate).write(args.output)
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
