#!/bin/bash
# Rebuild + smoke-test every tiny checkpoint (≈15 s total on 2 CPU cores).
set -e
PY=${PYTHON:-python}
cd "$(dirname "$0")"
F='PyTorch was not\|instantiate a model of type'
$PY build_qwen3_tts.py --kind custom_voice 2>&1 | grep -v "$F"
$PY build_qwen3_tts.py --kind custom_voice --no-build --stream 2>&1 | grep -v "$F"
$PY build_qwen3_tts.py --kind voice_design 2>&1 | grep -v "$F"
$PY build_qwen3_tts.py --kind base 2>&1 | grep -v "$F"
$PY build_qwen3_tts.py --kind base --with-encoder --out ./ckpt_base_icl 2>&1 | grep -v "$F"
for c in ckpt_custom_voice ckpt_base ckpt_base_icl; do $PY verify_qwen_weights.py $c 2>&1 | grep problems; done
$PY build_voxcpm2.py 2>&1 | grep -v "$F"
$PY check_determinism.py 2>&1 | grep -v "$F\|Loaded speech"
