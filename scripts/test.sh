#!/usr/bin/env bash
# Set up (first time only), run the architecture and style checks, then the whole test suite, slow end-to-end tests
# included; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh
exec .venv/bin/python -m pytest "$@"
