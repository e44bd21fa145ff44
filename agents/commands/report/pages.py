"""The report's two pages, ``report.md`` and ``index.html``, rendered from one list of sections: every block of a
section (paragraph, table, figures, sample completions) renders itself as markdown and as HTML, so a section
cannot appear on one page and not the other. Also the tables' text cells and the sample completions lined up."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from agents.commands.report.scores import (
    PAPER_TABLE1,
    RANDOM_BASELINES_FILE,
    GroupScore,
    average_normalized,
    run_series,
    score_measure,
    training_seconds,
)
from agents.runs.logger import SAMPLES_FILE, markdown_cell, markdown_table, read_jsonl
from agents.runs.machine import machine_line
from agents.runs.reader import Run

REPORT_TITLE = "PPO comparison report"
MARKDOWN_FILE = "report.md"
HTML_FILE = "index.html"
FINAL_SCORES_FILE = "final_scores.csv"
NORMALIZED_SCORES_FILE = "normalized_scores.csv"

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


# ---------------------------------------------------------------------------------------------
# Sample completions


@dataclass(frozen=True)
class SampleComparison:
    """Sample completions of one text environment, one column per objective."""

    aligned: bool
    """True: rows are prompts every objective's last samples share; False: row i is each objective's i-th sample."""
    objectives: tuple[str, ...]
    """Column labels: ``<objective> (seed s, iteration i)``."""
    rows: tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...]
    """(shared prompt or '', one (prompt, completion, score) per objective, '' where an objective has fewer samples)."""


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


def runs_table(runs: Sequence[Run]) -> tuple[list[str], list[list[str]]]:
    """Every run reported: its group, seed, last step, whether it finished and its folder."""
    header = ["env", "objective", "seed", "last step", "finished", "folder"]
    rows = [
        [
            r.env,
            r.objective,
            str(r.seed),
            f"{r.records[-1]['global_step']:,}",
            "yes" if r.finished else "no",
            str(r.path),
        ]
        for r in runs
    ]
    return header, rows


def machines_note(runs: Sequence[Run]) -> str:
    """Which machines the runs were made on: seeded walker runs repeat exactly on one machine only."""
    lines = dict.fromkeys(machine_line(machine) for run in runs for machine in run.machines)
    unrecorded = sum(1 for run in runs if not run.machines)
    parts = [f"Made on: {'; and on: '.join(lines)}." if lines else ""]
    if unrecorded:
        parts.append(f"{unrecorded} runs predate machine.json and do not say which machine made them.")
    return " ".join(part for part in parts if part)


# ---------------------------------------------------------------------------------------------
# Blocks: each renders itself on both pages


class Block(Protocol):
    """Part of a section, written on both pages."""

    def markdown(self) -> str:
        """The block in ``report.md``."""

    def html(self) -> str:
        """The block in ``index.html``."""


@dataclass(frozen=True)
class Paragraph:
    """Plain text."""

    text: str

    def markdown(self) -> str:
        return self.text

    def html(self) -> str:
        return f"<p>{html.escape(self.text)}</p>"


@dataclass(frozen=True)
class Summary:
    """A sentence, then links to the report's tables and to the same report on the other page."""

    text: str
    tables: tuple[str, ...]
    """File names of the CSV tables in the report folder."""

    def markdown(self) -> str:
        return f"{self.text} Tables: " + ", ".join(f"[{name}]({name})" for name in (*self.tables, HTML_FILE)) + "."

    def html(self) -> str:
        links = ", ".join(
            f"<a href='{html.escape(name)}'>{html.escape(name)}</a>" for name in (*self.tables, MARKDOWN_FILE)
        )
        return f"<p>{html.escape(self.text)} Tables: {links}.</p>"


