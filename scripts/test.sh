#!/usr/bin/env bash
# The test command: set up ./.venv (the project) and ./.venv-vllm (the CPU
# build of vLLM, scripts/setup-vllm.sh), then lint, type-check, run the
# tests, and run the real-vLLM tests in .venv-vllm, where FRONTIER_REQUIRE_VLLM=1
# turns a missing vllm into a failure instead of a skip. Arguments go to the
# main pytest run; FRONTIER_VLLM_TESTS=0 leaves out the vLLM venv and tests.
# .venv-vllm also holds verifiers: the verifiers kill test on real vLLM runs
# there, with FRONTIER_REQUIRE_VERIFIERS=1 too.
# The TRL binding's tests run the same way in ./.venv-trl (scripts/setup-trl.sh,
# FRONTIER_REQUIRE_TRL=1); FRONTIER_TRL_TESTS=0 leaves them out. The verifiers
# binding's tests run in ./.venv-agents (scripts/setup-agents.sh,
# FRONTIER_REQUIRE_VERIFIERS=1); FRONTIER_VERIFIERS_TESTS=0 leaves them out. The docs site
# (mkdocs.yml) is built strict before the tests: a broken link, snippet or nav
# entry fails the run. The s3 extra installs obstore and SeaweedFS (`weed`):
# the store and checkpoint tests start that server on 127.0.0.1, and
# FRONTIER_REQUIRE_S3=1 makes a server that cannot start a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
vllm_tests="${FRONTIER_VLLM_TESTS:-1}"
trl_tests="${FRONTIER_TRL_TESTS:-1}"
verifiers_tests="${FRONTIER_VERIFIERS_TESTS:-1}"
scratch=$(mktemp -d -t frontier-test-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$scratch"' EXIT
# The stage venvs are set up side by side, in the background, while ./.venv
# is set up and the lint, type check and docs build run (installs mostly wait
# on the registry and the disk): about five minutes less than one after the
# other. Each writes its own log, printed when it fails; none waits unbounded
# (a hung install is stopped by the deadline below).
setups=()
for stage in vllm trl agents; do
    case $stage in
        vllm) wanted=$vllm_tests ;;
        trl) wanted=$trl_tests ;;
        agents) wanted=$verifiers_tests ;;
    esac
    [ "$wanted" != 0 ] || continue
    timeout 1800 bash "scripts/setup-$stage.sh" > "$scratch/setup-$stage.log" 2>&1 &
    setups+=("$stage:$!")
done
bash scripts/setup.sh torch,dev,ray,docs,s3
.venv/bin/ruff check src tests
.venv/bin/mypy --strict src/frontier_core src/adapters
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$scratch/site"
for setup in "${setups[@]}"; do
    stage=${setup%%:*}
    if wait "${setup#*:}"; then
        grep -v '^WARNING: Location' "$scratch/setup-$stage.log" || true
    else
        status=$?
        cat "$scratch/setup-$stage.log" >&2
        echo "test.sh: scripts/setup-$stage.sh failed (exit $status; 124 is its 30-minute deadline)" >&2
        exit "$status"
    fi
done
# The object-store tests start a real SeaweedFS server (the s3 extra's
# `weed`) on loopback: here one that cannot start fails the run, not a skip.
# --durations: the slowest tests in the log, where CI time is won back.
FRONTIER_REQUIRE_S3=1 .venv/bin/python -m pytest --durations=30 "$@"
if [ "$vllm_tests" != 0 ]; then
    FRONTIER_REQUIRE_VLLM=1 FRONTIER_REQUIRE_VERIFIERS=1 .venv-vllm/bin/python -m pytest \
        -p no:cacheprovider \
        tests/adapters/rollout/test_vllm.py tests/adapters/rollout/test_vllm_kill.py \
        tests/adapters/rollout/test_vllm_samples.py tests/adapters/rollout/test_vllm_logprobs.py \
        tests/adapters/rollout/test_vllm_example.py \
        tests/adapters/agents/test_verifiers_vllm_kill.py
fi
if [ "$trl_tests" != 0 ]; then
    # One intra-op thread: two on these shared cores made GRPO steps ~50x slower.
    OMP_NUM_THREADS=1 FRONTIER_REQUIRE_TRL=1 .venv-trl/bin/python -m pytest -p no:cacheprovider \
        tests/adapters/trl
fi
if [ "$verifiers_tests" != 0 ]; then
    # A real verifiers rollout, its harness prepared by `uv` from the venv's bin/.
    FRONTIER_REQUIRE_VERIFIERS=1 .venv-agents/bin/python -m pytest -p no:cacheprovider \
        tests/adapters/agents/test_verifiers_kill.py
fi
