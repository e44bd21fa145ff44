"""The PPO paper's Table 1 put together from per-environment ``ppo report`` folders (issue #13).

The full grid (eleven settings x seven MuJoCo v5 tasks x seeds 1-3, 1M steps) takes about seven hours on 2 cores,
more than one machine session, so it runs one environment at a time, each into its own grid, and each
environment's report (``final_scores.csv``, ``random_baselines.json``, figures) is kept under
``docs/reports/table1/<env>/``:

    ppo compare --runs-dir runs/table1 --name Hopper-v5 --envs Hopper-v5 --objectives paper --seeds 1 2 3 \\
        --total-steps 1000000 --jobs 2 --random-episodes 100
    cp -r runs/table1/Hopper-v5/report docs/reports/table1/Hopper-v5

The paper's score normalises each task on its own (random policy 0, best setting 1), so the per-environment reports
add up to the table exactly. This script reads them and writes ``table1.md`` and ``table1.csv``: the normalised
score of every (setting, task) cell, the eleven averages beside the paper's, the returns, the random baselines with
their episode counts, how complete the grid is, clipping against the adaptive KL penalty per task (the best of each
family, clip 0.2 against adaptive KL 0.01, the families' means and their gap with a 90 % seed-bootstrap interval),
and the cells run with value clipping and observation normalisation off (``--details-off``: their reports,
normalised against the same task's random policy and best default setting).

    python -m benchmarks.experiments.table1 docs/reports/table1/*-v5 --details-off docs/reports/table1/details-off
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from agents.commands.report.pages import format_number
from agents.commands.report.scores import (
    PAPER_TABLE1,
    RANDOM_BASELINES_FILE,
    GroupScore,
    average_normalized,
    normalized_scores,
)
from agents.runs.logger import markdown_table

SEEDS = 3
"""Seeds per cell in the paper's Table 1."""
TASKS = ("HalfCheetah-v5", "Hopper-v5", "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Reacher-v5",
         "Swimmer-v5", "Walker2d-v5")  # fmt: skip
"""The paper's seven tasks, in today's v5 versions."""
SETTINGS = tuple(PAPER_TABLE1)
"""The paper's eleven settings, in its order (our labels)."""
CLIPPING = ("clip-0.1", "clip-0.2", "clip-0.3")
"""The paper's clipping settings (ε = 0.1, 0.2, 0.3)."""
ADAPTIVE = ("penalty-0.003", "penalty-0.01", "penalty-0.03")
"""The paper's adaptive KL settings (d_targ = 0.003, 0.01, 0.03)."""
FAMILIES_HEADER = ["task", "best clipping", "best adaptive KL", "clip 0.2 − adaptive 0.01", "clipping's mean",
                   "adaptive KL's mean", "ahead", "means' gap [90 % interval]",
                   "resamples with clipping ahead"]  # fmt: skip
"""Columns of the clipping-against-adaptive-KL table."""
RESAMPLES = 2000
"""Seed-bootstrap resamples behind the gap's interval (each cell's seeds drawn with replacement)."""


@dataclass(frozen=True)
class GapInterval:
    """Clipping's mean normalised score minus adaptive KL's, with its seed-bootstrap spread."""

    point: float
    """The gap on the seeds as run."""
    low: float
    """5th percentile of the gap over the resamples."""
    high: float
    """95th percentile of the gap over the resamples."""
    clipping_ahead: float
    """Share of the resamples in which the gap is above 0."""


def read_scores(report: Path) -> list[GroupScore]:
    """The (environment, objective) rows of a report's ``final_scores.csv``."""
    path = report / "final_scores.csv"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist; give report folders written by ppo report or ppo compare")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if rows and "finished" not in rows[0]:
        raise SystemExit(f"{path} has no finished column (an older report); write it again with ppo report")
    return [
        GroupScore(
            env=row["env"],
            kind=row["kind"],
            objective=row["objective"],
            seeds=tuple(int(seed) for seed in row["seeds"].split()),
            scores=tuple(float(score) for score in row["per_seed"].split()),
            final_steps=tuple(int(step) for step in row["final_steps"].split()),
            finished=tuple(flag == "True" for flag in row["finished"].split()),
        )
        for row in rows
    ]


def read_random(report: Path) -> dict[str, dict]:
    """A report's ``random_baselines.json``: env -> {mean_return, episodes, ...}."""
    return json.loads((report / RANDOM_BASELINES_FILE).read_text(encoding="utf-8"))


