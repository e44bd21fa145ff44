#!/usr/bin/env bash
# The GPU path in one script of at most 8 minutes (benchmarks/probes/gpu_check.py): tests marked cuda, Hopper iterations
# with 1 and 64 environments, SmolLM2 text iterations in fp32 and bf16 with peak memory, 2-process torchrun smokes
# (walker; text with --fsdp) where there are 2+ GPUs; one table, printed and written to build/gpu_check.md. Without
# CUDA the GPU parts are "skipped" rows.
#   bash benchmarks/probes/gpu_check.sh                      # installs .venv with scripts/setup.sh (needs the index)
#   bash benchmarks/probes/gpu_check.sh --offline WHEELHOUSE # no index: the machine's python3 and torch, plus the
#                                                            # wheels of gpu_wheelhouse.sh, installed into build/
set -euo pipefail
if [ "${1:-}" = "--offline" ]; then
    if [ $# -ne 2 ] || [ ! -d "$2" ]; then
        echo "usage: $0 --offline WHEELHOUSE (the folder gpu_wheelhouse.sh made, copied here)" >&2
        exit 2
    fi
    WHEELHOUSE="$(realpath "$2")"
    cd "$(dirname "$0")/../.."
    PYTHON="${PYTHON:-python3}"
    # GPU_CHECK_TARGET: where the wheels are installed (default build/gpu-check-site, git-ignored)
    TARGET="$(realpath -m "${GPU_CHECK_TARGET:-build/gpu-check-site}")"
    PYTHON="$PYTHON" bash benchmarks/probes/gpu_offline_install.sh "$WHEELHOUSE" "$TARGET"
    export PYTHONPATH="$PWD:$TARGET${PYTHONPATH:+:$PYTHONPATH}"
    exec timeout 480 "$PYTHON" -m benchmarks.probes.gpu_check --smollm2-tokenizer "$WHEELHOUSE/smollm2-tokenizer"
fi
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
exec timeout 480 .venv/bin/python -m benchmarks.probes.gpu_check
