"""The horizon axis of issue 27: does the critic start to pay on text as the number of turns grows, as it does on
the walkers? Guess-the-number with turn limits of 1, 2, 4 and 8, the range scaled so that every limit is solvable
(bisection names any number of 1..2^T - 1 in T guesses; one turn gets 1..2, the smallest range the game takes),
PPO-Clip (critic, token-level GAE over the policy's tokens) against GRPO (one group advantage per episode) at equal
generated tokens, each horizon a ``ppo compare`` grid. The table: held-out success at the start and the end, the
gap, and the diagnostics that say why: the critic's explained variance per turn and each turn's advantage spread.
The figure puts the gap beside the walker result (PPO-Clip against GRPO on InvertedPendulum and Hopper, read from
that grid's ``final_scores.csv``).

``ppo compare`` skips finished cells and resumes interrupted ones (``--checkpoint-every 1``), so the experiment
spreads over sittings: run it again and it continues. Each cell's result is also kept in a committed record
(``docs/reports/horizon/cells.jsonl``, one JSON object per cell): run folders live on one machine, the record
outlives them, and the table and figure read the record with any newer run folder's result laid over it.
``--dry-run`` prints the commands and runs nothing.

    python -m benchmarks.experiments.horizon --turns 1 2 4 8 --seeds 1 2            # run (hours on 2 cores)
    python -m benchmarks.experiments.horizon --stage table --plot docs/reports/horizon/horizon.png
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import subprocess
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import numpy as np

from agents.runs.machine import MachineRecord, read_machines
from benchmarks.harness import ROOT, RunError, iteration_times, machine_header, ppo_command, read_metrics

CELL = re.compile(r"^text-guess-number__(?P<objective>.+)__s(?P<seed>\d+)$")
"""A text cell's folder in a guess-the-number grid: ``text-guess-number__<objective label>__s<seed>``."""
CRITIC, GROUP = "clip-0.2", "grpo-8"
"""The two objectives' labels in the grids (``ppo compare --objectives clip grpo``)."""


def range_for(turns: int) -> int:
    """The largest number of the game with ``turns`` turns: 2^T - 1, which bisection always names in T guesses; at
    least 2, the smallest range the game accepts (one turn is then a coin flip for the best policy)."""
    return max(2, 2**turns - 1)


def grid_name(turns: int) -> str:
    return f"horizon-{turns}-turns"


def compare_command(args: argparse.Namespace, turns: int) -> list[str]:
    return ppo_command(
        "compare", "--runs-dir", str(args.runs_dir), "--name", grid_name(turns), "--envs", "text:guess-number",
        "--objectives", "clip", "grpo", "--seeds", *map(str, args.seeds), "--text-total-steps", str(args.token_budget),
        "--prompts-per-iteration", str(args.episodes), "--max-new-tokens", str(args.turn_tokens),
        "--eval-every", "2", "--eval-prompts", str(args.eval_episodes), "--task-options", f"high={range_for(turns)}",
        "--train-options", f"max_turns={turns}", "chat_template=True", "--torch-threads", str(args.threads),
        "--checkpoint-every", "1", "--jobs", str(args.jobs),
    )  # fmt: skip


