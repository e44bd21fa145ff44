"""Text PPO on 2 cores: 1 process with 2 torch threads against 2 processes (torchrun) with 1 thread each, with
whole copies of the model (data parallelism) and with the model sharded (--fsdp, FSDP2).

SmolLM2-135M-Instruct, full fine-tuning, the default text settings (16 prompts x 24 new tokens per iteration,
4 epochs, minibatch 4) on the sentiment task with the lexicon reward (no reward head to train). Generated
tokens per second of whole PPO iterations after the first, the peak resident memory of the largest
process of each run (each configuration runs in a fresh child, so the peaks do not mix), and the peaks of
its two phases, sampling and scoring the rollout and the update (the runs' ``rollout_peak_gb`` and
``update_peak_gb``, largest over processes and timed iterations). The last configuration runs --fsdp with
glibc's mmap threshold fixed at 1 MiB (``MALLOC_MMAP_THRESHOLD_``), so freed buffers go back to the system
at once instead of staying in the heap.

    python -m benchmarks.probes.text_scaling --iterations 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
from pathlib import Path

from benchmarks.harness import (
    ROOT,
    child_result,
    iteration_times,
    machine_header,
    module_command,
    ppo_command,
    read_metrics,
)

MMAP_EVERY_BUFFER = {"MALLOC_MMAP_THRESHOLD_": str(1024**2)}  # glibc mallopt(3): allocations >= 1 MiB are mmapped
CONFIGURATIONS = {
    "1 process x 2 threads": (1, 2, False, {}),
    "2 processes x 1 thread": (2, 1, False, {}),
    "2 processes x 1 thread, --fsdp": (2, 1, True, {}),
    "2 processes x 1 thread, --fsdp, mmap threshold 1 MiB": (2, 1, True, MMAP_EVERY_BUFFER),
}
"""name -> (processes, threads per process, FSDP2, extra environment)."""


def measure(processes: int, threads: int, fsdp: bool, environment: dict, iterations: int) -> dict:
    """Run the configuration as a child (torchrun for 2 processes) and read its metrics and peak memory."""
    with tempfile.TemporaryDirectory() as runs:
        command = ppo_command("train", "text", "--total-steps", str(16 * 24 * iterations), "--torch-threads",
                              str(threads), "--no-progress", "--checkpoint-every", "1000", "--runs-dir", runs,
                              "--run-name", "bench", *(["--fsdp"] if fsdp else []), "sentiment", "--reward-model",
                              "lexicon", processes=processes)  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), **environment}
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True, env=env)
        records = read_metrics(Path(runs) / "bench")
    timed, times = records[1:], iteration_times(records)
    return {
        "seconds_per_iteration": times.seconds_per_iteration,
        "generated_tokens_per_second": times.steps_per_second,
        "peak_rss_gb_largest_process": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2,
        "rollout_peak_gb": max(r["rollout_peak_gb"] for r in timed),
        "update_peak_gb": max(r["update_peak_gb"] for r in timed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3, help="PPO iterations per run (the first is not timed)")
    parser.add_argument("--only", choices=list(CONFIGURATIONS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only is not None:
        print(json.dumps(measure(*CONFIGURATIONS[args.only], args.iterations)))
        return
    print(machine_header())
    results = {}
    for name in CONFIGURATIONS:
        results[name] = result = child_result(module_command(__spec__.name, "--only", name, "--iterations",
                                                             str(args.iterations)))  # fmt: skip
        print(
            f"{name}: {result['seconds_per_iteration']:.1f} s per iteration, "
            f"{result['generated_tokens_per_second']:.1f} generated tokens/s of PPO, "
            f"peak {result['peak_rss_gb_largest_process']:.1f} GB in the largest process "
            f"(rollout {result['rollout_peak_gb']:.2f} GB, update {result['update_peak_gb']:.2f} GB)"
        )
    one = results["1 process x 2 threads"]["generated_tokens_per_second"]
    for name in list(CONFIGURATIONS)[1:]:
        print(f"ratio {name} / 1 process: {results[name]['generated_tokens_per_second'] / one:.2f}x")


if __name__ == "__main__":
    main()
