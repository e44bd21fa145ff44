"""Walker PPO with several environments on threads of one process, against the paper's one environment on one
thread (issue 29): Hopper-v5, PPO-Clip, the paper's settings, whole ``ppo train`` processes run one at a time.

The layouts (``--layouts``), each ``envs x steps`` on ``T`` stepping threads:

- ``1x2048``: the paper's batch from one env, Gymnasium's env on the learner's thread (today's default);
- ``2x1024``: the same batch from 2 envs stepped by ``mujoco.batch`` on 2 threads (``--num-envs 2 --num-steps 1024``);
- ``4x512``, ``8x256``, ``16x128``, ``64x32``: more envs, the same batch.

Speed (``--iterations K``): steps/s of the iterations after the first (collection and update, as ``sps``), the
split between them, the whole process's wall seconds for K iterations, and each layout's ratio to ``1x2048``.

Time to score (``--score 2500 --seeds 1 2 3 4 5``): the process's wall clock (``elapsed_seconds``: from its start,
imports and compilation included) at the end of the first iteration whose mean return over the last 100 episodes
reaches the score; per seed, and the median. A run is stopped once it scores, or at ``--max-steps`` (then it
counts as not reaching the score). Figures need a quiet machine: run nothing else meanwhile.

    python -m benchmarks.probes.walker_threads --iterations 30
    python -m benchmarks.probes.walker_threads --score 2500 --seeds 1 2 3 4 5 --layouts 1x2048 2x1024
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agents.runs.logger import METRICS_FILE, read_jsonl
from benchmarks.harness import ROOT, iteration_times, machine_header, ppo_command, read_metrics

POLL_SECONDS = 0.2  # how often a time-to-score run's metrics are read


def layout_sizes(layout: str) -> tuple[int, int]:
    """``(envs, steps per env)`` of a layout ``ENVSxSTEPS``."""
    envs, steps = (int(part) for part in layout.split("x"))
    return envs, steps


def layout_options(layout: str) -> list[str]:
    """``ppo train`` options of a layout ``ENVSxSTEPS``: one env keeps Gymnasium's env, more step on 2 threads."""
    envs, steps = layout_sizes(layout)
    threads = ["--env-threads", "2"] if envs > 1 else []
    return ["--env-id", "Hopper-v5", "--num-envs", str(envs), "--num-steps", str(steps), *threads]


def speed(runs: Path, layout: str, iterations: int) -> dict:
    """Steps/s after the first iteration, the phases' mean seconds, and the whole process's wall seconds."""
    envs, steps = layout_sizes(layout)
    command = ppo_command("train", *layout_options(layout), "--total-steps", str(envs * steps * iterations),
                          "--checkpoint-every", "1000", "--no-progress", "--runs-dir", str(runs),
                          "--run-name", layout)  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
    wall = time.perf_counter() - started
    times = iteration_times(read_metrics(runs / layout))
    return {"sps": times.steps_per_second, "rollout": times.rollout_seconds, "update": times.update_seconds,
            "wall": wall}  # fmt: skip


def time_to_score(runs: Path, layout: str, seed: int, score: float, max_steps: int) -> tuple[float | None, int]:
    """(``elapsed_seconds`` at the first iteration whose ``episode_return`` reaches ``score``, or None; its step)."""
    name = f"{layout}-s{seed}"
    command = ppo_command("train", *layout_options(layout), "--seed", str(seed), "--total-steps", str(max_steps),
                          "--checkpoint-every", "100000", "--no-progress", "--runs-dir", str(runs),
                          "--run-name", name)  # fmt: skip
    metrics = runs / name / METRICS_FILE
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        while True:
            finished = process.poll() is not None
            records = read_jsonl(metrics)
            hit = next((r for r in records if r["episode_return"] >= score), None)
            if hit is not None or finished:
                process.terminate()
                break
            time.sleep(POLL_SECONDS)
    last_step = records[-1]["global_step"] if records else 0
    return (hit["elapsed_seconds"], hit["global_step"]) if hit else (None, last_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", nargs="+", default=["1x2048", "2x1024", "4x512", "8x256", "16x128", "64x32"])
    parser.add_argument("--iterations", type=int, default=0, help="speed: iterations per run (0: skip)")
    parser.add_argument("--score", type=float, default=0.0, help="time to score: the return to reach (0: skip)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--max-steps", type=int, default=1_000_000, help="time to score: give up after this many")
    args = parser.parse_args()
    print(machine_header())
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        if args.iterations:
            print(f"\nspeed, {args.iterations} iterations of 2,048 steps (steps/s after the first)")
            print("| layout | steps/s | ratio | collect s/iter | update s/iter | process wall s |")
            print("|---|---:|---:|---:|---:|---:|")
            base = None
            for layout in args.layouts:
                result = speed(runs, layout, args.iterations)
                base = base or result["sps"]
                print(f"| {layout} | {result['sps']:,.0f} | {result['sps'] / base:.2f}x | {result['rollout']:.3f} "
                      f"| {result['update']:.3f} | {result['wall']:.1f} |")  # fmt: skip
        if args.score:
            print(f"\ntime to a last-100-episode mean return of {args.score:,.0f} (process wall seconds; its step)")
            print("| layout | " + " | ".join(f"seed {s}" for s in args.seeds) + " | median |")
            print("|---|" + "---:|" * (len(args.seeds) + 1))
            for layout in args.layouts:
                hits = [time_to_score(runs, layout, seed, args.score, args.max_steps) for seed in args.seeds]
                cells = [f"{t:.1f} ({step:,})" if t is not None else f"not by {step:,}" for t, step in hits]
                times = [t if t is not None else float("inf") for t, _ in hits]
                print(f"| {layout} | " + " | ".join(cells) + f" | {statistics.median(times):.1f} |")


if __name__ == "__main__":
    main()
