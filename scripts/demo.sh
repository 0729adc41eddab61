#!/usr/bin/env bash
# The main job: set up ./.venv, then run the kill/resume A/B on the embedded
# default workload (the seed's validation run). Extra arguments go to
# `frontier simulate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,dev
.venv/bin/frontier simulate "$@"