@dataclass(frozen=True)
class Table:
    """A table of text cells."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]

    def markdown(self) -> str:
        return markdown_table(
            [markdown_cell(h) for h in self.header], [[markdown_cell(c) for c in row] for row in self.rows]
        )

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@dataclass(frozen=True)
class Images:
    """PNGs in the report folder, one after the other, by relative link."""

    names: Sequence[str]

    def markdown(self) -> str:
        return "\n".join(f"![{name}]({name})" for name in self.names)

    def html(self) -> str:
        return "\n".join(f"<p><img src='{html.escape(name)}' alt='{html.escape(name)}'></p>" for name in self.names)


@dataclass(frozen=True)
class SampleTable:
    """Sample completions side by side; a completion's prompt goes into its cell unless the rows are prompts."""

    comparison: SampleComparison

    def header(self) -> list[str]:
        return (["prompt"] if self.comparison.aligned else []) + list(self.comparison.objectives)

    def markdown(self) -> str:
        aligned, rows = self.comparison.aligned, []
        for prompt, cells in self.comparison.rows:
            shown = [
                f"{markdown_cell(c)} (score {format_number(s)})"
                if aligned
                else f"**{markdown_cell(p)}** {markdown_cell(c)} (score {format_number(s)})"
                for p, c, s in cells
            ]
            rows.append(([markdown_cell(prompt)] if aligned else []) + shown)
        return markdown_table(self.header(), rows)

    def html(self) -> str:
        aligned = self.comparison.aligned
        rows = [
            ([prompt] if aligned else [])
            + [(c if aligned else f"[{p}] {c}") + f"  (score {format_number(s)})" for p, c, s in cells]
            for prompt, cells in self.comparison.rows
        ]
        return Table(self.header(), rows).html()


@dataclass(frozen=True)
class Section:
    """A titled part of the report ('' for the opening, which has no heading of its own)."""

    title: str
    blocks: tuple[Block, ...]


# ---------------------------------------------------------------------------------------------
# The report


def report_sections(
    runs: Sequence[Run],
    groups: Mapping[tuple[str, str], Sequence[Run]],
    scores: Sequence[GroupScore],
    normalized: Mapping[tuple[str, str], float],
    random_returns: Mapping[str, float],
    objectives: Sequence[str],
    figures: Mapping[str, Sequence[str]],
) -> list[Section]:
    """Everything a report shows, in order: counts and links, final scores, the held-out table (text runs with
    ``--eval-every``), the normalised score (MuJoCo), the figures (section title -> PNG names), each text
    environment's sample completions and the list of runs."""
    tables = (FINAL_SCORES_FILE, NORMALIZED_SCORES_FILE) if normalized else (FINAL_SCORES_FILE,)
    sections = [
        Section(
            "",
            (
                Summary(f"{len(runs)} runs in {len(scores)} groups (environment × objective).", tables),
                Paragraph(machines_note(runs)),
            ),
        ),
        Section("Final scores", (Table(*final_scores_table(scores, normalized)),)),
    ]
    text_groups = {key: members for key, members in groups.items() if members[0].kind == "text"}
    heldout = heldout_table(text_groups)
    if heldout[1]:
        sections.append(Section("Held-out evaluation (text)", (Paragraph(HELDOUT_NOTE), Table(*heldout))))
    if normalized:
        randoms = ", ".join(f"{env} {format_number(value)}" for env, value in sorted(random_returns.items()))
        sections.append(
            Section(
                "Normalised score (PPO paper, Table 1)",
                (
                    Table(*normalized_table(normalized, objectives)),
                    Paragraph(NORMALIZED_SCORE_NOTE),
                    Paragraph(f"Random-policy returns: {randoms}."),
                ),
            )
        )
    sections += [Section(title, (Images(names),)) for title, names in figures.items()]
    text_envs: dict[str, dict[str, Sequence[Run]]] = {}
    for (env, objective), members in text_groups.items():
        text_envs.setdefault(env, {})[objective] = members
    for env, env_groups in text_envs.items():
        comparison = compare_samples(env_groups)
        if comparison is not None:
            sections.append(
                Section(
                    f"Sample completions: {env}",
                    (Paragraph(samples_note(comparison)), SampleTable(comparison)),
                )
            )
    sections.append(Section("Runs", (Table(*runs_table(runs)),)))
    return sections


def report_markdown(sections: Sequence[Section]) -> str:
    """``report.md``: the sections as markdown, figures as relative image links."""
    parts = [f"# {REPORT_TITLE}", ""]
    for section in sections:
        parts += [f"## {section.title}", ""] if section.title else []
        for block in section.blocks:
            parts += [block.markdown(), ""]
    return "\n".join(parts)


def report_html(sections: Sequence[Section]) -> str:
    """``index.html``: the sections on one offline page; images are relative links to PNGs in the same folder."""
    parts = [f"<h1>{REPORT_TITLE}</h1>"]
    for section in sections:
        parts += [f"<h2>{html.escape(section.title)}</h2>"] if section.title else []
        parts += [block.html() for block in section.blocks]
    style = (
        "body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}th{background:#f3f3f3}img{max-width:100%}"
    )
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{REPORT_TITLE}</title>"
        f"<style>{style}</style></head>\n<body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
