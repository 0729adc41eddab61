#!/usr/bin/env bash
# The main job: set up ./.venv, then
#   1. `frontier simulate`: the kill/resume A/B on the seed's validation
#      workload (a second), legacy live cursor against frontier_core;
#   2. `frontier simulate --waste`: the headline, the tokens each kill makes
#      a run generate again, per durability level side by side (legacy
#      cursor, coverage only, siblings at checkpoints, journal, journal with
#      token progress), on one workload and kill schedule (seconds);
#   3. `frontier demo`: a real async GRPO loop (tiny torch model, CPU engine)
#      SIGKILLed several times per mode and resumed, audited side by side,
#      with the reward curve (about two minutes on 2 cores);
#   4. `frontier demo --journal`: the same loop sample by sample, killed also
#      inside journal appends, group commits and compactions, resumed with
#      coverage only and with the journal: the tokens generated again,
#      measured (about three minutes).
# Arguments go to both demos. Exit status is non-zero if frontier_core
# loses or duplicates a prompt or a sample (1), or a worker crashes or
# passes its deadline (2: each life has FRONTIER_LIFE_DEADLINE seconds, 600
# by default, then is killed whole).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,dev
.venv/bin/frontier simulate
echo
.venv/bin/frontier simulate --waste
echo
.venv/bin/frontier demo "$@"
echo
.venv/bin/frontier demo --journal "$@"
