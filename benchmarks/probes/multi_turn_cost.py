"""What a multi-turn iteration costs against a single-turn one at equal generated tokens (issue 27).

Every contender trains SmolLM2-135M-Instruct with GRPO (32 episodes per iteration: 4 game seeds x 8, minibatch 16,
the text defaults otherwise, the chat template) for the same budget of generated tokens, one after another, each
in its own process (so its peak memory is its own): guess-the-number with one turn of up to 48 tokens (the
single-turn form of the same game: one question, one answer), and with 4 and 8 turns of up to 12 tokens each (the
game answers between turns and its reply tokens join the context). Reported: generated tokens per iteration,
seconds per 1,000 generated tokens over the iterations after the first (which carries the warm-up) and its sampling
and update parts, the policy's tokens per episode, and the peak resident memory.

    python -m benchmarks.probes.multi_turn_cost --token-budget 3000 --threads 2
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.harness import ROOT, iteration_times, machine_header, ppo_command, read_metrics

CONTENDERS = {
    "1 turn x 48 tokens, 1..2": ["--max-new-tokens", "48", "--max-turns", "1", "guess-number", "--high", "2"],
    "4 turns x 12 tokens, 1..15": ["--max-new-tokens", "12", "--max-turns", "4", "guess-number", "--high", "15"],
    "8 turns x 12 tokens, 1..255": ["--max-new-tokens", "12", "--max-turns", "8", "guess-number", "--high", "255"],
}
"""Contender -> its ``ppo train text`` options (the game's range as the horizon experiment scales it)."""


def measure(contender: str, token_budget: int, threads: int, runs_dir: Path) -> dict:
    """Train one contender for ``token_budget`` generated tokens and read its iterations' times and peaks."""
    arguments = [
        "train", "text", "--runs-dir", str(runs_dir), "--run-name", "cost", "--no-progress", "--seed", "1",
        "--total-steps", str(token_budget), "--torch-threads", str(threads), "--prompts-per-iteration", "32",
        "--minibatch-size", "16", "--checkpoint-every", "1000", "--chat-template", *CONTENDERS[contender],
        "grpo", "--group-size", "8",
    ]  # fmt: skip
    with open(runs_dir / "cost.log", "w") as log:
        subprocess.run(ppo_command(*arguments), check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    records = read_metrics(runs_dir / "cost")
    times = iteration_times(records)
    peaks = [r.get(name, 0.0) for r in records for name in ("rollout_peak_gb", "update_peak_gb")]
    return {
        "iterations": len(records),
        "tokens_per_iteration": records[-1]["global_step"] / len(records),
        "seconds_per_1000_tokens": 1000 * times.seconds / times.steps,
        "sampling_per_1000_tokens": 1000 * times.rollout_seconds * times.iterations / times.steps,
        "update_per_1000_tokens": 1000 * times.update_seconds * times.iterations / times.steps,
        "policy_tokens_per_episode": float(np.mean([r["response_length"] for r in records])),
        "peak_gb": max(peaks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--token-budget", type=int, default=3000, help="generated tokens per contender")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (run it on an idle machine)")
    parser.add_argument("--contenders", nargs="+", choices=list(CONTENDERS), default=list(CONTENDERS))
    args = parser.parse_args()
    print(machine_header())
    print(f"SmolLM2-135M-Instruct, GRPO, 32 episodes per iteration, {args.token_budget:,} generated tokens each, "
          f"{args.threads} threads")  # fmt: skip
    print("| contender | iterations | generated tokens per iteration | s per 1,000 tokens (sampling + update) "
          "| policy tokens per episode | peak memory |\n|---|---:|---:|---|---:|---:|")  # fmt: skip
    for contender in args.contenders:
        with tempfile.TemporaryDirectory() as runs:
            r = measure(contender, args.token_budget, args.threads, Path(runs))
        print(
            f"| {contender} | {r['iterations']} | {r['tokens_per_iteration']:.0f} | "
            f"{r['seconds_per_1000_tokens']:.1f} ({r['sampling_per_1000_tokens']:.1f} + "
            f"{r['update_per_1000_tokens']:.1f}) | {r['policy_tokens_per_episode']:.1f} | {r['peak_gb']:.2f} GB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
