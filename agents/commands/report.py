"""``ppo report``: learning curves, KL/clipping diagnostics, text plots, final-score tables and the PPO
paper's normalised score (Table 1), over any run folders written by ``ppo train`` or ``ppo compare``.

Runs are grouped by (environment, objective label); the label comes from config.json (``clip-0.2``,
``penalty-0.01``, ``fixed-kl-3``, ``no-clip``, plus e.g. `` (no value clip, no obs norm)`` for MuJoCo runs
with default details switched off), so runs from both commands group identically.
Everything lands in one folder: PNGs, CSV and markdown tables, ``report.md`` and ``index.html``.
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agents.runs.logger import SAMPLES_FILE, markdown_cell, markdown_table, read_jsonl
from agents.runs.machine import machine_line
from agents.runs.reader import ReportError, Run, find_runs, load_run

TEXT_FINAL_ITERATIONS = 5
"""A text run's final score is the mean ``reward`` of its last this many iterations."""
TEXT_SMOOTHING = TEXT_FINAL_ITERATIONS
"""Text curves show a trailing mean over this many iterations (each iteration's reward is the mean of one
small batch of prompts); its last point is then the run's final score."""
CURVE_POINTS = 200
"""Seeds are interpolated onto this many evenly spaced environment steps before averaging."""
FIGURE_DPI = 100
CURVE_FIGSIZE = (6.4, 4.0)
"""Inches of one environment's learning-curve figure (640 x 400 pixels at FIGURE_DPI)."""
PANEL_FIGSIZE = (4.8, 3.6)
"""Inches of each panel of the multi-panel figures (combined curves, diagnostics, text)."""
COMBINED_COLUMNS = 3
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


@dataclass(frozen=True)
class SampleComparison:
    """Sample completions of one text environment, one column per objective."""

    aligned: bool
    """True: rows are prompts every objective's last samples share; False: row i is each objective's i-th sample."""
    objectives: tuple[str, ...]
    """Column labels: ``<objective> (seed s, iteration i)``."""
    rows: tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...]
    """(shared prompt or '', one (prompt, completion, score) per objective, '' where an objective has fewer samples)."""


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
# Numbers


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


# ---------------------------------------------------------------------------------------------
# Random-policy baselines


def random_policy_return(env_id: str, episodes: int, seed: int = RANDOM_BASELINE_SEED) -> float:
    """Mean undiscounted return of ``episodes`` episodes of uniform random actions (``action_space.sample()``),
    episode i reset with ``seed + i`` and the action space seeded with ``seed``."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    try:
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))


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
                "mean_return": random_policy_return(env_id, episodes),
                "episodes": episodes,
                "seed": RANDOM_BASELINE_SEED,
                "policy": "uniform random actions (action_space.sample())",
            }
    path.write_text(json.dumps(cache, indent=2) + "\n", encoding="utf-8")
    return {env_id: cache[env_id]["mean_return"] for env_id in env_ids}


# ---------------------------------------------------------------------------------------------
# Figures


def file_slug(env: str) -> str:
    """A file-name-safe form of an environment name: ``text:sentiment`` -> ``text-sentiment``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", env)


def objective_colors(labels: Sequence[str]) -> dict[str, tuple]:
    """One colour per objective label, the same in every figure."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def new_figure(panels: int, columns: int | None = None) -> tuple[Figure, list]:
    """A figure of ``panels`` axes of PANEL_FIGSIZE each, ``columns`` per row (default all in one row)."""
    columns = min(columns or panels, panels)
    rows = math.ceil(panels / columns)
    figure = Figure(figsize=(PANEL_FIGSIZE[0] * columns, PANEL_FIGSIZE[1] * rows), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).ravel().tolist()
    for unused in axes[panels:]:
        unused.set_visible(False)
    return figure, axes[:panels]


def plot_curve(axes, curve: Curve | None, label: str, color, linestyle: str = "-") -> None:
    """The mean as a line (a dot for a single point) with a shaded +-1 std band."""
    if curve is None:
        return
    axes.plot(curve.x, curve.mean, linestyle, color=color, label=label, marker="o" if len(curve.x) == 1 else None)
    axes.fill_between(curve.x, curve.mean - curve.std, curve.mean + curve.std, color=color, alpha=0.2, linewidth=0)


def score_key(kind: str) -> str:
    """The metric a learning curve shows: ``episode_return`` (MuJoCo) or ``reward`` (text)."""
    return "reward" if kind == "text" else "episode_return"


def draw_learning_curves(axes, env: str, env_groups: Mapping[str, Sequence[Run]], colors: Mapping[str, tuple]) -> None:
    """One environment's learning curves, one line per objective, on ``axes``."""
    kind = next(iter(env_groups.values()))[0].kind
    for objective, runs in env_groups.items():
        smoothing = TEXT_SMOOTHING if kind == "text" else 1
        plot_curve(
            axes,
            mean_curve(runs, score_key(kind), smoothing=smoothing),
            f"{objective} ({len(runs)} seeds)",
            colors[objective],
        )
    axes.set_title(env)
    axes.set_xlabel("generated tokens" if kind == "text" else "environment steps")
    axes.set_ylabel(
        f"reward, last {TEXT_SMOOTHING} iterations (mean ± std)"
        if kind == "text"
        else "episode_return, last 100 (mean ± std)"
    )
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")


