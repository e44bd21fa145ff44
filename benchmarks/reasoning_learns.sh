#!/usr/bin/env bash
# PPO-Clip on the default verifiable task (issue #12): SmolLM2-135M-Instruct on reasoning-gym's syllogism
# (invalid_ratio 0.5, `Answer:` prompts), seeds 1 and 2, held-out accuracy on all 200 held-out questions every
# 3 iterations. Every run: 64 prompts per iteration, 8 new tokens (the answer is the first line), minibatches of
# 16, the text defaults otherwise, a budget of 16,000 generated tokens; one torch thread per run, so the two
# seeds run side by side on 2 cores (SEEDS=1 and SEEDS=2). Usage: [SEEDS="1 2"] bash THIS [RUNS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-runs/reasoning-learns}
mkdir -p "$runs"
for seed in ${SEEDS:-1 2}; do
  name="syllogism__clip__s${seed}"
  if [ -f "$runs/$name/policy/config.json" ]; then continue; fi
  args=(--seed "$seed" --runs-dir "$runs" --run-name "$name" --no-progress)
  if [ -f "$runs/$name/checkpoints/latest.pt" ]; then args=(--resume "$runs/$name" --no-progress); else
    args+=(--prompts-per-iteration 64 --max-new-tokens 8 --minibatch-size 16 --total-steps 16000 --torch-threads 1
      --eval-every 3 --eval-prompts 200 --checkpoint-every 3 reasoning clip); fi
  echo "$(date +%T) $name"
  .venv/bin/python -m agents train text "${args[@]}" > "$runs/$name.log" 2>&1 || { tail -3 "$runs/$name.log"; exit 1; }
done
if [ -z "${SEEDS:-}" ]; then .venv/bin/python -m agents report "$runs" --out "$runs/report"; fi
