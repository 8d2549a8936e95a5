"""Check that every weight saved in <ckpt>/speech_tokenizer/model.safetensors ended up
in the loaded speech tokenizer with the same shape+values (its loader uses strict=False
and a shape heuristic, so silent mis-transposes are possible). Usage: verify_qwen_weights.py <ckpt>"""
import sys
from pathlib import Path
import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_audio.tts.utils import load_model

ck = Path(sys.argv[1])
m = load_model(ck)
for name, mod, f in [("main", m, ck / "model.safetensors"),
                     ("speech_tokenizer", m.speech_tokenizer, ck / "speech_tokenizer" / "model.safetensors")]:
    saved = mx.load(str(f))
    params = dict(tree_flatten(mod.parameters()))
    bad = []
    for k, v in saved.items():
        p = params.get(k)
        if p is None:
            bad.append((k, "missing in module"))
        elif p.shape != v.shape:
            bad.append((k, f"shape {v.shape} -> {p.shape}"))
        elif not mx.allclose(p.astype(mx.float32), v.astype(mx.float32)).item():
            bad.append((k, "values differ"))
    print(f"{name}: {len(saved)} saved tensors, {len(bad)} problems")
    for b in bad[:20]:
        print("   ", b)
