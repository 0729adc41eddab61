#!/usr/bin/env bash
# The test command: set up ./.venv, then lint, type-check and run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,dev,ray
.venv/bin/ruff check src tests
.venv/bin/mypy --strict src/frontier_core src/adapters
.venv/bin/python -m pytest "$@"
