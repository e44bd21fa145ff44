"""Start, resume or skip one named ``ppo train text`` run of a benchmark: the experiments of issue #12 are many
runs of a few minutes to an hour, and any of them may be stopped and started again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def train_text_run(runs_dir: Path, name: str, arguments: list[str]) -> bool:
    """Run ``ppo train text --runs-dir RUNS_DIR --run-name NAME --no-progress ARGUMENTS`` with its output in
    ``RUNS_DIR/NAME.log``; resume it from its checkpoint (with its saved config) if it was stopped; do nothing if
    it has finished. Returns whether it ran from the start (so its wall-clock time is the whole run's)."""
    run_dir = runs_dir / name
    if (run_dir / "policy" / "config.json").exists():
        return False
    resuming = (run_dir / "checkpoints" / "latest.pt").exists()
    if resuming:
        arguments = ["--resume", str(run_dir), "--no-progress"]
    else:
        arguments = ["--runs-dir", str(runs_dir), "--run-name", name, "--no-progress", *arguments]
    with open(runs_dir / f"{name}.log", "a" if resuming else "w") as log:
        subprocess.run([sys.executable, "-m", "agents", "train", "text", *arguments], check=True, cwd=ROOT, stdout=log,
                       stderr=subprocess.STDOUT)  # fmt: skip
    return not resuming


def ppo_eval_once(arguments: list[str], output: Path) -> str:
    """Run ``ppo eval ARGUMENTS`` on one torch thread and keep its output in ``output``; if that file exists, read it
    instead (an evaluation of a finished run does not change)."""
    if not output.exists():
        result = subprocess.run([sys.executable, "-m", "agents", "eval", *arguments], check=True, cwd=ROOT,
                                capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        output.write_text(result.stdout)
    return output.read_text()
