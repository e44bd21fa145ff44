"""What both worlds' command-line configs share: run bookkeeping, the objective subcommands, and config.json.

A training config is a tree of frozen dataclasses. ``config_to_dict`` writes it as JSON; a member of
a union of named configs (an objective, a text task) records its ``name`` class attribute, so
``config_from_dict`` can rebuild exactly the member that was chosen.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro

from agents.core.config import ConfigError, check_positive_ints
from agents.core.objectives import OBJECTIVES

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class RunConfig:
    """Where the run goes, how it is seeded, and what it runs on."""

    seed: int = 1
    """Seeds torch, numpy and the environments."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto = cuda when available, else cpu. Networks live there; environments stay on the CPU."""
    torch_threads: int = 1
    """torch.set_num_threads; 0 = every core. 1 is fastest for small MLPs on a 2-core CPU, big LMs want every core."""
    compile: bool = True
    """torch.compile the minibatch step (forward, backward and Adam in one graph); falls back to eager if it fails."""
    runs_dir: Path = Path("runs")
    """Parent folder of run folders."""
    run_name: str | None = None
    """Run folder name; default <env>__<objective>__s<seed>__<timestamp>."""
    checkpoint_every: int = 10
    """Write checkpoints/latest.pt every this many iterations (and always at the end)."""
    resume: Path | None = None
    """Resume the run in this folder from its latest checkpoint, with its saved config (other options are ignored)."""
    progress: bool = True
    """Show a progress bar with steps/s and the recent return."""
    nproc: int = 1
    """Processes on this machine, started by torchrun's launcher (docs/scaling.md); --resume starts as many again."""


def validate_run(run: RunConfig) -> None:
    """``ConfigError`` for the first impossible run setting."""
    check_positive_ints({"--checkpoint-every": run.checkpoint_every, "--nproc": run.nproc})
    if run.torch_threads < 0:
        raise ConfigError(f"--torch-threads must be >= 0 (0 = every core), got {run.torch_threads}")


def named_union(configs: dict[str, type]) -> object:
    """A union of tyro subcommands, one per ``name -> config class`` entry (``ppo train penalty ...``)."""
    members = tuple(Annotated[cls, tyro.conf.subcommand(name)] for name, cls in configs.items())
    return Union[members]  # noqa: UP007 - a union built at run time has no X | Y spelling


ObjectiveSubcommand = named_union(OBJECTIVES)
"""The objective as tyro subcommands, one per entry of the core's registry."""


def _to_json(value):
    if dataclasses.is_dataclass(value):
        data = {field.name: _to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
        name = getattr(type(value), "name", None)
        return {"name": name, **data} if isinstance(name, str) else data
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def config_to_dict(config) -> dict:
    """A JSON-ready dict of a training config, with its ``kind`` ('mujoco' or 'text') first."""
    return {"kind": type(config).kind, **_to_json(config)}


def _union_members(annotation) -> list:
    """The members of a (possibly Annotated) union, each with its Annotated wrapper removed."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [_union_members(arg)[0] for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def _from_json(annotation, value):
    if value is None:
        return None
    members = _union_members(annotation)
    if isinstance(value, dict) and "name" in value:
        named = {getattr(member, "name", None): member for member in members if dataclasses.is_dataclass(member)}
        if value["name"] not in named:
            raise KeyError(f"unknown name {value['name']!r}; known: {sorted(n for n in named if n)}")
        fields = dict(value)
        return _dataclass_from_json(named[fields.pop("name")], fields)
    if len(members) == 1 and dataclasses.is_dataclass(members[0]):
        return _dataclass_from_json(members[0], value)
    if Path in members:
        return Path(value)
    if any(typing.get_origin(member) is tuple for member in members):
        return tuple(value)
    return value


def _dataclass_from_json(cls, data: dict):
    hints = typing.get_type_hints(cls, include_extras=True)
    names = {field.name for field in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise KeyError(f"unknown field(s) {sorted(unknown)} for {cls.__name__}")
    return cls(**{name: _from_json(hints[name], item) for name, item in data.items()})


def config_from_dict(cls: type, data: dict):
    """Inverse of ``config_to_dict`` for a config of class ``cls``; a one-line ValueError naming the first
    piece that does not fit (another kind of run, an unknown or missing field)."""
    fields = dict(data)
    kind = fields.pop("kind", "mujoco")
    if kind != cls.kind:
        raise ValueError(f"config.json is of a {kind} run, not a {cls.kind} run")
    try:
        return _dataclass_from_json(cls, fields)
    except (KeyError, TypeError) as error:
        raise ValueError(f"config.json does not match this version of ppo ({error!r}); start a new run") from error


def write_config(run_dir: Path, config: dict) -> None:
    """``config.json``: the exact config of the run, reloadable with ``config_from_dict``."""
    (run_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def read_config(run_dir: Path) -> dict:
    """The dict ``write_config`` wrote; a one-line error if the folder is not a run."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no {CONFIG_FILE}); pass a folder under runs/")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); the run's config is damaged") from error
