"""``ppo compare``: a grid of ordinary ``ppo train`` runs (objective presets x environments x seeds), then a report.

Every cell is a run folder ``<runs-dir>/<name>/<env>__<preset>__s<seed>`` written by
``python -m agents train ...`` (or ``train text ...``) in a subprocess, so a crashing cell is
reported and the others go on, and ``ppo train`` and ``ppo compare`` runs are interchangeable.
A re-run skips finished cells (the last metrics line reaches the budget) and resumes interrupted ones
from their checkpoints with ``ppo train --resume``. ``--jobs N`` runs N cells at a time.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Annotated, Literal

import tyro

from agents.commands.report import write_report
from agents.commands.train_args import TEXT_WORD, parse_train_args, validate_train_config
from agents.core.objectives import (
    CISPO,
    DAPO,
    GMPO,
    GRPO,
    GSPO,
    RLOO,
    SAPO,
    Clip,
    DrGRPO,
    DualClip,
    FixedKL,
    GiGPO,
    GSPOToken,
    NoClip,
    Objective,
    Penalty,
    ReinforcePP,
    ReinforcePPBaseline,
    objective_label,
)
from agents.runs.checkpoint import LATEST
from agents.runs.config import CONFIG_FILE, config_to_dict, read_config
from agents.runs.reader import ReportError, find_runs, load_run
from agents.text.config import TextTrainConfig
from agents.walkers.config import TrainConfig
from envs.mujoco import check_env_id
from envs.text.games import GAME_CONFIGS
from envs.text.models import DEFAULT_MODEL
from envs.text.tasks import TASK_CONFIGS

TEXT_PREFIX = "text:"
TEXT_TASKS = tuple(
    name
    for name, config_class in TASK_CONFIGS.items()
    if all(f.default is not MISSING or f.default_factory is not MISSING for f in fields(config_class))
) + tuple(GAME_CONFIGS)
"""Text tasks a grid can name as ``text:<task>``: those that run without options (``custom`` needs files: train it
with ppo train text), and the shipped multi-turn games (``text:guess-number``; not ``custom-game``, which needs a
file)."""
SET_BY_COMPARE = ("seed", "runs_dir", "run_name", "progress", "device", "checkpoint_every", "resume")
"""ppo train options that ppo compare sets for every cell itself (from --seeds, --runs-dir, --name, ...), so
--train-options may not name them."""
LOGS_DIR = "logs"
"""Each cell's console output goes to ``<grid>/logs/<cell>.log``."""


class GridError(ValueError):
    """The grid cannot be run as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Preset:
    """A named objective setting of the PPO paper's comparison (Table 1)."""

    name: str
    """The label of the objective, as ``ppo report`` derives it from config.json (e.g. ``clip-0.1``)."""
    objective: Objective
    """The objective config it stands for."""

    @property
    def objective_args(self) -> tuple[str, ...]:
        """The objective subcommand of ``ppo train`` and its option: ``("clip", "--clip-coef", "0.1")``."""
        name, field = self.objective.name, self.objective.label_field
        return (
            (name,) if field is None else (name, f"--{field.replace('_', '-')}", f"{getattr(self.objective, field):g}")
        )


def preset(objective: Objective) -> Preset:
    """The preset of ``objective``, named by its report label."""
    return Preset(objective_label(objective), objective)


