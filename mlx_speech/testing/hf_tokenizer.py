"""A tiny byte-level BPE text tokenizer in the Hugging Face layout
(``tokenizer.json`` + ``tokenizer_config.json``), trained here, for the Qwen3-TTS
and VoxCPM2 test checkpoints (both load it with ``AutoTokenizer``)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = [
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
    "今天天气很好，我们去公园散步吧。",
    "0123456789 !?.,;:'\"()-",
]


def build_bpe_tokenizer(directory: Path, vocab_size: int = 400) -> dict[str, int]:
    """Saves the tokenizer into ``directory``; returns the special tokens' ids
    and, under ``"__len__"``, the vocabulary size."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeating "assistant\n" makes it one token: Qwen3-TTS slices its chat
    # template assuming "<|im_start|>assistant\n" is exactly 3 tokens.
    tokenizer.train_from_iterator(CORPUS * 20 + ["assistant\n" * 50], trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        clean_up_tokenization_spaces=False,
    )
    directory.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(directory))
    for template, length in (
        ("<|im_start|>assistant\n", 3),
        ("<|im_end|>\n<|im_start|>assistant\n", 5),
    ):
        ids = wrapped.encode(template, add_special_tokens=False)
        if len(ids) != length:
            raise RuntimeError(f"{template!r} tokenized to {len(ids)} ids, need {length}")
    ids = {token: wrapped.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    ids["__len__"] = len(wrapped)
    return ids
