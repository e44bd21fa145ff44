"""Every figure of the report, written as PNGs into the report folder: learning curves (per environment, and all
environments side by side when there are several), the KL and clipping diagnostics, and the text plots. The only
module of the project that imports matplotlib (an import-linter contract in pyproject.toml says so)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agents.commands.report.scores import TEXT_SMOOTHING, TRAINING_SECONDS, Curve, mean_curve, run_series
from agents.runs.reader import Run

FIGURE_DPI = 100
CURVE_FIGSIZE = (6.4, 4.0)
"""Inches of one environment's learning-curve figure (640 x 400 pixels at FIGURE_DPI)."""
PANEL_FIGSIZE = (4.8, 3.6)
"""Inches of each panel of the multi-panel figures (combined curves, diagnostics, text)."""
COMBINED_COLUMNS = 3


def file_slug(env: str) -> str:
    """A file-name-safe form of an environment name: ``text:sentiment`` -> ``text-sentiment``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", env)


def objective_colors(labels: Sequence[str]) -> dict[str, tuple]:
    """One colour per objective label, the same in every figure."""
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
    add_legend(axes)


def add_legend(panel: Axes) -> None:
    """The panel's legend; a panel none of the runs drew on (``ref_kl`` where no run has a reference model, say)
    says so in its middle instead, where matplotlib would warn that there is nothing to put in a legend."""
    if panel.get_legend_handles_labels()[1]:
        panel.legend(fontsize="small")
    else:
        panel.text(0.5, 0.5, "not logged by these runs", ha="center", va="center", transform=panel.transAxes,
                   color="grey")  # fmt: skip


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
        values = np.concatenate([run_series(r, key)[1] for runs in groups.values() for r in runs])
        # a log axis needs positive values, and more than one (a constant series gives it singular limits)
        if key in ("beta", "kl_after_update") and values.size and np.all(values > 0) and np.ptp(values) > 0:
            panel.set_yscale("log")
        panel.set_title(f"{env}: {title}", fontsize="medium")
        panel.set_xlabel("generated tokens" if kind == "text" else "environment steps")
        panel.grid(alpha=0.3)
        add_legend(panel)
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
    reward (``--eval-every``) against generated tokens and against training seconds, the share of
    zero-variance groups (group objectives), and the policy's turns per episode (multi-turn games)."""
    runs = [run for group in env_groups.values() for run in group]
    gold, heldout, groups, turns = (
        has_gold_and_learned(runs),
        logs_any(runs, "eval_reward"),
        logs_any(runs, "zero_variance_groups"),
        logs_any(runs, "task_turns"),
    )
    panels = 2 + gold + 2 * heldout + groups + turns
    figure, axes = new_figure(panels, columns=3 if panels > 3 else None)
    frontier, length, *extra = axes
    gold_panel = extra.pop(0) if gold else None
    tokens_panel, seconds_panel = (extra.pop(0), extra.pop(0)) if heldout else (None, None)
    groups_panel = extra.pop(0) if groups else None
    turns_panel = extra.pop(0) if turns else None
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
        if turns_panel is not None:
            plot_curve(turns_panel, mean_curve(group, "task_turns", smoothing=TEXT_SMOOTHING), objective, color)
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
    if turns_panel is not None:
        turns_panel.set(title=f"{env}: turns per episode", xlabel="generated tokens", ylabel="task_turns")
    for panel in axes:
        panel.grid(alpha=0.3)
        add_legend(panel)
    return save_figure(figure, out / f"text_{file_slug(env)}.png")


def write_figures(
    by_env: Mapping[str, Mapping[str, Sequence[Run]]], colors: Mapping[str, tuple], out: Path
) -> dict[str, list[str]]:
    """Every figure of the report into ``out``: section title -> PNG file names, each figure once. The combined
    learning curves only when there are several environments: with one it would repeat that environment's figure."""
    combined = [combined_learning_curves_figure(by_env, colors, out)] if len(by_env) > 1 else []
    figures = {
        "Learning curves (mean ± 1 std over seeds)": combined
        + [learning_curve_figure(env, env_groups, colors, out) for env, env_groups in by_env.items()],
        "KL to the old policy, clip fraction and beta": [
            diagnostics_figure(env, env_groups, colors, out) for env, env_groups in by_env.items()
        ],
    }
    text_envs = {
        env: env_groups for env, env_groups in by_env.items() if next(iter(env_groups.values()))[0].kind == "text"
    }
    if text_envs:
        figures[
            "Text: reward vs reference KL, response length, gold vs learned, held-out reward, equal groups, turns"
        ] = [text_figure(env, env_groups, colors, out) for env, env_groups in text_envs.items()]
    return figures
