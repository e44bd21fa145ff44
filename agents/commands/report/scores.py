"""The report's numbers: runs grouped by (environment, objective), seed-mean curves, final scores, the PPO paper's
normalised score (Table 1) with its random-policy baselines, and the CSV files that hold them at full precision."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.runs.reader import ReportError, Run
from envs.mujoco import random_policy_return

TEXT_FINAL_ITERATIONS = 5
"""A text run's final score is the mean ``reward`` of its last this many iterations."""
TEXT_SMOOTHING = TEXT_FINAL_ITERATIONS
"""Text curves show a trailing mean over this many iterations (each iteration's reward is the mean of one
small batch of prompts); its last point is then the run's final score."""
CURVE_POINTS = 200
"""Seeds are interpolated onto this many evenly spaced environment steps before averaging."""
RANDOM_BASELINES_FILE = "random_baselines.json"
RANDOM_BASELINE_SEED = 0
"""Episode i of the random-policy baseline resets with seed RANDOM_BASELINE_SEED + i."""


class MixedEnvironmentsError(ReportError):
    """Runs of different environments were asked to share one curve or one score."""


@dataclass(frozen=True)
class Curve:
    """A metric over environment steps, averaged over seeds on a common x grid."""

    x: np.ndarray
    """Environment steps (generated tokens for text), shape (points,)."""
    mean: np.ndarray
    """Mean over seeds, shape (points,)."""
    std: np.ndarray
    """Population std over seeds (0 for one seed), shape (points,)."""


@dataclass(frozen=True)
class GroupScore:
    """The final scores of one (environment, objective) group, one per seed."""

    env: str
    """Environment of every run in the group."""
    kind: str
    """'mujoco' or 'text'."""
    objective: str
    """Objective label."""
    seeds: tuple[int, ...]
    """Seeds of the runs, in the order of ``scores``."""
    scores: tuple[float, ...]
    """Final score of each run (NaN when a run has none yet)."""
    final_steps: tuple[int, ...]
    """Last ``global_step`` of each run."""
    finished: tuple[bool, ...]
    """Whether each run reached its budget."""

    @property
    def mean(self) -> float:
        """Mean over the seeds with a finite score (NaN if none)."""
        finite = [s for s in self.scores if math.isfinite(s)]
        return float(np.mean(finite)) if finite else math.nan

    @property
    def std(self) -> float:
        """Population std (ddof 0) over the seeds with a finite score (NaN if none)."""
        finite = [s for s in self.scores if math.isfinite(s)]
        return float(np.std(finite)) if finite else math.nan


# ---------------------------------------------------------------------------------------------
# Grouping


def group_runs(runs: Sequence[Run]) -> dict[tuple[str, str], list[Run]]:
    """Runs keyed by (environment, objective label); environments alphabetical, objectives in the paper's order,
    seeds ascending.
    """
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.env, r.objective_order, r.objective, r.seed)):
        groups.setdefault((run.env, run.objective), []).append(run)
    return groups


# ---------------------------------------------------------------------------------------------
# Curves


TRAINING_SECONDS = "training_seconds"
"""The x axis of wall-clock curves: seconds spent collecting and updating, summed over iterations (a text run's
held-out evaluations excluded)."""


def training_seconds(run: Run) -> list[float]:
    """Each record's ``TRAINING_SECONDS``: the running sum of ``rollout_seconds + update_seconds``."""
    total, seconds = 0.0, []
    for r in run.records:
        total += r.get("rollout_seconds", 0.0) + r.get("update_seconds", 0.0)
        seconds.append(total)
    return seconds