PAPER_OBJECTIVES = (
    Clip(clip_coef=0.1),
    Clip(clip_coef=0.2),
    Clip(clip_coef=0.3),
    Penalty(kl_target=0.003),
    Penalty(kl_target=0.01),
    Penalty(kl_target=0.03),
    FixedKL(beta=0.3),
    FixedKL(beta=1.0),
    FixedKL(beta=3.0),
    FixedKL(beta=10.0),
    NoClip(),
)
"""The eleven settings of the PPO paper's Table 1, in its order."""
GROUP_OBJECTIVES = (GRPO(), DrGRPO(), RLOO(), DAPO())
"""The critic-free group methods after PPO, each with its recipe's defaults (G = 8)."""
LOSS_OBJECTIVES = (DualClip(), GSPO(), GSPOToken(), GMPO(), CISPO(), SAPO(), ReinforcePP(), ReinforcePPBaseline())
"""Round 3's policy losses (issue 28), each with its defaults."""
GAME_OBJECTIVES = (GiGPO(),)
"""Objectives for multi-turn games only (issue 27): a cell of one on a walker or a single-turn task is refused."""
PRESETS = {p.name: p for p in map(preset, PAPER_OBJECTIVES + GROUP_OBJECTIVES + LOSS_OBJECTIVES + GAME_OBJECTIVES)}
PRESET_ALIASES = {
    cls.name: objective_label(cls())
    for cls in (Clip, Penalty, FixedKL, GRPO, DrGRPO, RLOO, DAPO)
    + tuple(type(o) for o in LOSS_OBJECTIVES + GAME_OBJECTIVES)
}
"""Short names for each objective's default (``penalty`` -> ``penalty-0.01``, ``grpo`` -> ``grpo-8``)."""
PRESET_GROUPS = {
    "paper": tuple(preset(o).name for o in PAPER_OBJECTIVES),
    "group": tuple(preset(o).name for o in GROUP_OBJECTIVES),
    "losses": tuple(preset(o).name for o in LOSS_OBJECTIVES),
}
"""Names that stand for several presets: the PPO paper's eleven, the four group methods and round 3's losses."""


def known_presets() -> str:
    """The preset names, aliases and groups, for error messages."""
    aliases = ", ".join(f"{alias} ({name})" for alias, name in PRESET_ALIASES.items())
    losses = ", ".join(o.name for o in LOSS_OBJECTIVES)
    return (
        f"{', '.join(PRESETS)}; aliases {aliases}; paper (the PPO paper's eleven), group (grpo, dr-grpo, rloo, dapo), "
        f"losses ({losses})"
    )


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    env: str
    """A MuJoCo id or ``text:<task>``."""
    preset: Preset
    """The objective."""
    seed: int
    """The run's seed."""

    @property
    def is_text(self) -> bool:
        return self.env.startswith(TEXT_PREFIX)

    @property
    def name(self) -> str:
        """The run folder's name: ``<env>__<preset>__s<seed>`` (``text:sentiment`` -> ``text-sentiment``)."""
        return f"{self.env.replace(':', '-')}__{self.preset.name}__s{self.seed}"


@dataclass(frozen=True)
class CellPlan:
    """What a (re-)run of the grid does with one cell."""

    cell: Cell
    """The cell."""
    run_dir: Path
    """Its run folder."""
    action: Literal["skip", "resume", "start"]
    """skip: finished already; resume: from its checkpoint; start: from scratch."""
    command: tuple[str, ...]
    """The ``python -m agents train ...`` command line (empty for skip)."""


@dataclass(frozen=True)
class GridResult:
    """The outcome of running a grid."""

    grid_dir: Path
    """The folder holding the cells."""
    plans: tuple[CellPlan, ...]
    """Every cell, in grid order, with what was done."""
    failed: tuple[CellPlan, ...]
    """The cells whose subprocess exited non-zero."""


