#!/usr/bin/env bash
# Install every wheel of WHEELHOUSE into TARGET with no package index and no dependency resolution (the wheelhouse
# holds each one needed; gpu_wheelhouse.sh makes it), for $PYTHON (default python3: the machine's own, with its torch).
# Put TARGET and the repository root on PYTHONPATH afterwards; gpu_check.sh --offline does both.
#   usage: bash benchmarks/probes/gpu_offline_install.sh WHEELHOUSE TARGET
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 WHEELHOUSE TARGET (a folder of wheels from gpu_wheelhouse.sh; the folder to install them into)" >&2
    exit 2
fi
WHEELHOUSE="$1"
TARGET="$2"
PYTHON="${PYTHON:-python3}"
shopt -s nullglob
WHEELS=("$WHEELHOUSE"/*.whl)
if [ ${#WHEELS[@]} -eq 0 ]; then
    echo "$WHEELHOUSE holds no .whl file; make it with: bash benchmarks/probes/gpu_wheelhouse.sh" >&2
    exit 1
fi
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "$PYTHON has no pip; set PYTHON to an interpreter that has it (and the machine's CUDA torch)" >&2
    exit 1
fi
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --upgrade --target "$TARGET" "${WHEELS[@]}"
echo "installed ${#WHEELS[@]} wheels from $WHEELHOUSE into $TARGET"
