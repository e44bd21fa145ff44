"""What dropping the critic saves on SmolLM2-135M: PPO-Clip with a value head on the policy's last hidden state, with a
separate critic LM, and GRPO (no critic), on the same batch.

Every contender: the default model (fp32, CPU), the sentiment task with the lexicon reward, 8 completions of 32 new
tokens per iteration (GRPO: one prompt sampled 8 times), 4 epochs, minibatch 8, ``--threads`` torch threads, each in
its own process (for its peak memory), one after another. Reported: seconds per iteration (first excluded), its
rollout and update parts, peak resident memory, and the floats the optimiser updates and keeps (trainable numbers
and Adam's two moments per number).

    python -m benchmarks.probes.critic_free --iterations 3
"""

from __future__ import annotations

import argparse
import json

from benchmarks.harness import child_result, machine_header, module_command
from benchmarks.peers.text_throughput import ppo_iterations

CONTENDERS = {
    "clip, value head on the policy": ["clip"],
    "clip, separate critic LM": ["clip", "--separate-critic"],
    "grpo, no critic (G = 8)": ["grpo"],
}


def measure(contender: str, iterations: int, threads: int) -> dict:
    from agents.core.objectives import GRPO

    arguments = CONTENDERS[contender]
    objective = GRPO() if arguments[0] == "grpo" else None
    result = ppo_iterations(iterations, threads, objective=objective, separate_critic="--separate-critic" in arguments)
    # the numbers, and Adam's first and second moments of each
    return {**result, "optimiser_floats_millions": 3 * result["trainable_millions"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3, help="iterations per contender (the first is not timed)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=list(CONTENDERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args.iterations, args.threads)))
        return
    print(machine_header())
    print(f"SmolLM2-135M, 8 x 32 tokens, 4 epochs, minibatch 8, {args.threads} threads, {args.iterations - 1} timed")
    print("| contender | s/iteration | rollout | update | trainable (M) | optimiser floats (M) | peak memory |")
    print("|---|---|---|---|---|---|---|")
    for contender in CONTENDERS:
        child = ["--only", contender, "--iterations", str(args.iterations), "--threads", str(args.threads)]
        r = child_result(module_command(__spec__.name, *child))
        print(
            f"| {contender} | {r['seconds_per_iteration']:.1f} | {r['rollout_seconds']:.1f} | {r['update_seconds']:.1f}"
            f" | {r['trainable_millions']:.1f} | {r['optimiser_floats_millions']:.1f} | {r['peak_rss_gb']:.2f} GB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
