#!/usr/bin/env bash
# Set up (first time only), run the architecture and style checks, then the whole test suite, slow end-to-end tests
# included, spread over up to 4 worker processes (pytest-xdist: one per core, 2 on a 2-core machine); extra arguments
# go to pytest (-n 0 runs everything in this one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh
exec .venv/bin/python -m pytest --numprocesses auto --maxprocesses 4 "$@"