def save_figure(figure: Figure, path: Path) -> str:
    """Write the PNG and return its file name (for links)."""
    figure.savefig(path, dpi=FIGURE_DPI)
    return path.name


def learning_curve_figure(
    env: str, env_groups: Mapping[str, Sequence[Run]], colors: Mapping[str, tuple], out: Path
) -> str:
    """``learning_curves_<env>.png``: CURVE_FIGSIZE."""
    figure = Figure(figsize=CURVE_FIGSIZE, dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    draw_learning_curves(figure.add_subplot(), env, env_groups, colors)
    return save_figure(figure, out / f"learning_curves_{file_slug(env)}.png")


def combined_learning_curves_figure(
    by_env: Mapping[str, Mapping[str, Sequence[Run]]], colors: Mapping[str, tuple], out: Path
) -> str:
    """``learning_curves.png``: every environment's learning curves, COMBINED_COLUMNS panels per row."""
    figure, axes = new_figure(len(by_env), COMBINED_COLUMNS)
    for panel, (env, env_groups) in zip(axes, by_env.items()):
        draw_learning_curves(panel, env, env_groups, colors)
    return save_figure(figure, out / "learning_curves.png")


def diagnostics_figure(
    env: str, env_groups: Mapping[str, Sequence[Run]], colors: Mapping[str, tuple], out: Path
) -> str:
    """``diagnostics_<env>.png``: beta of the KL-penalty objectives (when there are any), the KL of each update
    to the old policy (``kl_after_update``) and the clip fraction, over environment steps."""
    penalised = {o: runs for o, runs in env_groups.items() if runs[0].uses_beta}
    kind = next(iter(env_groups.values()))[0].kind
    panels = ([("beta", "beta (KL penalty coefficient)", penalised)] if penalised else []) + [
        ("kl_after_update", "KL(old policy ‖ new) after each update", env_groups),
        ("clip_fraction", "clip fraction", env_groups),
    ]
    figure, axes = new_figure(len(panels))
    for panel, (key, title, groups) in zip(axes, panels):
        for objective, runs in groups.items():
            plot_curve(panel, mean_curve(runs, key), objective, colors[objective])
        if key in ("beta", "kl_after_update") and all(
            np.all(run_series(r, key)[1] > 0) for runs in groups.values() for r in runs
        ):
            panel.set_yscale("log")
        panel.set_title(f"{env}: {title}", fontsize="medium")
        panel.set_xlabel("generated tokens" if kind == "text" else "environment steps")
        panel.grid(alpha=0.3)
        panel.legend(fontsize="small")
    return save_figure(figure, out / f"diagnostics_{file_slug(env)}.png")


def has_gold_and_learned(runs: Sequence[Run]) -> bool:
    """Whether the runs log both the learned reward and the gold lexicon score (the sentiment task does)."""
    return any("task_gold_lexicon" in r and "task_learned_reward" in r for run in runs for r in run.records)


def logs_any(runs: Sequence[Run], key: str) -> bool:
    """Whether any record of ``runs`` holds ``key``."""
    return any(key in r for run in runs for r in run.records)


def text_figure(env: str, env_groups: Mapping[str, Sequence[Run]], colors: Mapping[str, tuple], out: Path) -> str:
    """``text_<env>.png``: reward against reference KL (each objective's seed-mean path, the run's start to
    its end) and response length over time; when logged, gold-vs-learned reward over time, the held-out task
    reward (``--eval-every``) against generated tokens and against training seconds, and the share of
    zero-variance groups (group objectives)."""
    runs = [run for group in env_groups.values() for run in group]
    gold, heldout, groups = (
        has_gold_and_learned(runs),
        logs_any(runs, "eval_reward"),
        logs_any(runs, "zero_variance_groups"),
    )
    panels = 2 + gold + 2 * heldout + groups
    figure, axes = new_figure(panels, columns=3 if panels > 3 else None)
    frontier, length, *extra = axes
    gold_panel = extra.pop(0) if gold else None
    tokens_panel, seconds_panel = (extra.pop(0), extra.pop(0)) if heldout else (None, None)
    groups_panel = extra.pop(0) if groups else None
    for objective, group in env_groups.items():
        color = colors[objective]
        reward, ref_kl = (
            mean_curve(group, "reward", smoothing=TEXT_SMOOTHING),
            mean_curve(group, "ref_kl", smoothing=TEXT_SMOOTHING),
        )
        if reward is not None and ref_kl is not None and np.array_equal(reward.x, ref_kl.x):
            frontier.plot(ref_kl.mean, reward.mean, "-", color=color, label=objective, alpha=0.8)
            frontier.plot(ref_kl.mean[-1:], reward.mean[-1:], "o", color=color)
        plot_curve(length, mean_curve(group, "response_length", smoothing=TEXT_SMOOTHING), objective, color)
        if gold_panel is not None:
            learned = mean_curve(group, "task_learned_reward", smoothing=TEXT_SMOOTHING)
            plot_curve(gold_panel, learned, f"{objective} learned", color)
            lexicon = mean_curve(group, "task_gold_lexicon", smoothing=TEXT_SMOOTHING)
            plot_curve(gold_panel, lexicon, f"{objective} gold", color, linestyle="--")
        if heldout:
            plot_curve(tokens_panel, mean_curve(group, "eval_reward"), objective, color)
            plot_curve(seconds_panel, mean_curve(group, "eval_reward", against=TRAINING_SECONDS), objective, color)
        if groups_panel is not None:
            zero = mean_curve(group, "zero_variance_groups", smoothing=TEXT_SMOOTHING)
            plot_curve(groups_panel, zero, objective, color)
    figure.suptitle(
        f"trailing means over the last {TEXT_SMOOTHING} iterations; held-out reward unsmoothed", fontsize="small"
    )
    frontier.set(
        title=f"{env}: reward vs reference KL (dot = end)", xlabel="ref_kl (nats per completion)", ylabel="reward"
    )
    length.set(title=f"{env}: response length", xlabel="generated tokens", ylabel="response_length (tokens)")
    if gold_panel is not None:
        gold_panel.set(title=f"{env}: learned (solid) vs gold (dashed)", xlabel="generated tokens", ylabel="task score")
    if heldout:
        tokens_panel.set(title=f"{env}: held-out reward", xlabel="generated tokens", ylabel="eval_reward")
        seconds_panel.set(
            title=f"{env}: held-out reward vs wall clock", xlabel="training seconds", ylabel="eval_reward"
        )
    if groups_panel is not None:
        groups_panel.set(
            title=f"{env}: groups with equal rewards", xlabel="generated tokens", ylabel="zero_variance_groups"
        )
    for panel in axes:
        panel.grid(alpha=0.3)
        panel.legend(fontsize="small")
    return save_figure(figure, out / f"text_{file_slug(env)}.png")


# ---------------------------------------------------------------------------------------------
# Sample completions


def last_samples(run: Run) -> tuple[int, list[dict]] | None:
    """(iteration, rows) of the last line of the run's samples.jsonl, or None."""
    lines = read_jsonl(run.path / SAMPLES_FILE)
    return (lines[-1]["iteration"], lines[-1]["samples"]) if lines else None


def compare_samples(env_groups: Mapping[str, Sequence[Run]]) -> SampleComparison | None:
    """Each objective's last-iteration samples (its lowest seed that has any), lined up by prompt when some
    prompts are shared by every objective, else side by side in the order they were logged."""
    picked = {}
    for objective, runs in env_groups.items():
        found = next(((run, samples) for run in runs if (samples := last_samples(run)) is not None), None)
        if found is not None:
            run, (iteration, rows) = found
            picked[f"{objective} (seed {run.seed}, iteration {iteration})"] = rows
    if not picked:
        return None
    by_prompt = [{row["prompt"]: row for row in rows} for rows in picked.values()]
    shared = [p for p in by_prompt[0] if all(p in rows for rows in by_prompt[1:])]
    as_cell = lambda row: (row["prompt"], row["completion"], float(row["score"])) if row else ("", "", math.nan)  # noqa: E731
    if shared and len(picked) > 1:
        rows = tuple((prompt, tuple(as_cell(rows[prompt]) for rows in by_prompt)) for prompt in shared)
        return SampleComparison(aligned=True, objectives=tuple(picked), rows=rows)
    longest = max(len(rows) for rows in picked.values())
    rows = tuple(
        ("", tuple(as_cell(rows[i] if i < len(rows) else None) for rows in picked.values())) for i in range(longest)
    )
    return SampleComparison(aligned=False, objectives=tuple(picked), rows=rows)


def samples_note(comparison: SampleComparison) -> str:
    """One sentence saying how the sample table is laid out."""
    if comparison.aligned:
        return "Lined up by prompt: every row is a prompt that each objective's last logged iteration sampled."
    if len(comparison.objectives) == 1:
        return "One objective: its last logged samples."
    return (
        "Prompts differ between the runs (they are sampled per iteration), so each objective's last logged samples "
        "are shown side by side: row i is the i-th sample of each."
    )


# ---------------------------------------------------------------------------------------------
# Tables


def format_number(value: float, like: float | None = None) -> str:
    """One decimal for numbers of 100 or more (returns), three below (rewards, KL); ``like`` picks the precision
    instead (so a std reads like its mean); 'n/a' for NaN."""
    if not math.isfinite(value):
        return "n/a"
    scale = abs(like) if like is not None and math.isfinite(like) else abs(value)
    return f"{value:,.1f}" if scale >= 100 else f"{value:.3f}"


def score_measure(kind: str) -> str:
    """What a final score is, in words."""
    return (
        f"mean reward, last {TEXT_FINAL_ITERATIONS} iterations"
        if kind == "text"
        else "episode_return, last 100 episodes"
    )


def final_scores_table(
    scores: Sequence[GroupScore], normalized: Mapping[tuple[str, str], float]
) -> tuple[list[str], list[list[str]]]:
    """The final-score table, one row per (environment, objective): header and rows of text cells."""
    header = [
        "env",
        "objective",
        "seeds",
        "finished",
        "final step",
        "final score (mean ± std over seeds)",
        "per seed",
        "normalised score",
        "measure",
    ]
    rows = []
    for s in scores:
        steps = (
            f"{min(s.final_steps):,}"
            if min(s.final_steps) == max(s.final_steps)
            else f"{min(s.final_steps):,}–{max(s.final_steps):,}"
        )
        normal = normalized.get((s.env, s.objective), math.nan)
        rows.append(
            [
                s.env,
                s.objective,
                str(len(s.seeds)),
                f"{sum(s.finished)}/{len(s.finished)}",
                steps,
                f"{format_number(s.mean)} ± {format_number(s.std, like=s.mean)}",
                ", ".join(format_number(v, like=s.mean) for v in s.scores),
                "" if math.isnan(normal) else f"{normal:.2f}",
                score_measure(s.kind),
            ]
        )
    return header, rows


def heldout_table(groups: Mapping[tuple[str, str], Sequence[Run]]) -> tuple[list[str], list[list[str]]]:
    """Text groups that logged ``--eval-every``: held-out reward of the first and the last evaluation (mean ± std
    over seeds), generated tokens, and training seconds per iteration and in all (evaluations excluded)."""
    header = [
        "env",
        "objective",
        "seeds",
        "held-out reward: start",
        "held-out reward: end",
        "per seed (end)",
        "generated tokens",
        "seconds per iteration",
        "training seconds",
    ]
    rows = []
    for (env, objective), runs in groups.items():
        series = [run_series(run, "eval_reward")[1] for run in runs]
        if not any(len(values) for values in series):
            continue
        start = np.array([values[0] for values in series if len(values)])
        end = np.array([values[-1] for values in series if len(values)])
        seconds = [training_seconds(run)[-1] for run in runs]
        iterations = [sum(1 for r in run.records if "rollout_seconds" in r) for run in runs]
        rows.append(
            [
                env,
                objective,
                str(len(runs)),
                f"{format_number(start.mean())} ± {format_number(start.std(), like=start.mean())}",
                f"{format_number(end.mean())} ± {format_number(end.std(), like=end.mean())}",
                ", ".join(format_number(v, like=end.mean()) for v in end),
                f"{np.mean([run.records[-1]['global_step'] for run in runs]):,.0f}",
                f"{sum(seconds) / max(sum(iterations), 1):.1f}",
                format_number(float(np.mean(seconds))),
            ]
        )
    return header, rows


PAPER_TABLE1 = {
    "no-clip": -0.39, "clip-0.1": 0.76, "clip-0.2": 0.82, "clip-0.3": 0.70, "penalty-0.003": 0.68,
    "penalty-0.01": 0.74, "penalty-0.03": 0.71, "fixed-kl-0.3": 0.62, "fixed-kl-1": 0.71, "fixed-kl-3": 0.72,
    "fixed-kl-10": 0.69,
}  # fmt: skip
"""The PPO paper's Table 1 averages (Schulman et al. 2017: 7 MuJoCo v1 tasks, 1M steps, 3 seeds), by our label."""


def normalized_table(
    normalized: Mapping[tuple[str, str], float], objectives: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """Table 1 layout: header [objective, env..., average, paper] and one row per objective ('' where it did not
    run; the paper's column '' for settings the paper did not have)."""
    envs = sorted({env for env, _ in normalized})
    averages = average_normalized(normalized)
    header = ["objective", *envs, "average", "paper's Table 1 (7 v1 tasks)"]
    rows = []
    for objective in (o for o in objectives if o in averages):
        cells = [normalized.get((env, objective)) for env in envs]
        paper = f"{PAPER_TABLE1[objective]:.2f}" if objective in PAPER_TABLE1 else ""
        rows.append([objective, *("" if v is None else f"{v:.2f}" for v in cells), f"{averages[objective]:.2f}", paper])
    return header, rows


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


# ---------------------------------------------------------------------------------------------
# The report


NORMALIZED_SCORE_NOTE = (
    "Normalised score as in the PPO paper's Table 1: for each MuJoCo environment, score(objective) = "
    "(mean final return over seeds − random policy's return) / (best objective's mean − random policy's return), "
    "so the random policy scores 0 and the best objective of this report 1; the average column averages over the "
    "environments an objective ran on. The random policy's return is measured (uniform random actions) and cached in "
    f"{RANDOM_BASELINES_FILE}. Text environments are not normalised: their final scores are in the table above only. "
    "The last column is the paper's average (7 MuJoCo v1 tasks, 1M steps, 3 seeds, the best of its 11 settings = 1 "
    "on each task): compare orderings, since both normalisations divide by the best setting that was run."
)


HELDOUT_NOTE = (
    "eval_reward: the task's reward of one completion for each of the task's first --eval-prompts held-out prompts, "
    "with the same sampling noise at every evaluation (ppo train text --eval-every); start = before the first update, "
    "end = after the last. Training seconds sum rollout_seconds and update_seconds (evaluations excluded)."
)


@dataclass(frozen=True)
class ReportContent:
    """Everything a report shows, computed once and rendered as markdown and HTML."""

    runs: tuple[Run, ...]
    """Every run reported, grouped order."""
    scores: tuple[GroupScore, ...]
    """Final scores per (environment, objective)."""
    normalized: dict[tuple[str, str], float]
    """(env, objective) -> normalised score, MuJoCo environments only."""
    random_returns: dict[str, float]
    """MuJoCo env -> random-policy return."""
    objectives: tuple[str, ...]
    """Objective labels in the paper's order."""
    figures: dict[str, list[str]]
    """Section title -> PNG file names in the report folder."""
    samples: dict[str, SampleComparison]
    """Text env -> its sample completions side by side."""
    heldout: tuple[list[str], list[list[str]]]
    """``heldout_table``: its header and rows (no rows when no text run evaluated held-out prompts)."""


def machines_note(runs: Sequence[Run]) -> str:
    """Which machines the runs were made on: seeded walker runs repeat exactly on one machine only."""
    lines = dict.fromkeys(machine_line(machine) for run in runs for machine in run.machines)
    unrecorded = sum(1 for run in runs if not run.machines)
    parts = [f"Made on: {'; and on: '.join(lines)}." if lines else ""]
    if unrecorded:
        parts.append(f"{unrecorded} runs predate machine.json and do not say which machine made them.")
    return " ".join(part for part in parts if part)


def sample_rows_markdown(comparison: SampleComparison) -> str:
    """The sample comparison as a markdown table."""
    header = (["prompt"] if comparison.aligned else []) + list(comparison.objectives)
    rows = []
    for prompt, cells in comparison.rows:
        shown = [
            f"{markdown_cell(c)} (score {format_number(s)})"
            if comparison.aligned
            else f"**{markdown_cell(p)}** {markdown_cell(c)} (score {format_number(s)})"
            for p, c, s in cells
        ]
        rows.append(([markdown_cell(prompt)] if comparison.aligned else []) + shown)
    return markdown_table(header, rows)


def report_markdown(content: ReportContent) -> str:
    """``report.md``: tables, figure links and samples."""
    parts = [
        "# PPO comparison report",
        "",
        f"{len(content.runs)} runs in {len(content.scores)} groups (environment × objective).",
        "",
        machines_note(content.runs),
        "",
        "## Final scores",
        "",
        markdown_table(*final_scores_table(content.scores, content.normalized)),
        "",
    ]
    if content.heldout[1]:
        parts += ["## Held-out evaluation (text)", "", HELDOUT_NOTE, "", markdown_table(*content.heldout), ""]
    if content.normalized:
        header, rows = normalized_table(content.normalized, content.objectives)
        randoms = ", ".join(f"{env} {format_number(value)}" for env, value in sorted(content.random_returns.items()))
        parts += [
            "## Normalised score (PPO paper, Table 1)",
            "",
            markdown_table(header, rows),
            "",
            NORMALIZED_SCORE_NOTE,
            "",
            f"Random-policy returns: {randoms}.",
            "",
        ]
    for title, files in content.figures.items():
        parts += [f"## {title}", "", *(f"![{name}]({name})" for name in files), ""]
    for env, comparison in content.samples.items():
        parts += [
            f"## Sample completions: {env}",
            "",
            samples_note(comparison),
            "",
            sample_rows_markdown(comparison),
            "",
        ]
    return "\n".join(parts)


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML table of escaped text cells."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def report_html(content: ReportContent) -> str:
    """``index.html``: one offline page; images are relative links to PNGs in the same folder."""
    parts = [
        "<h1>PPO comparison report</h1>",
        f"<p>{len(content.runs)} runs in {len(content.scores)} groups (environment × objective). "
        "Tables: <a href='final_scores.csv'>final_scores.csv</a>"
        + (", <a href='normalized_scores.csv'>normalized_scores.csv</a>" if content.normalized else "")
        + ", <a href='report.md'>report.md</a>.</p>",
        f"<p>{html.escape(machines_note(content.runs))}</p>",
        "<h2>Final scores</h2>",
        html_table(*final_scores_table(content.scores, content.normalized)),
    ]
    if content.heldout[1]:
        parts += [
            "<h2>Held-out evaluation (text)</h2>",
            f"<p>{html.escape(HELDOUT_NOTE)}</p>",
            html_table(*content.heldout),
        ]
    if content.normalized:
        randoms = ", ".join(f"{env} {format_number(value)}" for env, value in sorted(content.random_returns.items()))
        parts += [
            "<h2>Normalised score (PPO paper, Table 1)</h2>",
            html_table(*normalized_table(content.normalized, content.objectives)),
            f"<p>{html.escape(NORMALIZED_SCORE_NOTE)}</p>",
            f"<p>Random-policy returns: {html.escape(randoms)}.</p>",
        ]
    for title, files in content.figures.items():
        parts += [
            f"<h2>{html.escape(title)}</h2>",
            *(f"<p><img src='{html.escape(name)}' alt='{html.escape(name)}'></p>" for name in files),
        ]
    for env, comparison in content.samples.items():
        header = (["prompt"] if comparison.aligned else []) + list(comparison.objectives)
        rows = [
            ([prompt] if comparison.aligned else [])
            + [(c if comparison.aligned else f"[{p}] {c}") + f"  (score {format_number(s)})" for p, c, s in cells]
            for prompt, cells in comparison.rows
        ]
        parts += [
            f"<h2>Sample completions: {html.escape(env)}</h2>",
            f"<p>{html.escape(samples_note(comparison))}</p>",
            html_table(header, rows),
        ]
    parts += [
        "<h2>Runs</h2>",
        html_table(
            ["env", "objective", "seed", "last step", "finished", "folder"],
            [
                [
                    r.env,
                    r.objective,
                    r.seed,
                    f"{r.records[-1]['global_step']:,}",
                    "yes" if r.finished else "no",
                    str(r.path),
                ]
                for r in content.runs
            ],
        ),
    ]
    style = (
        "body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}th{background:#f3f3f3}img{max-width:100%}"
    )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>PPO comparison report</title>"
        f"<style>{style}</style></head>\n<body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def write_report(
    run_dirs: Sequence[Path], out: Path, random_episodes: int = 10, random_returns: Mapping[str, float] | None = None
) -> Path:
    """Write the report of ``run_dirs`` into ``out`` and return ``out/index.html``. ``random_returns``
    (MuJoCo env -> return) replaces measuring the random-policy baselines."""
    runs = sorted(
        (run for run in map(load_run, run_dirs) if run.records),
        key=lambda r: (r.env, r.objective_order, r.objective, r.seed),
    )
    if not runs:
        raise ReportError(f"none of the {len(run_dirs)} runs has a metrics line yet; nothing to report")
    out.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runs)
    objectives = tuple(
        dict.fromkeys(run.objective for run in sorted(runs, key=lambda r: (r.objective_order, r.objective)))
    )
    colors = objective_colors(objectives)
    by_env: dict[str, dict[str, list[Run]]] = {}
    for (env, objective), members in groups.items():
        by_env.setdefault(env, {})[objective] = members

    scores = score_groups(groups)
    mujoco_envs = [env for env, env_groups in by_env.items() if next(iter(env_groups.values()))[0].kind != "text"]
    if random_returns is None:
        random_returns = random_baselines(mujoco_envs, out, random_episodes) if mujoco_envs else {}
    normalized = normalized_scores(scores, {env: random_returns[env] for env in mujoco_envs if env in random_returns})

    figures = {
        "Learning curves (mean ± 1 std over seeds)": [combined_learning_curves_figure(by_env, colors, out)]
        + [learning_curve_figure(env, env_groups, colors, out) for env, env_groups in by_env.items()],
        "KL to the old policy, clip fraction and beta": [
            diagnostics_figure(env, env_groups, colors, out) for env, env_groups in by_env.items()
        ],
    }
    text_envs = {env: env_groups for env, env_groups in by_env.items() if env not in mujoco_envs}
    if text_envs:
        figures["Text: reward vs reference KL, response length, gold vs learned, held-out reward, equal groups"] = [
            text_figure(env, g, colors, out) for env, g in text_envs.items()
        ]
    samples = {env: comparison for env, g in text_envs.items() if (comparison := compare_samples(g)) is not None}

    content = ReportContent(
        tuple(runs),
        tuple(scores),
        normalized,
        dict(random_returns),
        objectives,
        figures,
        samples,
        heldout_table({key: members for key, members in groups.items() if members[0].kind == "text"}),
    )
    write_final_scores_csv(out / "final_scores.csv", scores, normalized, random_returns)
    if normalized:
        write_normalized_csv(out / "normalized_scores.csv", normalized, objectives)
    (out / "report.md").write_text(report_markdown(content), encoding="utf-8")
    (out / "index.html").write_text(report_html(content), encoding="utf-8")
    return out / "index.html"


def default_report_dir(paths: Sequence[Path]) -> Path:
    """``<path>/report`` for one path, ``<the deepest folder holding every path>/report`` for several."""
    return (
        Path(os.path.commonpath([Path(p).resolve() for p in paths])) / "report"
        if len(paths) > 1
        else Path(paths[0]) / "report"
    )


@dataclass(frozen=True)
class ReportConfig:
    """Write a report over run folders: curves, diagnostics, final scores, normalised score, HTML (ppo report)."""

    runs: tyro.conf.Positional[tuple[Path, ...]] = ()
    """Run folders, or folders that contain runs (searched recursively), e.g. runs/compare."""
    out: Path | None = None
    """Report folder; default <the folder given>/report (several paths: <their common parent>/report)."""
    random_episodes: int = 10
    """Episodes of uniform random actions measuring each MuJoCo env's random-policy return (cached)."""


def report_cli(config: ReportConfig) -> None:
    """``ppo report``: find the runs, write the report, say where it is."""
    run_dirs = find_runs(config.runs)
    index = write_report(run_dirs, config.out or default_report_dir(config.runs), config.random_episodes)
    print(f"report of {len(run_dirs)} runs written to {index}")
