#!/usr/bin/env bash
# Set up (first time only) and train PPO-Clip on Hopper-v5 with the paper's settings; extra arguments go to `ppo train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ppo train "$@"
