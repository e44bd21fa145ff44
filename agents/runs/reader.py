"""Reading run folders: a run's config.json and metrics.jsonl, as ``ppo report`` and ``ppo compare`` need them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from agents.core.objectives import (
    OBJECTIVES,
    REFERENCE_KL_COEF,
    Objective,
    objective_from_dict,
    objective_label,
    reference_kl_coef_at,
)
from agents.runs.config import CONFIG_FILE, read_config
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.runs.machine import MachineRecord, read_machines


class ReportError(ValueError):
    """The runs asked for cannot be reported; the message says why."""


@dataclass(frozen=True)
class Run:
    """One run folder, read."""

    path: Path
    """The run folder."""
    kind: str
    """'mujoco' or 'text'."""
    env: str
    """The environment: a MuJoCo id (``Hopper-v5``) or ``text:<task>``."""
    objective: str
    """The objective label, e.g. ``clip-0.2`` (see ``objective_label``), plus ``run_variant``'s note."""
    objective_order: tuple[int, float]
    """Sort key: objective family in the registry's (the paper's) order, then its parameter."""
    uses_beta: bool
    """Whether the objective has a KL coefficient worth a plot (it is 0 for the others)."""
    seed: int
    """``run.seed`` of the config."""
    budget_step: int
    """The ``global_step`` at which the run is finished (its last iteration's, for MuJoCo)."""
    records: tuple[dict, ...]
    """metrics.jsonl, one dict per iteration."""
    machines: tuple[MachineRecord, ...] = ()
    """machine.json: the machines it ran on, in order (empty for runs made before it was written)."""

    @property
    def finished(self) -> bool:
        """Whether the last metrics line reaches the run's budget."""
        return bool(self.records) and self.records[-1]["global_step"] >= self.budget_step


def objective_of(config: Mapping) -> Objective:
    """The objective a config.json names (``{"name": "clip", "clip_coef": 0.2}``), from the core's registry."""
    return objective_from_dict(config.get("objective", {"name": "clip"}))


def environment_name(config: Mapping) -> str:
    """A MuJoCo config's ``env.env_id``, or ``text:<task>`` for a text config."""
    if config.get("kind", "mujoco") == "text":
        return f"text:{config['text']['task']['name']}"
    return config["env"]["env_id"]


def run_variant(config: Mapping, objective: Objective) -> str:
    """`` (no value clip, no obs norm, no reward scaling)``: the default details a MuJoCo run switched off, or
    ``""``; on text, the critic's multi-turn credit options that differ from the default
    (`` (bi-level GAE, turn gamma 0.9, critic warm-up 2)``) and a reference KL other than the objective's recipe
    (`` (no reference KL)``); in both worlds, the objective's settings other than its defaults and its label's
    (`` (overlong cache 0)``).

    Runs that differ in them must not be averaged together in a report (Table 1 studies them: results.md).
    """
    if config.get("kind", "mujoco") == "text":
        text = config["text"]
        changed = [
            *(("bi-level GAE",) if text.get("multi_turn_gae", "token") == "bi-level" else ()),
            *((f"turn gamma {text['turn_gamma']:g}",) if text.get("turn_gamma", 1.0) != 1.0 else ()),
            *((f"critic warm-up {text['critic_warmup']}",) if text.get("critic_warmup", 0) else ()),
            *reference_kl_change(text, objective),
        ]
    else:
        changed = [
            *(("no value clip",) if config["ppo"].get("value_clip", 0.2) is None else ()),
            *(("no obs norm",) if not config["env"].get("normalize_observations", True) else ()),
            *(("no reward scaling",) if not config["env"].get("scale_rewards", True) else ()),
        ]
    changed += objective_changes(objective)
    return f" ({', '.join(changed)})" if changed else ""


def reference_kl_change(text: Mapping, objective: Objective) -> tuple[str, ...]:
    """``("no reference KL",)`` or ``("k2 reference KL 0.04 in the loss",)`` when a text run's KL to the reference
    (placement, coefficient, estimator) is not its objective's recipe; ``()`` when it is."""
    recipe = objective.recipe_reference_kl
    placement = text.get("ref_kl_in") or recipe
    coef = reference_kl_coef_at(placement, text.get("ref_kl_coef"))
    estimator = text.get("ref_kl_estimator", "k3")
    if (placement, coef, estimator) == (recipe, REFERENCE_KL_COEF[recipe], "k3"):
        return ()
    if coef == 0:
        return ("no reference KL",) if REFERENCE_KL_COEF[recipe] else ()
    prefix = f"{estimator} " if estimator != "k3" else ""
    return (f"{prefix}reference KL {coef:g} in the {placement}",)


def objective_changes(objective: Objective) -> list[str]:
    """``["overlong cache 0"]``: the objective's settings that differ from its defaults, the label's one aside."""
    default = type(objective)()
    return [
        f"{field.name.replace('_', ' ')} {setting_text(getattr(objective, field.name))}"
        for field in fields(objective)
        if field.name != objective.label_field and getattr(objective, field.name) != getattr(default, field.name)
    ]


def setting_text(value: object) -> str:
    """A setting as a label shows it: ``0.28``, ``on``/``off`` for a bool, ``none`` for None."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def budget_step(config: Mapping) -> int:
    """The ``global_step`` of a finished run: MuJoCo runs stop after ``total_steps // batch`` whole
    iterations; text runs stop once ``total_steps`` tokens are generated."""
    total = config["ppo"]["total_steps"]
    if config.get("kind", "mujoco") == "text":
        return total
    batch = config["env"]["num_steps"] * config["env"].get("num_envs", 1)
    return total // batch * batch


def load_run(path: Path) -> Run:
    """Read a run folder's config.json and metrics.jsonl."""
    config = read_config(path)
    try:
        objective = objective_of(config)
        return Run(
            path=Path(path),
            kind=config.get("kind", "mujoco"),
            env=environment_name(config),
            objective=objective_label(objective) + run_variant(config, objective),
            objective_order=(
                list(OBJECTIVES).index(objective.name),
                getattr(objective, objective.label_field or "", 0.0),
            ),
            uses_beta=objective.uses_beta,
            seed=config["run"]["seed"],
            budget_step=budget_step(config),
            records=tuple(read_jsonl(Path(path) / METRICS_FILE)),
            machines=tuple(read_machines(Path(path))),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ReportError(
            f"{path}/{CONFIG_FILE} is not a ppo run config ({error}); pass run folders of ppo train or ppo compare"
        ) from error


def is_run_dir(path: Path) -> bool:
    """A run folder holds config.json and metrics.jsonl (a text run's ``policy/`` has a config.json but no metrics)."""
    return (path / CONFIG_FILE).is_file() and (path / METRICS_FILE).is_file()


def find_runs(paths: Sequence[Path]) -> list[Path]:
    """The run folders among ``paths`` and below them, in order, each once; a clear error for a
    missing path, a folder without runs, or no paths at all."""
    if not paths:
        raise ReportError(
            "no run folders given; pass run folders or folders that contain runs, e.g. ppo report runs/compare"
        )
    found: dict[Path, Path] = {}
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        runs = (
            [path] if is_run_dir(path) else sorted(p.parent for p in path.rglob(METRICS_FILE) if is_run_dir(p.parent))
        )
        if not runs:
            raise ReportError(f"no runs under {path} (a run folder holds {CONFIG_FILE} and {METRICS_FILE})")
        for run in runs:
            found.setdefault(run.resolve(), run)
    return list(found.values())
