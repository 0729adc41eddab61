#!/usr/bin/env bash
# Create ./.venv-agents: verifiers 0.4.0 (the `agents` extra) beside the
# project, for the verifiers binding's tests and its kill/resume run.
#
# Apart from ./.venv so that the project's own dependency set stays lean:
# verifiers brings openai, anthropic, mcp, transformers and ~100 packages.
# torch==2.13.0 goes first (the CPU engine the tests serve; these machines
# resolve it to the local CPU build). `uv` is pinned and lives in the venv's
# bin/: verifiers' harness program is prepared with `uv sync --script`, so
# the tests put this bin/ on PATH. The project goes in with --no-deps plus
# what its binding needs.
#
# Idempotent: the heavy steps run once (a stamp file records them).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FRONTIER_AGENTS_VENV:-.venv-agents}"
TORCH=torch==2.13.0
VERIFIERS=verifiers==0.4.0
UV=uv==0.13.9
STAMP="$VENV/.frontier-agents-installed"
py="$VENV/bin/python"
if [ ! -x "$py" ]; then
    python3 -m venv "$VENV"
    printf '*\n' > "$VENV/.gitignore"
fi
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$TORCH $VERIFIERS $UV" ]; then
    "$py" -m pip install --quiet --upgrade pip
    "$py" -m pip install --quiet "$TORCH"
    "$py" -m pip install --quiet "$VERIFIERS" "$UV" "attrs>=23.1" \
        "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100"
    echo "$TORCH $VERIFIERS $UV" > "$STAMP"
fi
# Under a lock on the project folder: scripts/test.sh runs the setups side by
# side, and editable builds of one tree share its build/ folder.
flock . "$py" -m pip install --quiet --no-deps -e .
