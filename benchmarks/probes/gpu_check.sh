#!/usr/bin/env bash
# The GPU path in one script of at most 8 minutes (benchmarks/probes/gpu_check.py): tests marked cuda, Hopper iterations
# with 1 and 64 environments, SmolLM2 text iterations in fp32 and bf16 with peak memory, 2-process torchrun smokes
# (walker; text with --fsdp) where there are 2+ GPUs; one table. Without CUDA it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
exec timeout 480 .venv/bin/python -m benchmarks.probes.gpu_check
