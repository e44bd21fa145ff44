#!/usr/bin/env bash
# Set up (first time only) and run the whole test suite, slow end-to-end tests included; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
