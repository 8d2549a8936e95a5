"""Build a TINY random-weight Qwen3-TTS checkpoint in the on-disk layout that
mlx_audio.tts.utils.load_model() (mlx-audio 0.6.2) loads, then load it and
generate a few frames.

Usage:
  python build_qwen3_tts.py --kind custom_voice --out ./ckpt_cv
  python build_qwen3_tts.py --kind base         --out ./ckpt_base
  python build_qwen3_tts.py --kind voice_design --out ./ckpt_vd

Layout written:
  <out>/config.json                 model_type=qwen3_tts, tts_model_type, talker_config, ...
  <out>/model.safetensors           talker.* (+ speaker_encoder.* for base)
  <out>/generation_config.json      sampling defaults (optional; read by post_load_hook)
  <out>/tokenizer.json, tokenizer_config.json   (AutoTokenizer.from_pretrained(<out>))
  <out>/speech_tokenizer/config.json
  <out>/speech_tokenizer/model.safetensors      decoder.* (+ encoder_model.* if --with-encoder)
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

sys.path.insert(0, str(Path(__file__).parent))
from tiny_tokenizer import build_tokenizer  # noqa: E402

# ----------------------------------------------------------------------------
# Tiny dims.  Constraints discovered (see FINDINGS.md):
#  * talker vocab_size must be codebook_size + 1024: generate() suppresses ids
#    [vocab_size-1024, vocab_size) except EOS, so every codec special id must
#    live in that window and every audio code must be < vocab_size-1024.
#  * every Conv1d with kernel_size==1 must have in_channels > 64, otherwise the
#    check_array_shape_qwen3() heuristic (qwen3_tts.py:123) mis-transposes the
#    already-MLX-layout weight in sanitize().  In the codec decoder that means
#    codebook_dim//2 > 64 and every DecoderBlock out_dim > 64; in the speaker
#    encoder (base) enc_channels, enc_se_channels, enc_attention_channels > 64.
#  * mrope_section sums to head_dim//2.
# ----------------------------------------------------------------------------
CB = 32            # codec codebook size (audio codes 0..CB-1)
NQ = 4             # num_code_groups == codec num_quantizers
TALKER_V = CB + 1024


def make_config(kind: str, text_vocab: int, tok_ids: dict, hidden=32, head_dim=16,
                speaker_enc_dim=None) -> dict:
    spk = {"vivian": CB + 200, "ryan": CB + 201, "dylan": CB + 202}
    talker = {
        "vocab_size": TALKER_V,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "rope_scaling": {"interleaved": True, "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8],
                         "rope_type": "default"},
        "num_code_groups": NQ,
        "text_hidden_size": hidden,
        "text_vocab_size": text_vocab,
        "codec_pad_id": CB + 100,
        "codec_bos_id": CB + 101,
        "codec_eos_token_id": CB + 102,
        "codec_think_id": CB + 106,
        "codec_nothink_id": CB + 107,
        "codec_think_bos_id": CB + 108,
        "codec_think_eos_id": CB + 109,
        "codec_language_id": {"english": CB + 150, "chinese": CB + 151,
                              "beijing_dialect": CB + 152},
        "code_predictor_config": {
            "vocab_size": CB,
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": head_dim,
            "max_position_embeddings": 64,
            "num_code_groups": NQ,
        },
    }
    if kind == "custom_voice":
        # keys MUST be lowercase: lookup is config.spk_id[speaker.lower()]
        talker["spk_id"] = spk
        talker["spk_is_dialect"] = {"vivian": False, "ryan": False, "dylan": "beijing_dialect"}
    cfg = {
        "model_type": "qwen3_tts",
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "tts_model_type": kind,          # "base" | "custom_voice" | "voice_design"
        "tts_model_size": "1b7",         # "0b6" drops `instruct` in generate_custom_voice
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "im_start_token_id": tok_ids["<|im_start|>"],
        "im_end_token_id": tok_ids["<|im_end|>"],
        "tts_pad_token_id": tok_ids["<tts_pad>"],
        "tts_bos_token_id": tok_ids["<tts_text_bos>"],
        "tts_eos_token_id": tok_ids["<tts_text_eod>"],
        "sample_rate": 24000,
        "talker_config": talker,
    }
    if kind == "base":
        cfg["speaker_encoder_config"] = {
            "mel_dim": 128,                     # hard-coded num_mels=128 in mel_spectrogram call
            "enc_dim": speaker_enc_dim or hidden,  # must == talker hidden_size
            "enc_channels": [72, 72, 72, 72, 216],
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": 72,
            "enc_res2net_scale": 4,
            "enc_se_channels": 72,
            "sample_rate": 24000,
        }
    return cfg


def make_speech_tokenizer_config(with_encoder: bool) -> dict:
    upsample_rates = [4]          # one DecoderBlock: 144 -> 72 channels (>64)
    upsampling_ratios = [2, 2]
    total = 1
    for r in upsample_rates + upsampling_ratios:
        total *= r
    dec = {
        "codebook_size": CB,
        "codebook_dim": 136,          # //2 = 68 > 64 (kernel-1 output_proj)
        "latent_dim": 16,
        "decoder_dim": 144,
        "hidden_size": 16,
        "intermediate_size": 32,
        "head_dim": 8,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "num_quantizers": NQ,
        "num_semantic_quantizers": 1,
        "sliding_window": 72,
        "upsample_rates": upsample_rates,
        "upsampling_ratios": upsampling_ratios,
        "max_position_embeddings": 8000,
    }
    cfg = {
        "model_type": "qwen3_tts_tokenizer_12hz",
        "decoder_config": dec,
        "encoder_valid_num_quantizers": NQ,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": total,   # samples per codec frame (real: 1920)
        "encode_downsample_rate": 1920,
    }
    if with_encoder:
        # Mimi-style encoder; real rate: 24000/prod(ratios)=25Hz, stride 2 -> 12.5Hz
        cfg["encoder_config"] = {
            "frame_rate": 12.5,
            "audio_channels": 1,
            "codebook_dim": 72,          # > 64: kernel-1 output_proj heuristic
            "codebook_size": CB,
            "compress": 1,              # residual inner dim = dim/compress must be > 64
            "dilation_growth_rate": 2,
            "head_dim": 8,
            "hidden_size": 72,           # kernel-1 convs need in_channels > 64
            "intermediate_size": 64,
            "kernel_size": 7,
            "last_kernel_size": 3,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_filters": 72,
            "num_hidden_layers": 1,
            "num_quantizers": NQ,
            "num_residual_layers": 1,
            "num_semantic_quantizers": 1,
            "residual_kernel_size": 3,
            "sampling_rate": 24000,
            "sliding_window": 250,
            "upsampling_ratios": [40, 24],  # prod 960 -> 25 Hz; fewer layers = fewer doublings of num_filters
            "use_causal_conv": True,
            "use_conv_shortcut": False,
            "vector_quantization_hidden_dimension": 16,
        }
    return cfg


def build(kind: str, out: Path, with_encoder: bool, never_eos: bool = True):
    from mlx_audio.tts.models.qwen3_tts.config import (
        ModelConfig, Qwen3TTSTokenizerConfig)
    from mlx_audio.tts.models.qwen3_tts.qwen3_tts import Model
    from mlx_audio.tts.models.qwen3_tts.speech_tokenizer import Qwen3TTSSpeechTokenizer

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    mx.random.seed(0)

    tok_ids = build_tokenizer(out)            # tokenizer.json + tokenizer_config.json
    cfg = make_config(kind, text_vocab=tok_ids["__len__"], tok_ids=tok_ids)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))

    model = Model(ModelConfig.from_dict(cfg))
    weights = dict(tree_flatten(model.parameters()))
    # small-magnitude random weights keep activations tame
    weights = {k: (v * 0.5 if v.ndim >= 2 else v) for k, v in weights.items()}
    if never_eos:
        # Make EOS (practically) never sampled so runs are exactly max_tokens long:
        # zero the EOS row of codec_head and sharpen the audio-code rows.
        w = weights["talker.codec_head.weight"]
        eos = cfg["talker_config"]["codec_eos_token_id"]
        rows = mx.arange(w.shape[0])[:, None]
        w = mx.where(rows == eos, 0.0, w)
        w = mx.where(rows < CB, w * 20.0, w)
        weights["talker.codec_head.weight"] = w
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})

    (out / "generation_config.json").write_text(json.dumps({
        "do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0,
        "repetition_penalty": 1.05, "max_new_tokens": 2048,
        "subtalker_dosample": True, "subtalker_temperature": 0.9,
        "subtalker_top_k": 50, "subtalker_top_p": 1.0,
    }, indent=2))

    st_dir = out / "speech_tokenizer"
    st_dir.mkdir()
    st_cfg_dict = make_speech_tokenizer_config(with_encoder)
    (st_dir / "config.json").write_text(json.dumps(st_cfg_dict, indent=2))
    st_cfg = Qwen3TTSTokenizerConfig(
        encoder_config=st_cfg_dict.get("encoder_config"),
        decoder_config=st_cfg_dict["decoder_config"])
    st = Qwen3TTSSpeechTokenizer(st_cfg)
    st_w = dict(tree_flatten(st.parameters()))
    # Encoder codebooks: keep cluster_usage positive so embedding = sum/usage is sane
    st_w = {k: (mx.abs(v) + 1.0 if k.endswith("cluster_usage") else v) for k, v in st_w.items()}
    # Buffers computed by update_in_place() are not needed on disk
    st_w = {k: v for k, v in st_w.items() if not (k.endswith("._embedding") or k.endswith("._c2")
                                                   or k.endswith("._initialized"))}
    mx.save_safetensors(str(st_dir / "model.safetensors"), st_w, metadata={"format": "mlx"})
    nbytes = sum((p.stat().st_size for p in out.rglob("*") if p.is_file()))
    print(f"built {kind} at {out} ({nbytes/1e6:.2f} MB on disk)")
    return cfg


def run(kind: str, out: Path, max_tokens: int, stream: bool):
    from mlx_audio.tts.utils import load_model

    t = time.time()
    model = load_model(out)     # strict=True for the main weights
    print(f"loaded {type(model).__module__}.{type(model).__name__} in {time.time()-t:.2f}s; "
          f"speakers={model.get_supported_speakers()} langs={model.get_supported_languages()} "
          f"tokenizer={type(model.tokenizer).__name__} speech_tokenizer={type(model.speech_tokenizer).__name__} "
          f"sr={model.sample_rate}")
    mx.random.seed(1234)
    t = time.time()
    if kind == "custom_voice":
        gen = model.generate_custom_voice(text="Hello world.", speaker="Vivian", language="English",
                                          instruct="Very happy.", max_tokens=max_tokens, stream=stream,
                                          streaming_interval=0.16)
    elif kind == "voice_design":
        gen = model.generate_voice_design(text="Hello world.", instruct="A cheerful young female voice.",
                                          language="English", max_tokens=max_tokens, stream=stream,
                                          streaming_interval=0.16)
    else:
        import numpy as np
        ref = mx.array(np.random.RandomState(0).randn(24000).astype(np.float32) * 0.1)
        if model.speech_tokenizer.has_encoder:
            gen = model.generate(text="Hello world.", ref_audio=ref, ref_text="This is my voice.",
                                 max_tokens=max_tokens, stream=stream, streaming_interval=0.16)
        else:  # x-vector only (speaker encoder), no ICL
            gen = model.generate(text="Hello world.", ref_audio=ref, max_tokens=max_tokens,
                                 stream=stream, streaming_interval=0.16)
    results = list(gen)
    for r in results:
        print(f"  chunk: audio.shape={tuple(r.audio.shape)} sr={r.sample_rate} tokens={r.token_count} "
              f"streaming={getattr(r, 'is_streaming_chunk', False)} final={getattr(r, 'is_final_chunk', False)}")
    total = sum(r.audio.shape[0] for r in results)
    print(f"generated {len(results)} result(s), {total} samples @ {results[0].sample_rate} Hz "
          f"in {time.time()-t:.2f}s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="custom_voice", choices=["custom_voice", "base", "voice_design"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-tokens", type=int, default=6)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--with-encoder", action="store_true", help="codec encoder for Base ICL cloning")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--random-eos", action="store_true", help="keep random EOS row (may stop after 1 frame)")
    a = ap.parse_args()
    out = Path(a.out or f"./ckpt_{a.kind}")
    if not a.no_build:
        build(a.kind, out, a.with_encoder, never_eos=not a.random_eos)
    run(a.kind, out, a.max_tokens, a.stream)