def complete(score: GroupScore) -> bool:
    """Whether a cell has the paper's number of seeds, every one finished."""
    return len(score.seeds) >= SEEDS and all(score.finished)


def mean_std(cell: GroupScore | None) -> str:
    """``mean ± std`` of a cell's returns over seeds, '' for a cell that did not run."""
    return f"{format_number(cell.mean)} ± {format_number(cell.std, like=cell.mean)}" if cell else ""


def signed(value: float) -> str:
    """``+0.05``, ``-0.20``; a value that rounds to zero reads ``+0.00``, never ``-0.00``."""
    return f"{round(value, 2) + 0.0:+.2f}"


def clipping_against_adaptive(scores: dict[str, float]) -> list[str]:
    """One row of the clipping-against-adaptive-KL table from one task's (or the average's) normalised scores by
    setting: the best of each family with its setting, clip 0.2 − adaptive 0.01, each family's mean and the
    family ahead by that mean ('tie' when the means agree to two decimals). Families missing a setting are taken
    over the settings present."""
    clip = {s: scores[s] for s in CLIPPING if s in scores}
    adaptive = {s: scores[s] for s in ADAPTIVE if s in scores}
    if not clip or not adaptive:
        return ["", "", "", "", "", ""]
    best_clip, best_adaptive = max(clip, key=clip.get), max(adaptive, key=adaptive.get)
    clip_mean, adaptive_mean = sum(clip.values()) / len(clip), sum(adaptive.values()) / len(adaptive)
    gap = round(clip_mean - adaptive_mean, 2)
    paired = {"clip-0.2", "penalty-0.01"} <= scores.keys()
    pair = signed(scores["clip-0.2"] - scores["penalty-0.01"]) if paired else ""
    return [
        f"{clip[best_clip]:.2f} ({best_clip})", f"{adaptive[best_adaptive]:.2f} ({best_adaptive})", pair,
        f"{clip_mean:.2f}", f"{adaptive_mean:.2f}", "tie" if gap == 0 else "clipping" if gap > 0 else "adaptive KL",
    ]  # fmt: skip


def families_gap(scores: list[GroupScore], random_returns: dict[str, float]) -> float:
    """Mean over the clipping settings minus mean over the adaptive KL settings of the average normalised score
    (each family over its settings present; NaN when a family has none)."""
    averages = average_normalized(normalized_scores(scores, random_returns))
    clip, adaptive = ([averages[s] for s in family if s in averages] for family in (CLIPPING, ADAPTIVE))
    return float(np.mean(clip) - np.mean(adaptive)) if clip and adaptive else math.nan


def bootstrap_gap(scores: list[GroupScore], random_returns: dict[str, float], seed: int = 0) -> GapInterval:
    """The families' gap with a seed bootstrap: each resample draws every cell's seeds with replacement (as many as
    it has), normalises every task again (its best setting may change) and takes the gap; the interval is the 5th
    to 95th percentile over ``RESAMPLES`` resamples."""
    rng = np.random.default_rng(seed)
    draws = np.array([
        families_gap([replace(s, scores=tuple(rng.choice(s.scores, size=len(s.scores)))) for s in scores],
                     random_returns)
        for _ in range(RESAMPLES)
    ])  # fmt: skip
    low, high = np.percentile(draws, [5, 95])
    return GapInterval(families_gap(scores, random_returns), float(low), float(high), float(np.mean(draws > 0)))


