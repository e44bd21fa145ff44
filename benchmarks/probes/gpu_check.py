"""The GPU path in one run: CUDA tests, walker and text iteration times, peak memory, 2-process smokes; one table.

Run by ``benchmarks/probes/gpu_check.sh`` (which bounds it to 8 minutes). On a machine without CUDA it says so and
exits 0. Each timing is the mean of the iterations after the first (which includes compilation and warm-up).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.harness import ROOT, iteration_times, machine_header, ppo_command, read_metrics


def run(command: list[str], timeout: float) -> tuple[int, str, float]:
    """Exit status, the last line of output and seconds taken of ``command``, run from the repository root."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s", time.perf_counter() - start
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return done.returncode, lines[-1] if lines else "", time.perf_counter() - start


def walker_iteration(runs: Path, name: str, num_envs: int, num_steps: int) -> str:
    """Seconds per Hopper iteration (batch num_envs x num_steps) on the GPU, and steps/s."""
    batch = num_envs * num_steps
    command = ppo_command("train", "--device", "cuda", "--num-envs", str(num_envs), "--num-steps", str(num_steps),
                          "--total-steps", str(batch * 4), "--no-progress", "--runs-dir", str(runs),
                          "--run-name", name)  # fmt: skip
    status, last, _ = run(command, timeout=150)
    if status != 0:
        return f"failed: {last}"
    seconds = iteration_times(read_metrics(runs / name)).seconds_per_iteration
    return f"{seconds:.3f} s/iteration, {batch / seconds:,.0f} steps/s"


def text_iteration(runs: Path, dtype: str) -> str:
    """Seconds per SmolLM2-135M PPO iteration (16 prompts x 24 tokens) and peak GPU memory, in this process."""
    from agents.runs.config import RunConfig
    from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig
    from agents.text.train import train_text
    from envs.text.tasks import SentimentTaskConfig

    torch.cuda.reset_peak_memory_stats()
    config = TextTrainConfig(
        text=TextEnvConfig(task=SentimentTaskConfig(reward_model="lexicon"), dtype=dtype),
        ppo=replace(TEXT_PPO_DEFAULTS, total_steps=16 * 24 * 3),
        run=RunConfig(runs_dir=runs, run_name=f"text-{dtype}", device="cuda", progress=False, torch_threads=0),
    )
    seconds = iteration_times(read_metrics(train_text(config))).seconds_per_iteration
    return f"{seconds:.2f} s/iteration, peak {torch.cuda.max_memory_allocated() / 1024**3:.2f} GiB"


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device on this machine; nothing to check")
        return 0
    print(machine_header())
    rows: list[tuple[str, str]] = [("device", f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")]
    status, last, seconds = run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests"], timeout=150)
    rows.append(("tests marked cuda", f"{'ok' if status == 0 else 'FAILED'}: {last} ({seconds:.0f} s)"))
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        rows.append(("Hopper, 1 env x 2048 steps", walker_iteration(runs, "one", 1, 2048)))
        rows.append(("Hopper, 64 envs x 32 steps", walker_iteration(runs, "many", 64, 32)))
        for dtype in ("fp32", "bf16"):
            try:
                rows.append((f"SmolLM2-135M text, {dtype}", text_iteration(runs, dtype)))
            except Exception as error:  # noqa: BLE001 - the table reports any failure and goes on
                rows.append((f"SmolLM2-135M text, {dtype}", f"failed: {type(error).__name__}: {error}"))
        smokes = {
            "torchrun, 2 processes x 1 GPU": ["train", "--device", "cuda", "--num-steps", "1024",
                                              "--total-steps", "8192", "--no-progress", "--runs-dir", str(runs),
                                              "--run-name", "two"],
            "torchrun text --fsdp, 2 processes x 1 GPU": ["train", "text", "--fsdp", "--device", "cuda",
                                                          "--total-steps", "384", "--no-progress", "--runs-dir",
                                                          str(runs), "--run-name", "fsdp", "sentiment",
                                                          "--reward-model", "lexicon"],
        }  # fmt: skip
        for name, arguments in smokes.items():
            if torch.cuda.device_count() < 2:
                rows.append((name, "skipped: one GPU"))
                continue
            status, last, seconds = run(ppo_command(*arguments, processes=2), timeout=150)
            rows.append((name, f"{'ok' if status == 0 else 'FAILED'}: {last} ({seconds:.0f} s)"))
    width = max(len(name) for name, _ in rows)
    print(f"| {'check':<{width}} | result |\n|{'-' * (width + 2)}|---|")
    for name, result in rows:
        print(f"| {name:<{width}} | {result} |")
    return 0 if all("FAILED" not in result and not result.startswith("failed") for _, result in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
