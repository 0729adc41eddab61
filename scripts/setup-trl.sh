#!/usr/bin/env bash
# Create ./.venv-trl: TRL 1.16 beside the project, for the TRL binding's
# tests, its kill/resume run and `frontier bench --only trl`.
#
# Apart from ./.venv so that the project's own dependency set stays lean:
# TRL brings transformers, accelerate and datasets. torch==2.13.0 goes
# first (these machines resolve it to the local CPU build; once it is
# present, TRL's `torch>=` range installs nothing more). The project goes in
# with --no-deps plus what its torch binding needs.
#
# Idempotent: the heavy steps run once (a stamp file records them).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FRONTIER_TRL_VENV:-.venv-trl}"
TORCH=torch==2.13.0
TRL=trl==1.16.0
STAMP="$VENV/.frontier-trl-installed"
py="$VENV/bin/python"
if [ ! -x "$py" ]; then
    python3 -m venv "$VENV"
    printf '*\n' > "$VENV/.gitignore"
fi
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$TORCH $TRL" ]; then
    "$py" -m pip install --quiet --upgrade pip
    "$py" -m pip install --quiet "$TORCH"
    "$py" -m pip install --quiet "$TRL" "torchdata>=0.10" "attrs>=23.1" "tqdm>=4.66" \
        "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100"
    echo "$TORCH $TRL" > "$STAMP"
fi
# Under a lock on the project folder: scripts/test.sh runs the setups side by
# side, and editable builds of one tree share its build/ folder.
flock . "$py" -m pip install --quiet --no-deps -e .