@dataclass(frozen=True)
class CompareConfig:
    """Run a grid of PPO runs (objective presets x environments x seeds), then write a report (ppo compare)."""

    envs: tuple[str, ...] = ("Hopper-v5",)
    """Environments: Gymnasium MuJoCo ids (Hopper-v5, ...) and/or text:sentiment, text:arithmetic, text:reasoning, and
    the multi-turn games text:guess-number, text:mastermind, text:calculator."""
    objectives: Annotated[tuple[str, ...], tyro.conf.arg(help=f"Objective presets: {known_presets()}.")] = (
        "clip",
        "penalty",
        "no-clip",
    )
    seeds: tuple[int, ...] = (1, 2, 3)
    """Seeds of every (objective, environment) pair."""
    name: str = "compare"
    """Grid folder under --runs-dir; re-running with the same name resumes the grid."""
    runs_dir: Path = Path("runs")
    """Parent folder of the grid folder."""
    jobs: int = 1
    """Cells run at the same time (subprocesses); with more than 1, each gets 1 torch thread unless told otherwise."""
    total_steps: int | None = None
    """Budget of every cell (MuJoCo steps; text: generated tokens); None = ppo train's / ppo train text's default."""
    text_total_steps: int | None = None
    """Budget of text cells in generated tokens, when it should differ from --total-steps."""
    num_steps: int | None = None
    """MuJoCo cells: steps per iteration (paper: 2048); None = ppo train's default."""
    minibatch_size: int | None = None
    """MuJoCo cells: transitions per gradient step (paper: 64); None = ppo train's default."""
    epochs: int | None = None
    """MuJoCo cells: passes over each batch (paper: 10); None = ppo train's default."""
    value_clip: bool = True
    """MuJoCo cells: clip the value update (ppo train's default); --no-value-clip passes --value-clip None."""
    normalize_observations: bool = True
    """MuJoCo cells: running observation normalisation (ppo train's default); off passes --no-normalize-observations."""
    scale_rewards: bool = True
    """MuJoCo cells: scale rewards by a running return std (ppo train's default); off passes --no-scale-rewards."""
    model: str = DEFAULT_MODEL
    """Text cells: the language model (as ppo train text --model; 'tiny' for smoke runs)."""
    prompts_per_iteration: int | None = None
    """Text cells: prompts per iteration; None = ppo train text's default (16)."""
    max_new_tokens: int | None = None
    """Text cells: token limit of a completion; None = ppo train text's default (24)."""
    eval_every: int | None = None
    """Text cells: held-out evaluation every N iterations (eval_* metrics, plotted); None = ppo train text's (never)."""
    eval_prompts: int | None = None
    """Text cells: held-out prompts per evaluation; None = ppo train text's default (64)."""
    task_options: tuple[str, ...] = ()
    """Text cells: the task's options as NAME=VALUE (operand_max=9 operations=+), given to it as --NAME VALUE."""
    train_options: tuple[str, ...] = ()
    """Any other option of ppo train (MuJoCo cells) or ppo train text (text cells) as NAME=VALUE (nproc=2,
    minibatch_size=16, preset=tuned), given to every cell as --NAME VALUE before its task and objective; a bool as
    NAME=True or NAME=False (anneal_lr=True is --anneal-lr); several values split as the shell does
    (hidden_sizes='256 256')."""
    objective_options: tuple[str, ...] = ()
    """Options of every cell's objective as NAME=VALUE (overlong_cache=0 for DAPO), given after its subcommand as
    --NAME VALUE, so every objective of the grid must have them; not the value a preset is named by (group_size of
    grpo-8): a cell's folder name must say its setting. Name the grid after the change (--name dapo-no-cache)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device of every cell (auto = cuda when available)."""
    torch_threads: int | None = None
    """torch threads per cell; None = ppo train's default (1 for MuJoCo, every core for text), or 1 with --jobs > 1."""
    compile: bool = True
    """MuJoCo cells: torch.compile the minibatch step (text cells run eager, as ppo train text does)."""
    checkpoint_every: int = 10
    """Checkpoint every this many iterations: what an interrupted cell resumes from."""
    report: bool = True
    """Write the report when the grid is done."""
    out: Path | None = None
    """Report folder; default <runs-dir>/<name>/report."""
    random_episodes: int = 10
    """Episodes of uniform random actions measuring each MuJoCo env's random-policy return (normalised score)."""
    dry_run: bool = False
    """Print what each cell would do (skip / resume / start) and its command, run nothing."""


# ---------------------------------------------------------------------------------------------
# The grid


def resolve_presets(names: Sequence[str]) -> list[Preset]:
    """Preset names, aliases and groups -> presets, in order, each once."""
    resolved: dict[str, Preset] = {}
    for name in names:
        members = PRESET_GROUPS.get(name, (PRESET_ALIASES.get(name, name),))
        for member in members:
            if member not in PRESETS:
                raise GridError(f"unknown objective preset {name!r}; known: {known_presets()}")
            resolved.setdefault(member, PRESETS[member])
    return list(resolved.values())


def check_environment(env: str) -> None:
    """A one-line error unless ``env`` is ``text:<known task>`` or a trainable MuJoCo id (envs.mujoco.check_env_id)."""
    if env.startswith(TEXT_PREFIX):
        if env[len(TEXT_PREFIX) :] not in TEXT_TASKS:
            raise GridError(
                f"unknown text task {env!r}; text environments: {', '.join(TEXT_PREFIX + task for task in TEXT_TASKS)}"
            )
    else:
        check_env_id(env)


