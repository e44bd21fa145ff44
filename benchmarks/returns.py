"""Final returns over seeds: train each (env, objective, seed) with ``ppo train`` and tabulate.

The score of a run is the mean undiscounted return of its last 100 training episodes at the end
of training (as CleanRL and SB3 report); the table gives mean +- std over seeds.

    python benchmarks/returns.py --envs Hopper-v5 --objectives clip --seeds 1 2 3 --output docs/returns_hopper.md
    python benchmarks/returns.py --table-only --runs-dir runs/returns   # re-tabulate finished runs
    python benchmarks/returns.py --nproc 2 --seeds 1 2 3 4 5           # 2 processes, each half the horizon
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from machine import machine_header


def run_name(env_id: str, objective: str, seed: int, total_steps: int, nproc: int) -> str:
    processes = f"__np{nproc}" if nproc > 1 else ""
    return f"{env_id}__{objective}__s{seed}__{total_steps}{processes}"


def final_score(run_dir: Path) -> tuple[float, int, float] | None:
    """(last-100-episode return, steps, mean steps/s) of a finished run, or None if it has not finished."""
    metrics = run_dir / "metrics.jsonl"
    config = run_dir / "config.json"
    if not metrics.exists() or not config.exists():
        return None
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    total = json.loads(config.read_text())["ppo"]["total_steps"]
    if not records or records[-1]["global_step"] + records[-1]["global_step"] // records[-1]["iteration"] <= total:
        return None
    return (
        records[-1]["episode_return"],
        records[-1]["global_step"],
        float(np.mean([r["sps"] for r in records[1:]] or [0.0])),
    )


def table(runs_dir: Path) -> str:
    scores: dict[tuple[str, str], list[float]] = {}
    speeds: dict[tuple[str, str], list[float]] = {}
    steps: dict[tuple[str, str], int] = {}
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        score = final_score(run_dir)
        if score is None:
            continue
        env_id, objective = run_dir.name.split("__")[:2]
        scores.setdefault((env_id, objective), []).append(score[0])
        speeds.setdefault((env_id, objective), []).append(score[2])
        steps[(env_id, objective)] = score[1]
    lines = [
        "| env | objective | steps | seeds | return (last 100 episodes) | per seed | steps/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (env_id, objective), values in sorted(scores.items()):
        per_seed = ", ".join(f"{v:.0f}" for v in values)
        lines.append(
            f"| {env_id} | {objective} | {steps[(env_id, objective)]:,} | {len(values)} "
            f"| {np.mean(values):.0f} ± {np.std(values):.0f} | {per_seed} "
            f"| {np.mean(speeds[(env_id, objective)]):.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["Hopper-v5", "Walker2d-v5", "HalfCheetah-v5"])
    parser.add_argument("--objectives", nargs="+", default=["clip", "penalty"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/returns"))
    parser.add_argument("--output", type=Path, help="also write the markdown table here")
    parser.add_argument(
        "--nproc", type=int, default=1, help="processes per run (torchrun); each steps 2,048/N steps per iteration"
    )
    parser.add_argument("--table-only", action="store_true", help="only tabulate runs already in --runs-dir")
    args = parser.parse_args()
    print(machine_header())
    if not args.table_only:
        for env_id in args.envs:
            for objective in args.objectives:
                for seed in args.seeds:
                    name = run_name(env_id, objective, seed, args.total_steps, args.nproc)
                    run_dir = args.runs_dir / name
                    if final_score(run_dir) is not None:
                        print(f"{name}: done already")
                        continue
                    command = [
                        sys.executable,
                        "-m",
                        "agents",
                        "train",
                        "--env-id",
                        env_id,
                        "--seed",
                        str(seed),
                        "--total-steps",
                        str(args.total_steps),
                        "--runs-dir",
                        str(args.runs_dir),
                        "--no-progress",
                    ]
                    if args.nproc > 1:  # the paper's 2,048 steps per iteration, split over the processes
                        command += ["--nproc", str(args.nproc), "--num-steps", str(2048 // args.nproc)]
                    if (run_dir / "checkpoints" / "latest.pt").exists():
                        command = [sys.executable, "-m", "agents", "train", "--resume", str(run_dir), "--no-progress"]
                    else:
                        command += ["--run-name", name, objective]
                    started = time.time()
                    subprocess.run(command, check=True)
                    print(f"{name}: {final_score(run_dir)[0]:.0f} in {time.time() - started:.0f} s", flush=True)
    markdown = table(args.runs_dir)
    print(markdown)
    if args.output:
        args.output.write_text(markdown + "\n")


if __name__ == "__main__":
    main()