@dataclass(frozen=True)
class CellResult:
    """One finished or partial run of a horizon grid, as the table reads it and the record keeps it."""

    turns: int
    """The grid's turn limit."""
    objective: str
    """The objective's label (``clip-0.2``, ``grpo-8``)."""
    seed: int
    """Its seed."""
    start: float
    """Held-out success of the starting model (the first evaluation)."""
    end: float
    """Held-out success at the last evaluation."""
    tokens: int
    """Generated tokens at that evaluation."""
    explained_variance: dict[int, float]
    """Turn k (1 for the first) -> the critic's explained variance over that turn's tokens, the mean over the run's
    iterations that logged it (empty without a critic)."""
    advantage_std: dict[int, float]
    """Turn k -> the spread of that turn's advantages, the mean over the run's iterations."""
    zero_variance_groups: float | None
    """The mean over iterations of the share of groups whose episodes all scored the same (no signal; 0 for a
    critic); None where it was not kept."""
    seconds_per_1000_tokens: float | None = None
    """Sampling and update seconds per 1,000 generated tokens over the iterations after the first (evaluations
    left out); comparable across cells run alike (the same threads, the same neighbours); None where not kept."""
    peak_gb: float | None = None
    """The largest resident memory of its sampling and update phases, in GiB; None where not kept."""
    source: str = ""
    """Where and when it ran: the processor and the date of its last metrics, or a note for a cell recorded by
    hand from the docs' tables after its run folder was lost."""

    @property
    def key(self) -> tuple[int, str, int]:
        return self.turns, self.objective, self.seed


def per_turn_means(records: list[dict], prefix: str) -> dict[int, float]:
    """``prefix<k>`` -> the mean over the records that logged a finite value of it, per turn k."""
    values: dict[int, list[float]] = {}
    for record in records:
        for key, value in record.items():
            if key.startswith(prefix) and value is not None and math.isfinite(value):
                values.setdefault(int(key[len(prefix) :]), []).append(value)
    return {k: float(np.mean(v)) for k, v in sorted(values.items())}


def describe(machine: MachineRecord) -> str:
    """The processor and its SIMD level: two machines with one model name (AMD EPYC with and without AVX-512)
    differ by up to 1.5x in seconds per token, so the level is what tells their costs apart."""
    return f"{machine.processor} ({machine.torch_cpu_capability})"


def read_cell(run_dir: Path, turns: int) -> CellResult | None:
    """A cell's result from its metrics, or None before its second evaluation."""
    match = CELL.match(run_dir.name)
    if match is None or not (run_dir / "metrics.jsonl").is_file():
        return None
    records = read_metrics(run_dir)
    evaluated = [r for r in records if "eval_success" in r]
    if len(evaluated) < 2:
        return None
    trained = [r for r in records if r["iteration"] > 0]
    try:
        times = iteration_times(records)
    except RunError:  # one trained iteration: the warm-up, nothing timed
        times = None
    peaks = [r[name] for r in trained for name in ("rollout_peak_gb", "update_peak_gb") if name in r]
    machines = read_machines(run_dir)
    when = date.fromtimestamp((run_dir / "metrics.jsonl").stat().st_mtime).isoformat()
    return CellResult(
        turns=turns,
        objective=match["objective"],
        seed=int(match["seed"]),
        start=evaluated[0]["eval_success"],
        end=evaluated[-1]["eval_success"],
        tokens=int(evaluated[-1]["global_step"]),
        explained_variance=per_turn_means(trained, "turn_explained_variance_"),
        advantage_std=per_turn_means(trained, "turn_advantage_std_"),
        zero_variance_groups=float(np.mean([r.get("zero_variance_groups", 0.0) for r in trained])),
        seconds_per_1000_tokens=1000 / times.steps_per_second if times and times.steps else None,
        peak_gb=max(peaks) if peaks else None,
        source=f"{describe(machines[-1]) if machines else 'unknown machine'}, {when}",
    )


def grid_results(args: argparse.Namespace, turns: int) -> list[CellResult]:
    grid = args.runs_dir / grid_name(turns)
    cells = [read_cell(path, turns) for path in sorted(grid.iterdir())] if grid.is_dir() else []
    return [cell for cell in cells if cell is not None]


def read_record(path: Path) -> dict[tuple[int, str, int], CellResult]:
    """The recorded cells by (turns, objective, seed); {} where there is no record yet."""
    if not path.is_file():
        return {}
    cells = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        for field in ("explained_variance", "advantage_std"):  # JSON keys are strings; turns are ints
            entry[field] = {int(k): v for k, v in entry[field].items()}
        cell = CellResult(**entry)
        cells[cell.key] = cell
    return cells


