"""Same mx.random.seed -> same audio? (both families draw from the global MLX RNG)"""
from pathlib import Path
import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_audio.tts.utils import load_model

q = load_model(Path("./ckpt_custom_voice"))
def qrun(seed):
    mx.random.seed(seed)
    return list(q.generate(text="Hello world.", voice="ryan", max_tokens=5))[0].audio
a, b, c = qrun(7), qrun(7), qrun(8)
print("qwen same-seed equal:", mx.array_equal(a, b).item(), " diff-seed equal:", a.shape == c.shape and mx.array_equal(a, c).item())

v = load_model(Path("./ckpt_voxcpm2"))
saved = mx.load("./ckpt_voxcpm2/model.safetensors")
params = dict(tree_flatten(v.parameters()))
bad = [k for k, x in saved.items() if k not in params or params[k].shape != x.shape or not mx.allclose(params[k], x).item()]
print("voxcpm2 weights round-trip problems:", bad[:10], "of", len(saved))
def vrun(seed):
    mx.random.seed(seed)
    return list(v.generate("Hello world.", max_tokens=3, inference_timesteps=3))[0].audio
a, b, c = vrun(7), vrun(7), vrun(8)
print("voxcpm2 same-seed equal:", mx.array_equal(a, b).item(), " diff-seed equal:", a.shape == c.shape and mx.array_equal(a, c).item())
