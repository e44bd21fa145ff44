#!/usr/bin/env bash
# Architecture and style checks: import-linter contracts (pyproject.toml), ruff lint and ruff format; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-cache
