"""Build a tiny byte-level BPE tokenizer (Qwen2-style chat specials) and save it
with transformers' PreTrainedTokenizerFast.save_pretrained (tokenizer.json,
tokenizer_config.json, special_tokens_map.json / chat template if any).

Requirements from mlx-audio qwen3_tts (qwen3_tts.py _prepare_generation_inputs):
  "<|im_start|>assistant\n"            must encode to exactly 3 ids
  "<|im_end|>\n<|im_start|>assistant\n" must encode to exactly 5 ids
so "<|im_start|>", "<|im_end|>" are special tokens and "assistant", "\n" are
single tokens. Byte-level pre-tokenization guarantees any text is encodable.
"""

from pathlib import Path
from typing import Dict, List

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# Qwen2 / Qwen3-TTS style special tokens (names as in Qwen tokenizers).
DEFAULT_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
]

CORPUS = [
    "assistant user system",
    "Hello world. Hello, how are you today? This is a tiny test of speech.",
    "The quick brown fox jumps over the lazy dog.",
    "A cheerful young female voice with high pitch and energetic tone.",
    "Very happy and excited. Speak slowly and calmly.",
    "This is what my voice sounds like.",
    "0123456789 !?.,;:'\"()-",
]


def build_tokenizer(out_dir: Path, vocab_size: int = 400,
                    specials: List[str] = DEFAULT_SPECIALS) -> Dict[str, int]:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                 use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = CORPUS * 20 + ["assistant\n" * 50, "user\n" * 50]
    tok.train_from_iterator(corpus, trainer=trainer)

    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=specials[1:],
        clean_up_tokenization_spaces=False,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out_dir))

    # Sanity checks the qwen3_tts prompt slicing relies on.
    a = hf.encode("<|im_start|>assistant\n", add_special_tokens=False)
    b = hf.encode("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    assert len(a) == 3, (a, hf.convert_ids_to_tokens(a))
    assert len(b) == 5, (b, hf.convert_ids_to_tokens(b))
    ids = {s: hf.convert_tokens_to_ids(s) for s in specials}
    ids["__len__"] = len(hf)
    return ids


if __name__ == "__main__":
    import sys

    print(build_tokenizer(Path(sys.argv[1] if len(sys.argv) > 1 else "./_tok")))
