"""``ppo report``: learning curves, KL/clipping diagnostics, text plots, final-score tables and the PPO
paper's normalised score (Table 1), over any run folders written by ``ppo train`` or ``ppo compare``.

Runs are grouped by (environment, objective label); the label comes from config.json (``clip-0.2``,
``penalty-0.01``, ``fixed-kl-3``, ``no-clip``, plus e.g. `` (no value clip, no obs norm)`` for MuJoCo runs
with default details switched off), so runs from both commands group identically.
Everything lands in one folder: PNGs, CSV and markdown tables, ``report.md`` and ``index.html``.

This module is the command (``ReportConfig``, ``report_cli``, ``write_report``); ``scores`` holds the numbers,
``figures`` the PNGs and ``pages`` the two pages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

from agents.commands.report.figures import objective_colors, write_figures
from agents.commands.report.pages import (
    FINAL_SCORES_FILE,
    HTML_FILE,
    MARKDOWN_FILE,
    NORMALIZED_SCORES_FILE,
    report_html,
    report_markdown,
    report_sections,
)
from agents.commands.report.scores import (
    group_runs,
    normalized_scores,
    random_baselines,
    score_groups,
    write_final_scores_csv,
    write_normalized_csv,
)
from agents.runs.reader import ReportError, Run, find_runs, load_run


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
    by_env: dict[str, dict[str, list[Run]]] = {}
    for (env, objective), members in groups.items():
        by_env.setdefault(env, {})[objective] = members

    scores = score_groups(groups)
    mujoco_envs = [env for env, env_groups in by_env.items() if next(iter(env_groups.values()))[0].kind != "text"]
    if random_returns is None:
        random_returns = random_baselines(mujoco_envs, out, random_episodes) if mujoco_envs else {}
    normalized = normalized_scores(scores, {env: random_returns[env] for env in mujoco_envs if env in random_returns})
    figures = write_figures(by_env, objective_colors(objectives), out)

    write_final_scores_csv(out / FINAL_SCORES_FILE, scores, normalized, random_returns)
    if normalized:
        write_normalized_csv(out / NORMALIZED_SCORES_FILE, normalized, objectives)
    sections = report_sections(runs, groups, scores, normalized, random_returns, objectives, figures)
    (out / MARKDOWN_FILE).write_text(report_markdown(sections), encoding="utf-8")
    (out / HTML_FILE).write_text(report_html(sections), encoding="utf-8")
    return out / HTML_FILE


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
