#!/usr/bin/env bash
# Create ./.venv and install the project with the given extras (default: torch,dev,ray).
# With the torch extra, torch==2.13.0 goes first: on these machines it resolves
# to a local CPU build, and once it is present the project's `torch>=` range
# installs nothing more. Without it (`bash scripts/setup.sh dev`) no torch is
# installed: the suite then skips the torch tests and `frontier bench` the
# torch sections.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-torch,dev,ray}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
case ",${extras}," in
    *,torch,*) .venv/bin/python -m pip install --quiet torch==2.13.0 ;;
esac
# Under a lock on the project folder (see setup-vllm.sh).
flock . .venv/bin/python -m pip install --quiet -e ".[${extras}]"