def collect(args: argparse.Namespace, write: bool = True) -> list[CellResult]:
    """The recorded cells with each run folder here laid over its record (where it has come at least as far), the
    record rewritten with them unless ``write`` is false; sorted by turns, objective and seed."""
    cells = read_record(args.record)
    for turns in args.turns:
        for cell in grid_results(args, turns):
            if cell.key not in cells or cell.tokens >= cells[cell.key].tokens:
                cells[cell.key] = cell
    ordered = [cells[key] for key in sorted(cells)]
    if write:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text("".join(json.dumps(asdict(cell)) + "\n" for cell in ordered), encoding="utf-8")
    return ordered


def per_turn_text(per_seed: list[dict[int, float]]) -> str:
    """Turn 1 / turn 2 / ...: each turn's value, the mean over the seeds that have it."""
    turns = sorted({k for values in per_seed for k in values})
    return " / ".join(f"{np.mean([v[k] for v in per_seed if k in v]):.2f}" for k in turns) or "-"


def mean_end(cells: list[CellResult], objective: str) -> float | None:
    ends = [cell.end for cell in cells if cell.objective == objective]
    return float(np.mean(ends)) if ends else None


def cost_text(cells: list[CellResult]) -> str:
    """Seconds per 1,000 tokens and peak memory of the cells that kept them: their mean and maximum where they ran
    on one kind of machine, each seed's own (in seed order) where they did not, since a mean across machines of
    different speed describes neither."""
    costed = [c for c in cells if c.seconds_per_1000_tokens and c.peak_gb]
    if not costed:
        return "-"
    if len({c.source.rsplit(", ", 1)[0] for c in costed}) > 1:
        seconds = " / ".join(f"{c.seconds_per_1000_tokens:.0f}" for c in costed)
        return f"{seconds} s, {' / '.join(f'{c.peak_gb:.1f}' for c in costed)} GB"
    return f"{np.mean([c.seconds_per_1000_tokens for c in costed]):.0f} s, {max(c.peak_gb for c in costed):.1f} GB"


def table(args: argparse.Namespace, results: list[CellResult]) -> list[str]:
    """The markdown table, one row per horizon and objective, and a gap row per horizon."""
    lines = [
        "| turns | range | objective | seeds | held-out success, start -> end (per seed) | tokens | critic's explained "
        "variance per turn | advantage std per turn | share of zero-variance groups | s per 1,000 tokens, peak "
        "memory | ran on |",
        "|---:|---:|---|---|---|---:|---|---|---:|---|---|",
    ]
    for turns in args.turns:
        cells = [cell for cell in results if cell.turns == turns]
        for objective in (CRITIC, GROUP):
            mine = sorted((c for c in cells if c.objective == objective), key=lambda c: c.seed)
            if not mine:
                lines.append(f"| {turns} | 1..{range_for(turns)} | {objective} | - | not run | | | | | | |")
                continue
            ends = ", ".join(f"{c.end:.3f}" for c in mine)
            kept = [c.zero_variance_groups for c in mine if c.zero_variance_groups is not None]
            wasted = f"{np.mean(kept):.2f}" if kept else "-"
            sources = "; ".join(sorted({c.source for c in mine}))
            cost = cost_text(mine)
            lines.append(
                f"| {turns} | 1..{range_for(turns)} | {objective} | {' '.join(str(c.seed) for c in mine)} | "
                f"{np.mean([c.start for c in mine]):.3f} -> {np.mean([c.end for c in mine]):.3f} ({ends}) | "
                f"{min(c.tokens for c in mine):,} | {per_turn_text([c.explained_variance for c in mine])} | "
                f"{per_turn_text([c.advantage_std for c in mine])} | {wasted} | {cost} | {sources} |"
            )
        critic, group = mean_end(cells, CRITIC), mean_end(cells, GROUP)
        gap = "-" if critic is None or group is None else f"**{critic - group:+.3f}**"
        lines.append(f"| {turns} | | **critic - group** | | {gap} | | | | | | |")
    return lines


