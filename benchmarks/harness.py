"""What every benchmark shares: the machine header it prints first, the ``ppo`` child processes it starts (a command
of this interpreter, optionally under torchrun), the children that are the benchmark itself measuring one contender
(it prints one JSON line), a run's ``metrics.jsonl`` and its iteration times, and named ``ppo train text`` runs that
are skipped when finished and resumed when stopped.

Benchmarks run as modules from the repository root (``python -m benchmarks.probes.machine``), so they import this
module as ``benchmarks.harness``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.runs.machine import describe_machine, machine_line
from envs.mujoco import raw_stepping_speed

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: where the children run, so ``-m benchmarks...`` and ``-m agents`` resolve."""


class RunError(RuntimeError):
    """A run left nothing to measure; the message says what to look at."""


def machine_header() -> str:
    """``machine: <processor, cores, kernels, versions>`` and ``raw Hopper-v5 stepping: N steps/s``: every benchmark
    prints this first, so a figure can be scaled to another machine (training speed follows raw stepping speed)."""
    speed = raw_stepping_speed("Hopper-v5")
    return f"machine: {machine_line(describe_machine())}\nraw Hopper-v5 stepping (random actions): {speed:,.0f} steps/s"


def ppo_command(*arguments: str, processes: int = 1) -> list[str]:
    """``python -m agents ARGUMENTS`` with this interpreter; under ``torchrun --standalone`` for 2+ processes."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
    return [*(launcher if processes > 1 else [sys.executable]), "-m", "agents", *arguments]


def child_result(command: list[str], environment: dict[str, str] | None = None) -> dict:
    """Run ``command`` from the repository root and read the JSON object on the last line of its output (the
    benchmark measuring one contender in a fresh process, so its peak memory and compilation are its own)."""
    output = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT, env=environment).stdout
    return json.loads(output.strip().splitlines()[-1])


def module_command(module: str, *arguments: str, python: str = sys.executable) -> list[str]:
    """``python -m MODULE ARGUMENTS``: a benchmark (``__spec__.name``) started as its own child."""
    return [python, "-m", module, *arguments]


def read_metrics(run_dir: Path) -> list[dict]:
    """A run's ``metrics.jsonl``, one dict per iteration; a ``RunError`` if the run logged none."""
    records = read_jsonl(Path(run_dir) / METRICS_FILE)
    if not records:
        raise RunError(f"{run_dir}/{METRICS_FILE} holds no iteration; the run failed before its first, see its log")
    return records


@dataclass(frozen=True)
class IterationTimes:
    """A run's iterations after the first (which carries compilation and warm-up), timed."""

    iterations: int
    """How many iterations were timed."""
    rollout_seconds: float
    """Mean seconds of an iteration's collection (text: sampling and scoring)."""
    update_seconds: float
    """Mean seconds of an iteration's update."""
    seconds: float
    """Total seconds of those iterations, collection and update."""
    steps: int
    """The steps those iterations took (MuJoCo: transitions; text: generated tokens)."""

    @property
    def seconds_per_iteration(self) -> float:
        return self.seconds / self.iterations

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


def iteration_times(records: list[dict]) -> IterationTimes:
    """The times of the trained iterations after the first of a run's metrics (a record without an update, such
    as the evaluation before training at iteration 0, is not an iteration to time)."""
    trained = [r for r in records if "update_seconds" in r]
    timed = trained[1:]
    if not timed:
        raise RunError("a run of one iteration has nothing timed (the first is warm-up); give it 2 or more")
    return IterationTimes(
        iterations=len(timed),
        rollout_seconds=sum(r["rollout_seconds"] for r in timed) / len(timed),
        update_seconds=sum(r["update_seconds"] for r in timed) / len(timed),
        seconds=sum(r["rollout_seconds"] + r["update_seconds"] for r in timed),
        steps=trained[-1]["global_step"] - trained[0]["global_step"],
    )


def train_text_run(runs_dir: Path, name: str, arguments: list[str]) -> bool:
    """Run ``ppo train text --runs-dir RUNS_DIR --run-name NAME --no-progress ARGUMENTS`` with its output in
    ``RUNS_DIR/NAME.log``; resume it from its checkpoint (with its saved config) if it was stopped, start it again
    if it stopped before its first checkpoint; do nothing if it has finished. Returns whether it ran from the start
    (so its wall-clock time is the whole run's)."""
    run_dir = runs_dir / name
    if (run_dir / "policy" / "config.json").exists():
        return False
    resuming = (run_dir / "checkpoints" / "latest.pt").exists()
    if not resuming and run_dir.exists():  # stopped before its first checkpoint: nothing to resume, start again
        shutil.rmtree(run_dir)
    if resuming:
        arguments = ["--resume", str(run_dir), "--no-progress"]
    else:
        arguments = ["--runs-dir", str(runs_dir), "--run-name", name, "--no-progress", *arguments]
    with open(runs_dir / f"{name}.log", "a" if resuming else "w") as log:
        subprocess.run(ppo_command("train", "text", *arguments), check=True, cwd=ROOT, stdout=log,
                       stderr=subprocess.STDOUT)  # fmt: skip
    return not resuming


def ppo_eval_once(arguments: list[str], output: Path) -> str:
    """Run ``ppo eval ARGUMENTS`` on one torch thread and keep its output in ``output``; if that file exists, read it
    instead (an evaluation of a finished run does not change)."""
    if not output.exists():
        result = subprocess.run(ppo_command("eval", *arguments), check=True, cwd=ROOT, capture_output=True, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        output.write_text(result.stdout)
    return output.read_text()