def run_series(run: Run, key: str, against: str = "global_step") -> tuple[np.ndarray, np.ndarray]:
    """(x, value) of the records where ``key`` is a finite number; x is ``global_step`` or ``TRAINING_SECONDS``."""
    xs = training_seconds(run) if against == TRAINING_SECONDS else [r["global_step"] for r in run.records]
    points = [
        (x, r[key]) for x, r in zip(xs, run.records) if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
    ]
    return np.array([x for x, _ in points], dtype=float), np.array([y for _, y in points], dtype=float)


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """``out[i] = mean(values[max(0, i - window + 1) : i + 1])``: the mean of the last ``window`` values up to
    each point (fewer at the start); ``(N,) -> (N,)``. ``window`` 1 returns the values unchanged."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    starts = np.maximum(np.arange(len(values)) - window + 1, 0)
    return (sums[1:] - sums[starts]) / (np.arange(len(values)) + 1 - starts)


def check_one_environment(runs: Sequence[Run]) -> None:
    """Raise ``MixedEnvironmentsError`` unless every run is of the same environment."""
    envs = sorted({run.env for run in runs})
    if len(envs) > 1:
        raise MixedEnvironmentsError(
            f"refusing to put runs of different environments in one curve: {', '.join(envs)}; group them by environment"
        )


def mean_curve(
    runs: Sequence[Run], key: str, points: int = CURVE_POINTS, smoothing: int = 1, against: str = "global_step"
) -> Curve | None:
    """Mean and std over seeds of ``key`` against ``global_step`` (or ``against``, see ``run_series``): each run
    (first smoothed by a trailing mean over ``smoothing`` logged iterations, see ``trailing_mean``) is linearly
    interpolated onto ``points`` evenly spaced steps from the earliest to the latest logged step, and each step
    averages the runs whose logged range covers it (where an unfinished seed stopped, the curve goes on with the
    others). A finished run covers the curve to its end with its last value, so finished runs that stop a few steps
    apart (text runs end on whole batches of completions) do not make the mean jump at the end.
    None if no run logged ``key``."""
    check_one_environment(runs)
    series = [
        (x, trailing_mean(y, smoothing), run.finished)
        for run in runs
        for x, y in [run_series(run, key, against)]
        if len(x)
    ]
    if not series:
        return None
    start, end = min(x[0] for x, _, _ in series), max(x[-1] for x, _, _ in series)
    grid = np.linspace(start, end, points) if end > start else np.array([start])
    values = np.stack(
        [
            np.where((grid >= x[0]) & ((grid <= x[-1]) | finished), np.interp(grid, x, y), np.nan)
            for x, y, finished in series
        ]
    )
    covered = ~np.isnan(values)
    count = covered.sum(axis=0)
    mean = np.where(count > 0, np.nansum(values, axis=0) / np.maximum(count, 1), np.nan)
    spread = np.where(covered, values - mean, 0.0)
    std = np.where(count > 0, np.sqrt((spread**2).sum(axis=0) / np.maximum(count, 1)), np.nan)
    return Curve(x=grid, mean=mean, std=std)


# ---------------------------------------------------------------------------------------------
# Final scores and the normalised score


def final_score(run: Run) -> float:
    """MuJoCo: ``episode_return`` of the last metrics line (the mean of the last 100 episodes).
    Text: the mean ``reward`` of the last ``TEXT_FINAL_ITERATIONS`` iterations. NaN if there is none."""
    if run.kind == "text":
        rewards = [
            r["reward"] for r in run.records[-TEXT_FINAL_ITERATIONS:] if isinstance(r.get("reward"), (int, float))
        ]
        return float(np.mean(rewards)) if rewards else math.nan
    value = run.records[-1].get("episode_return") if run.records else None
    return float(value) if isinstance(value, (int, float)) else math.nan


def score_measure(kind: str) -> str:
    """What a final score is, in words."""
    return (
        f"mean reward, last {TEXT_FINAL_ITERATIONS} iterations"
        if kind == "text"
        else "episode_return, last 100 episodes"
    )


def score_groups(groups: Mapping[tuple[str, str], Sequence[Run]]) -> list[GroupScore]:
    """The final score of every run, per group."""
    scores = []
    for (env, objective), runs in groups.items():
        check_one_environment(runs)
        scores.append(
            GroupScore(
                env=env,
                kind=runs[0].kind,
                objective=objective,
                seeds=tuple(run.seed for run in runs),
                scores=tuple(final_score(run) for run in runs),
                final_steps=tuple(run.records[-1]["global_step"] if run.records else 0 for run in runs),
                finished=tuple(run.finished for run in runs),
            )
        )
    return scores


def normalized_scores(
    scores: Sequence[GroupScore], random_returns: Mapping[str, float]
) -> dict[tuple[str, str], float]:
    """The PPO paper's normalised score (Table 1) of each (environment, objective) whose environment has a
    random-policy return: ``(mean final return - random) / (best objective's mean - random)``, so the
    random policy scores 0 and the best objective of the environment 1. NaN if best equals random."""
    normalized = {}
    for env in sorted({s.env for s in scores if s.env in random_returns}):
        means = {s.objective: s.mean for s in scores if s.env == env and math.isfinite(s.mean)}
        if not means:
            continue
        random, best = random_returns[env], max(means.values())
        for objective, mean in means.items():
            normalized[(env, objective)] = (mean - random) / (best - random) if best != random else math.nan
    return normalized


def average_normalized(normalized: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Each objective's normalised score averaged over the environments it ran on (the paper's last column).
    With the same seeds in every cell this equals the paper's average over all runs."""
    per_objective: dict[str, list[float]] = {}
    for (_, objective), value in normalized.items():
        per_objective.setdefault(objective, []).append(value)
    return {objective: float(np.mean(values)) for objective, values in per_objective.items()}


PAPER_TABLE1 = {
    "no-clip": -0.39, "clip-0.1": 0.76, "clip-0.2": 0.82, "clip-0.3": 0.70, "penalty-0.003": 0.68,
    "penalty-0.01": 0.74, "penalty-0.03": 0.71, "fixed-kl-0.3": 0.62, "fixed-kl-1": 0.71, "fixed-kl-3": 0.72,
    "fixed-kl-10": 0.69,
}  # fmt: skip
"""The PPO paper's Table 1 averages (Schulman et al. 2017: 7 MuJoCo v1 tasks, 1M steps, 3 seeds), by our label."""


# ---------------------------------------------------------------------------------------------
# Random-policy baselines


def random_baselines(env_ids: Sequence[str], out: Path, episodes: int) -> dict[str, float]:
    """The random-policy return of each MuJoCo env: read from ``out/random_baselines.json`` when it was
    measured with the same episodes and seed, else measured now and added to that file."""
    if episodes < 1:
        raise ReportError(f"--random-episodes must be a positive integer, got {episodes}")
    path = out / RANDOM_BASELINES_FILE
    try:
        cache = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError:
        cache = {}  # a damaged cache is measured again
    for env_id in env_ids:
        entry = cache.get(env_id, {})
        if entry.get("episodes") != episodes or entry.get("seed") != RANDOM_BASELINE_SEED:
            cache[env_id] = {
                "mean_return": random_policy_return(env_id, episodes, RANDOM_BASELINE_SEED),
                "episodes": episodes,
                "seed": RANDOM_BASELINE_SEED,
                "policy": "uniform random actions (action_space.sample())",
            }
    path.write_text(json.dumps(cache, indent=2) + "\n", encoding="utf-8")
    return {env_id: cache[env_id]["mean_return"] for env_id in env_ids}


# ---------------------------------------------------------------------------------------------
# CSV files


def write_final_scores_csv(
    path: Path, scores: Sequence[GroupScore], normalized: Mapping, random_returns: Mapping[str, float]
) -> None:
    """``final_scores.csv``: one row per (environment, objective) with full-precision numbers; space-separated
    lists (seeds, final steps, finished, per-seed scores) run in the order of the seeds."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "env",
                "kind",
                "objective",
                "measure",
                "seeds",
                "final_steps",
                "finished",
                "mean",
                "std",
                "per_seed",
                "random_return",
                "normalized_score",
            ]
        )
        for s in scores:
            writer.writerow(
                [
                    s.env,
                    s.kind,
                    s.objective,
                    score_measure(s.kind),
                    " ".join(map(str, s.seeds)),
                    " ".join(map(str, s.final_steps)),
                    " ".join(map(str, s.finished)),
                    repr(s.mean),
                    repr(s.std),
                    " ".join(repr(v) for v in s.scores),
                    repr(random_returns[s.env]) if s.env in random_returns else "",
                    repr(normalized[(s.env, s.objective)]) if (s.env, s.objective) in normalized else "",
                ]
            )


def write_normalized_csv(path: Path, normalized: Mapping[tuple[str, str], float], objectives: Sequence[str]) -> None:
    """``normalized_scores.csv``: the Table 1 layout with full-precision numbers."""
    envs = sorted({env for env, _ in normalized})
    averages = average_normalized(normalized)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["objective", *envs, "average"])
        for objective in (o for o in objectives if o in averages):
            writer.writerow(
                [
                    objective,
                    *(repr(normalized[(env, objective)]) if (env, objective) in normalized else "" for env in envs),
                    repr(averages[objective]),
                ]
            )