def walker_ratios(path: Path) -> dict[str, float]:
    """Env -> GRPO's final return over PPO-Clip's, from a walker grid's ``final_scores.csv``."""
    finals: dict[tuple[str, str], float] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            finals[row["env"], row["objective"]] = float(row["mean"])
    envs = sorted({env for env, _ in finals})
    return {
        env: finals[env, GROUP] / finals[env, CRITIC]
        for env in envs
        if (env, CRITIC) in finals and (env, GROUP) in finals
    }


def plot(args: argparse.Namespace, results: list[CellResult], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (text_axis, walker_axis) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    for objective, marker, color in ((CRITIC, "o", "C0"), (GROUP, "s", "C1")):
        xs, means = [], []
        for turns in args.turns:
            ends = [c.end for c in results if c.turns == turns and c.objective == objective]
            if ends:
                text_axis.scatter([turns] * len(ends), ends, marker=marker, alpha=0.4, color=color)
                xs.append(turns)
                means.append(float(np.mean(ends)))
        text_axis.plot(xs, means, marker=marker, label=objective, color=color)
    text_axis.set_xscale("log", base=2)
    text_axis.set_xticks(list(args.turns), [str(t) for t in args.turns])
    text_axis.set(xlabel="turn limit (guess-the-number, range 1..2^T - 1)", ylabel="held-out success at the end")
    text_axis.set_title("text: critic against group baseline by horizon")
    text_axis.legend()
    ratios = walker_ratios(args.walkers)
    walker_axis.bar(range(len(ratios)), list(ratios.values()), color="C1")
    walker_axis.axhline(1.0, color="C0", label=f"{CRITIC} (= 1)")
    walker_axis.set_xticks(range(len(ratios)), [env.removesuffix("-v5") for env in ratios])
    walker_axis.set(ylabel=f"{GROUP} final return / {CRITIC}'s", title="walkers, 1,000-step episodes")
    walker_axis.legend()
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    plt.close(figure)
    print(f"figure: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", choices=("run", "table"), default="run", help="run the grids, or only the table")
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 2, 4, 8], help="turn limits, one grid each")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--token-budget", type=int, default=6000, help="generated tokens per run")
    parser.add_argument("--episodes", type=int, default=32, help="episodes per iteration (4 game seeds x 8)")
    parser.add_argument("--turn-tokens", type=int, default=12, help="the policy's tokens per turn at most")
    parser.add_argument("--eval-episodes", type=int, default=64, help="held-out episodes per evaluation")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run")
    parser.add_argument("--jobs", type=int, default=1, help="cells run side by side (ppo compare --jobs)")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "horizon")
    record = ROOT / "docs" / "reports" / "horizon" / "cells.jsonl"
    parser.add_argument("--record", type=Path, default=record, help="the committed record of every cell's result")
    walkers = ROOT / "docs" / "reports" / "after-ppo-walkers" / "final_scores.csv"
    parser.add_argument("--walkers", type=Path, default=walkers, help="the walker grid's final_scores.csv")
    parser.add_argument("--plot", type=Path, default=None, help="write the figure here")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args()
    if any(turns < 1 for turns in args.turns):
        parser.error(f"--turns must be 1 or more, got {args.turns}")
    print(machine_header())
    if args.stage == "run":
        for turns in args.turns:
            command = compare_command(args, turns)
            print("$ ppo", " ".join(command[len(ppo_command()) :]), flush=True)
            if not args.dry_run:
                subprocess.run(command, check=True, cwd=ROOT)
    results = collect(args, write=not args.dry_run)
    print("\n".join(table(args, results)))
    if args.plot is not None:
        plot(args, results, args.plot)


if __name__ == "__main__":
    main()