def expand_grid(config: CompareConfig) -> list[Cell]:
    """Every cell: objectives x environments x seeds, in that nesting order, duplicates dropped."""
    empty = [
        flag
        for flag, values in (("--objectives", config.objectives), ("--envs", config.envs), ("--seeds", config.seeds))
        if not values
    ]
    if empty:
        raise GridError(f"empty grid: {' and '.join(empty)} got no values; give at least one of each")
    presets = resolve_presets(config.objectives)
    envs, seeds = list(dict.fromkeys(config.envs)), list(dict.fromkeys(config.seeds))
    return [Cell(env, p, seed) for p, env, seed in itertools.product(presets, envs, seeds)]


def cell_threads(config: CompareConfig) -> int | None:
    """--torch-threads for each cell: as given, else 1 when cells run in parallel, else ppo train's default (None)."""
    if config.torch_threads is not None:
        return config.torch_threads
    return 1 if config.jobs > 1 else None


def optional_flags(values: dict[str, int | None]) -> list[str]:
    """``--flag value`` for each value that is not None."""
    return [item for flag, value in values.items() if value is not None for item in (flag, str(value))]


def name_value_flags(options: Sequence[str], given_as: str, example: str) -> list[str]:
    """``["--operand-max", "9"]`` for ``["operand_max=9"]``, and a switch for a bool: ``anneal_lr=True`` is
    ``--anneal-lr``, ``anneal_lr=False`` ``--no-anneal-lr`` (as ppo train spells its bool options); a value is
    split as the shell splits words, so an option of several values takes them all (``hidden_sizes='256 256'`` is
    ``--hidden-sizes 256 256``) and quotes keep spaces in one. A ``GridError`` naming ``given_as`` (the compare
    option, with ``example``) for an option without ``=`` or with an unclosed quote."""
    flags = []
    for option in options:
        name, equals, value = option.partition("=")
        if not equals or not name:
            raise GridError(f"{given_as} takes NAME=VALUE (e.g. {example}), got {option!r}")
        try:
            words = shlex.split(value) or [value]
        except ValueError as error:
            raise GridError(f"{given_as} {option!r}: {error}; close the quote or leave it out") from None
        flag = name.replace("_", "-")
        switches = {"True": [f"--{flag}"], "False": [f"--no-{flag}"]}
        flags += switches.get(value, [f"--{flag}", *words])
    return flags


def check_objective_options(options: Sequence[str], presets: Iterable[Preset]) -> None:
    """A ``GridError`` for an --objective-options entry that sets the value a preset is named by (its label
    field, as ``group_size`` for ``grpo-8``): the cell's folder and the report would name another setting."""
    for option in options:
        name = option.partition("=")[0].replace("-", "_")
        for named in presets:
            if name == named.objective.label_field:
                raise GridError(
                    f"--objective-options {option!r} sets {name}, the value preset {named.name} is named by; "
                    f"run that setting with ppo train directly, or choose a preset with that value ({known_presets()})"
                )


