"""Text PPO on 2 cores: 1 process with 2 torch threads against 2 processes (torchrun) with 1 thread each.

SmolLM2-135M-Instruct, full fine-tuning, the default text settings (16 prompts x 24 new tokens per iteration,
4 epochs, minibatch 4) on the sentiment task with the lexicon reward (no reward head to train). Generated
tokens per second of whole PPO iterations after the first, and the peak resident memory of the largest
process of each run (each configuration runs in a fresh child, so the peaks do not mix).

    python benchmarks/text_scaling.py --iterations 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import machine_header

ROOT = Path(__file__).resolve().parents[1]


def measure(processes: int, threads: int, iterations: int) -> dict:
    """Run the configuration as a child (torchrun for 2 processes) and read its metrics and peak memory."""
    with tempfile.TemporaryDirectory() as runs:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
        command = [*(launcher if processes > 1 else [sys.executable]), "-m", "agents", "train", "text",
                   "--total-steps", str(16 * 24 * iterations), "--torch-threads", str(threads), "--no-progress",
                   "--checkpoint-every", "1000", "--runs-dir", runs, "--run-name", "bench",
                   "sentiment", "--reward-model", "lexicon"]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True, env=env)
        records = [json.loads(line) for line in (Path(runs) / "bench" / "metrics.jsonl").read_text().splitlines()]
    timed = records[1:]
    tokens = sum(r["global_step"] - p["global_step"] for p, r in zip(records, records[1:]))
    seconds = sum(r["rollout_seconds"] + r["update_seconds"] for r in timed)
    return {
        "seconds_per_iteration": seconds / len(timed),
        "generated_tokens_per_second": tokens / seconds,
        "peak_rss_gb_largest_process": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3, help="PPO iterations per run (the first is not timed)")
    parser.add_argument("--only", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only is not None:
        print(json.dumps(measure(args.only, 2 // args.only, args.iterations)))
        return
    print(machine_header())
    results = {}
    for processes in (1, 2):
        child = [sys.executable, __file__, "--only", str(processes), "--iterations", str(args.iterations)]
        output = subprocess.run(child, check=True, capture_output=True, text=True).stdout
        results[processes] = json.loads(output.strip().splitlines()[-1])
        result = results[processes]
        print(
            f"{processes} process(es) x {2 // processes} thread(s): {result['seconds_per_iteration']:.1f} s per "
            f"iteration, {result['generated_tokens_per_second']:.1f} generated tokens/s of PPO, "
            f"peak {result['peak_rss_gb_largest_process']:.1f} GB in the largest process"
        )
    ratio = results[2]["generated_tokens_per_second"] / results[1]["generated_tokens_per_second"]
    print(f"ratio 2 processes / 1: {ratio:.2f}x")


if __name__ == "__main__":
    main()