def gap_columns(interval: GapInterval) -> list[str]:
    """``+0.05 [+0.01, +0.09]`` and the share of resamples with clipping ahead, as table cells (``+0.00`` for -0;
    empty when a family did not run)."""
    if not math.isfinite(interval.point):
        return ["", ""]
    low, point, high = (signed(v) for v in (interval.low, interval.point, interval.high))
    return [f"{point} [{low}, {high}]", f"{interval.clipping_ahead:.0%}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, help="report folders of the default-settings grid")
    parser.add_argument("--details-off", nargs="*", type=Path, default=[], help="report folders of the ablation")
    parser.add_argument("--out", type=Path, default=Path("docs/reports/table1"))
    args = parser.parse_args()

    scores = [s for report in args.reports for s in read_scores(report) if s.objective in SETTINGS]
    random = {env: entry for report in [*args.details_off, *args.reports] for env, entry in read_random(report).items()}
    envs = [env for env in TASKS if any(s.env == env for s in scores)]
    normalized = normalized_scores(scores, {env: random[env]["mean_return"] for env in envs})
    by_cell = {(s.env, s.objective): s for s in scores}
    cells_done = sum(complete(s) for s in scores)
    averages = average_normalized(normalized)

    def mark(env: str, setting: str) -> str:
        """A cell's normalised score, starred when it has fewer seeds than the paper or an unfinished one."""
        if (env, setting) not in normalized:
            return ""
        return f"{normalized[(env, setting)]:.2f}" + ("" if complete(by_cell[(env, setting)]) else "*")

    ours_rank = sorted(averages, key=lambda s: -averages[s])
    paper_rank = sorted(averages, key=lambda s: -PAPER_TABLE1[s])  # among the settings run so far
    header = ["setting", *envs, "average (ours)", "rank", "paper's Table 1", "paper's rank (among these)"]
    rows = [
        [setting, *(mark(env, setting) for env in envs), f"**{averages[setting]:.2f}**",
         str(ours_rank.index(setting) + 1), f"{PAPER_TABLE1[setting]:.2f}", str(paper_rank.index(setting) + 1)]
        for setting in SETTINGS if setting in averages
    ]  # fmt: skip
    returns_rows = [
        [setting, *(mean_std(by_cell.get((env, setting))) for env in envs)]
        for setting in SETTINGS if any((env, setting) in by_cell for env in envs)
    ]  # fmt: skip
    random_returns = {env: random[env]["mean_return"] for env in envs}
    family_rows = [
        *([env, *clipping_against_adaptive({s: v for (e, s), v in normalized.items() if e == env}),
           *gap_columns(bootstrap_gap([s for s in scores if s.env == env], random_returns))] for env in envs),
        ["average (ours)", *clipping_against_adaptive(averages), *gap_columns(bootstrap_gap(scores, random_returns))],
        ["paper's Table 1 (7 v1 tasks)", *clipping_against_adaptive(PAPER_TABLE1), "", ""],
    ]  # fmt: skip
    returns_rows.append(["random policy", *(format_number(random[env]["mean_return"]) for env in envs)])
    returns_rows.append(["random policy: episodes", *(str(random[env]["episodes"]) for env in envs)])

    lines = [
        f"{cells_done} of {len(TASKS) * len(SETTINGS)} cells done ({SEEDS} finished seeds each); tasks so far: "
        f"{', '.join(envs)}. * = fewer seeds or an unfinished one.",
        "",
        "Normalised score (random policy 0, the task's best setting 1), the average over the tasks so far:",
        "",
        markdown_table(header, rows),
        "",
        "Return at 1M steps (mean of the last 100 training episodes; mean ± population std over seeds):",
        "",
        markdown_table(["setting", *envs], returns_rows),
        "",
        "Clipping against the adaptive KL penalty (normalised scores; the families' means over their three settings;"
        f" the gap's interval: 5th-95th percentile over {RESAMPLES:,} seed-bootstrap resamples):",
        "",
        markdown_table(FAMILIES_HEADER, family_rows),
    ]
    details = [s for report in args.details_off for s in read_scores(report)]
    if details:
        detail_rows = []
        for cell in details:
            setting = cell.objective.split(" (")[0]
            default = by_cell.get((cell.env, setting))
            best = max((c.mean for c in scores if c.env == cell.env), default=math.nan)
            base = random[cell.env]["mean_return"]
            detail_rows.append([
                cell.env, cell.objective, mean_std(cell),
                ", ".join(format_number(v, like=cell.mean) for v in cell.scores),
                f"{(cell.mean - base) / (best - base):.2f}" if math.isfinite(best) else "", mean_std(default),
                f"{normalized[(cell.env, setting)]:.2f}" if default else "",
            ])  # fmt: skip
        lines += [
            "",
            "Implementation details off (normalised against the same random policy and best default-settings cell):",
            "",
            markdown_table(
                ["env", "setting", "return", "per seed", "normalised", "defaults: return", "defaults: normalised"],
                detail_rows,
            ),
        ]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table1.md").write_text(text, encoding="utf-8")
    with open(args.out / "table1.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["setting", *envs, "average", "paper"])
        for setting in (s for s in SETTINGS if s in averages):
            writer.writerow([setting, *(repr(normalized.get((env, setting), math.nan)) for env in envs),
                             repr(averages[setting]), PAPER_TABLE1[setting]])  # fmt: skip
    print(text)


if __name__ == "__main__":
    main()
