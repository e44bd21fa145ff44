"""Walker steps/s with 1 and with 2 processes on this machine, in one run: Hopper-v5 at the paper's settings.

One process collects the paper's batch of 2,048 steps per iteration (``ppo train``, compiled step, 1 torch thread);
two processes under torchrun collect 1,024 each (the same batch, the same 32 global minibatches of 64 per epoch),
each single-threaded. Steps/s over the iterations after the first (compilation and warm-up), and the split of an
iteration between collecting and updating.

    python -m benchmarks.probes.scaling --iterations 12
    python -m benchmarks.probes.scaling --iterations 12 --minibatch-size 512   # 4 gradient steps per epoch, not 32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import ROOT, iteration_times, machine_header, ppo_command, read_metrics

BATCH = 2048


def timed_run(runs: Path, name: str, processes: int, iterations: int, minibatch_size: int) -> dict:
    """Mean seconds per iteration (after the first), collection and update included, of a run of ``processes``."""
    command = ppo_command("train", "--num-steps", str(BATCH // processes), "--total-steps", str(BATCH * iterations),
                          "--minibatch-size", str(minibatch_size), "--checkpoint-every", "1000", "--no-progress",
                          "--runs-dir", str(runs), "--run-name", name, processes=processes)  # fmt: skip
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    times = iteration_times(read_metrics(runs / name))
    rollout, update = times.rollout_seconds, times.update_seconds
    return {"steps_per_second": BATCH / (rollout + update), "rollout_seconds": rollout, "update_seconds": update}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=12, help="iterations per run (the first is not timed)")
    parser.add_argument("--minibatch-size", type=int, default=64, help="global minibatch (paper: 64)")
    args = parser.parse_args()
    print(machine_header())
    with tempfile.TemporaryDirectory() as folder:
        results = {n: timed_run(Path(folder), f"p{n}", n, args.iterations, args.minibatch_size) for n in (1, 2)}
    for n, result in results.items():
        print(
            f"{n} process{'es' if n > 1 else ''}: {result['steps_per_second']:,.0f} steps/s "
            f"(per iteration: collect {result['rollout_seconds']:.3f} s, update {result['update_seconds']:.3f} s)"
        )
    print(f"ratio 2 processes / 1: {results[2]['steps_per_second'] / results[1]['steps_per_second']:.2f}x")
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