def train_args(cell: Cell, config: CompareConfig, grid_dir: Path) -> list[str]:
    """The arguments after ``ppo train`` (MuJoCo) or ``ppo train text`` (text) that start ``cell`` from scratch."""
    shared = [
        "--seed",
        str(cell.seed),
        "--runs-dir",
        str(grid_dir),
        "--run-name",
        cell.name,
        "--no-progress",
        "--device",
        config.device,
        "--checkpoint-every",
        str(config.checkpoint_every),
    ]
    if cell.is_text:
        options = {
            "--total-steps": config.text_total_steps if config.text_total_steps is not None else config.total_steps,
            "--torch-threads": cell_threads(config),
            "--prompts-per-iteration": config.prompts_per_iteration,
            "--max-new-tokens": config.max_new_tokens,
            "--eval-every": config.eval_every,
            "--eval-prompts": config.eval_prompts,
        }
        return [
            "--model",
            config.model,
            *shared,
            *optional_flags(options),
            *name_value_flags(config.train_options, "--train-options", "minibatch_size=16"),
            cell.env[len(TEXT_PREFIX) :],
            *name_value_flags(config.task_options, "--task-options", "operand_max=9"),
            *cell.preset.objective_args,
            *name_value_flags(config.objective_options, "--objective-options", "overlong_cache=0"),
        ]
    options = {
        "--total-steps": config.total_steps,
        "--torch-threads": cell_threads(config),
        "--num-steps": config.num_steps,
        "--minibatch-size": config.minibatch_size,
        "--epochs": config.epochs,
    }
    compile_flag = "--compile" if config.compile else "--no-compile"
    switched_off = [
        *(() if config.value_clip else ("--value-clip", "None")),
        *(() if config.normalize_observations else ("--no-normalize-observations",)),
        *(() if config.scale_rewards else ("--no-scale-rewards",)),
    ]
    return [
        "--env-id",
        cell.env,
        *shared,
        compile_flag,
        *optional_flags(options),
        *switched_off,
        *name_value_flags(config.train_options, "--train-options", "nproc=2"),
        *cell.preset.objective_args,
        *name_value_flags(config.objective_options, "--objective-options", "overlong_cache=0"),
    ]


def train_command(cell: Cell, *args: str) -> tuple[str, ...]:
    """``python -m agents train [text] ARGS`` with this interpreter."""
    return (sys.executable, "-m", "agents", "train", *((TEXT_WORD,) if cell.is_text else ()), *args)


def cell_config(cell: Cell, config: CompareConfig, grid_dir: Path) -> TrainConfig | TextTrainConfig:
    """The config ``ppo train`` builds from the cell's arguments (parsed by the same parser), validated."""
    parsed = parse_train_args([*((TEXT_WORD,) if cell.is_text else ()), *train_args(cell, config, grid_dir)])
    validate_train_config(parsed)
    return parsed


