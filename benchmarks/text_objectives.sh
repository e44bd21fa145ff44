#!/usr/bin/env bash
# The critic against group baselines on text (issue #11): PPO-Clip, PPO-Penalty, GRPO, Dr. GRPO and DAPO fine-tune
# SmolLM2-135M-Instruct on one-digit addition (arithmetic, operands 0-9, '+': 60 train and 40 held-out questions)
# at an equal budget of generated tokens, seeds 1 and 2, with held-out accuracy every 2 iterations; then one report.
# Every run: 64 completions per iteration (64 prompts, or 8 prompts x 8 for the group methods), 16 new tokens,
# minibatches of 16, the text defaults otherwise; one torch thread per run, so the two seeds run side by side on
# 2 cores (SEEDS=1 and SEEDS=2), about an hour each. Usage: [SEEDS="1 2"] bash THIS [RUNS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-runs/text-objectives}
mkdir -p "$runs"
for seed in ${SEEDS:-1 2}; do
  for objective in clip penalty grpo dr-grpo dapo; do
    name="arithmetic__${objective}__s${seed}"
    if [ -f "$runs/$name/policy/config.json" ]; then continue; fi
    args=(--seed "$seed" --runs-dir "$runs" --run-name "$name" --no-progress)
    if [ -f "$runs/$name/checkpoints/latest.pt" ]; then args=(--resume "$runs/$name" --no-progress); else
      args+=(--prompts-per-iteration 64 --max-new-tokens 16 --minibatch-size 16 --total-steps 4000 --torch-threads 1
        --eval-every 2 --eval-prompts 40 --checkpoint-every 2
        arithmetic --operand-max 9 --operations + --eval-prompts 40 "$objective"); fi
    echo "$(date +%T) $name"
    .venv/bin/python -m agents train text "${args[@]}" > "$runs/$name.log" 2>&1 || { tail -3 "$runs/$name.log"; exit 1; }
  done
done
if [ -z "${SEEDS:-}" ]; then .venv/bin/python -m agents report "$runs" --out "$runs/report"; fi