def first_difference(saved, expected, where: str = "") -> str | None:
    """``'ppo.total_steps: 256 (on disk) vs 512 (asked)'`` for the first leaf that differs, else None."""
    if isinstance(saved, dict) and isinstance(expected, dict):
        for key in dict.fromkeys([*expected, *saved]):
            found = first_difference(saved.get(key), expected.get(key), f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    return None if saved == expected else f"{where}: {saved!r} (on disk) vs {expected!r} (asked)"


def results_setup(config: dict) -> dict:
    """The part of a config.json that decides a run's results: every section but ``run``, plus the seed."""
    return {
        "kind": "mujoco",
        **{key: value for key, value in config.items() if key != "run"},
        "seed": config.get("run", {}).get("seed"),
    }


def check_same_setup(run_dir: Path, expected: TrainConfig | TextTrainConfig) -> None:
    """Refuse to skip or resume a cell folder whose run was made with another setup (budget, objective, ...)."""
    difference = first_difference(results_setup(read_config(run_dir)), results_setup(config_to_dict(expected)))
    if difference:
        raise GridError(
            f"{run_dir} holds a run with another setup ({difference}); pick another --name or remove that folder"
        )


def plan_cell(cell: Cell, config: CompareConfig, grid_dir: Path) -> CellPlan:
    """Skip a finished cell, resume one with a checkpoint, start the rest (checking every setting first)."""
    run_dir = grid_dir / cell.name
    expected = cell_config(cell, config, grid_dir)
    if (run_dir / CONFIG_FILE).is_file():
        check_same_setup(run_dir, expected)
        if load_run(run_dir).finished:
            return CellPlan(cell, run_dir, "skip", ())
    if (run_dir / "checkpoints" / LATEST).is_file():
        return CellPlan(cell, run_dir, "resume", train_command(cell, "--resume", str(run_dir), "--no-progress"))
    return CellPlan(cell, run_dir, "start", train_command(cell, *train_args(cell, config, grid_dir)))


# ---------------------------------------------------------------------------------------------
# Running


Runner = Callable[[Sequence[str], Path], int]
"""Runs a command with its output appended to a log file; returns the exit status."""


def run_logged(command: Sequence[str], log_path: Path) -> int:
    """Run ``command`` in a subprocess, stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        return subprocess.run(
            list(command), stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        ).returncode


def last_line(path: Path) -> str:
    """The last non-empty line of a log (a failed ``ppo train`` ends with ``error: ...`` or a traceback's last line)."""
    lines = (
        [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        if path.is_file()
        else []
    )
    return lines[-1] if lines else "(no output)"


def cell_log(grid_dir: Path, cell: Cell) -> Path:
    """Where a cell's console output goes."""
    return grid_dir / LOGS_DIR / f"{cell.name}.log"


def execute(plan: CellPlan, runner: Runner, log_path: Path) -> int:
    """Run one cell. A folder without a checkpoint is a run killed before its first one: nothing to resume,
    so it is cleared and the cell starts afresh (``ppo train`` would otherwise append to its metrics)."""
    if plan.action == "start" and plan.run_dir.exists():
        shutil.rmtree(plan.run_dir)
    print(f"{plan.cell.name}: {'resuming' if plan.action == 'resume' else 'starting'} (log: {log_path})", flush=True)
    return runner(plan.command, log_path)


def run_grid(config: CompareConfig, runner: Runner | None = None) -> GridResult:
    """Check the whole grid, then run every cell that is not finished, ``config.jobs`` at a time, each with
    ``runner`` (default ``run_logged``: a subprocess)."""
    if config.jobs < 1:
        raise GridError(f"--jobs must be a positive integer, got {config.jobs}")
    if not config.name.strip():
        raise GridError("--name must not be empty")
    if config.random_episodes < 1:
        raise GridError(f"--random-episodes must be a positive integer, got {config.random_episodes}")
    for option in config.train_options:
        if option.partition("=")[0].replace("-", "_") in SET_BY_COMPARE:
            raise GridError(f"--train-options {option!r}: ppo compare sets that itself; use its own option instead")
    cells = expand_grid(config)
    check_objective_options(config.objective_options, [cell.preset for cell in cells])
    for env in dict.fromkeys(cell.env for cell in cells):
        check_environment(env)
    grid_dir = config.runs_dir / config.name
    plans = tuple(plan_cell(cell, config, grid_dir) for cell in cells)
    counts = {action: sum(p.action == action for p in plans) for action in ("skip", "resume", "start")}
    print(
        f"{grid_dir}: {len(plans)} cells: {counts['skip']} finished, {counts['resume']} to resume, "
        f"{counts['start']} to start",
        flush=True,
    )
    if config.dry_run:
        for plan in plans:
            print(f"{plan.cell.name}: {plan.action}" + (f": {shlex.join(plan.command)}" if plan.command else ""))
        return GridResult(grid_dir, plans, ())
    todo = [plan for plan in plans if plan.action != "skip"]
    failed = []
    with ThreadPoolExecutor(max_workers=config.jobs) as pool:
        running = {
            pool.submit(execute, plan, runner or run_logged, cell_log(grid_dir, plan.cell)): plan for plan in todo
        }
        for future in as_completed(running):
            plan, status = running[future], future.result()
            if status != 0:
                failed.append(plan)
            print(f"{plan.cell.name}: {'done' if status == 0 else f'FAILED (exit {status})'}", flush=True)
    return GridResult(grid_dir, plans, tuple(p for p in plans if p in failed))


def compare_cli(config: CompareConfig) -> int:
    """``ppo compare``: run the grid, write the report, list failed cells; returns the exit status
    (1 if any cell failed).
    """
    result = run_grid(config)
    if config.report and not config.dry_run:
        try:
            run_dirs = find_runs([result.grid_dir])
        except (ReportError, FileNotFoundError) as error:
            print(f"no report: {error}")
        else:
            print(
                "report written to "
                f"{write_report(run_dirs, config.out or result.grid_dir / 'report', config.random_episodes)}"
            )
    if result.failed:
        print(
            f"{len(result.failed)} of {len(result.plans)} cells failed (re-run the same command to retry them):",
            file=sys.stderr,
        )
        for plan in result.failed:
            log_path = cell_log(result.grid_dir, plan.cell)
            print(f"  {plan.cell.name}: {last_line(log_path)} (log: {log_path})", file=sys.stderr)
        return 1
    return 0
