"""Starting, resuming and checkpointing a run, the same way for both worlds.

``prepare_run`` turns what the user asked for into the config to run (the saved one when resuming),
validated, with torch's thread count set, the device chosen and the checkpoint loaded;
``open_run_folder`` makes the run folder (or reopens it) and its logger; ``LoopState`` is the shape of
each training loop's resumable state.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

import torch

from agents.runs.checkpoint import LATEST, load_checkpoint, save_checkpoint
from agents.runs.config import RunConfig, config_from_dict, config_to_dict, read_config, write_config
from agents.runs.logger import RunLogger

Config = TypeVar("Config")


class LoopState(Protocol):
    """A training loop's resumable state: everything that decides the rest of the run, as one record.

    ``state_dict`` gives it in storable form (tensors, numbers, lists, dicts); ``load_state_dict``
    restores it and raises ``CheckpointError`` for a checkpoint that does not fit.
    """

    global_step: int
    iteration: int

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class PreparedRun(NamedTuple, Generic[Config]):
    """A run about to be built."""

    config: Config
    """The config to run: the saved one when resuming (with ``run.resume`` and ``run.progress`` as asked)."""
    device: torch.device
    """Where the networks live."""
    checkpoint: dict | None
    """The checkpoint to resume from, or None for a new run."""


def resolve_device(requested: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; an explicit ``cuda`` without a GPU is an error."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but torch sees no CUDA device; use --device auto or cpu")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def prepare_run(config: Config, validate: Callable[[Config], None]) -> PreparedRun[Config]:
    """Reload the saved config when ``config.run.resume`` is set, validate, set torch's threads, choose the
    device and load the checkpoint."""
    resume_dir = config.run.resume
    if resume_dir is not None:
        saved_dict = read_config(resume_dir)
        if saved_dict.get("kind", "mujoco") != type(config).kind:
            kind = saved_dict.get("kind", "mujoco")
            raise ValueError(
                f"{resume_dir} is a {kind} run, not a {type(config).kind} run; resume it with the command "
                "that started it (ppo train --resume for walkers, ppo train text --resume for text)"
            )
        saved = config_from_dict(type(config), saved_dict)
        config = replace(saved, run=replace(saved.run, resume=resume_dir, progress=config.run.progress))
    validate(config)
    torch.set_num_threads(config.run.torch_threads or os.cpu_count() or 1)
    device = resolve_device(config.run.device)
    checkpoint = load_checkpoint(resume_dir, map_location=device) if resume_dir is not None else None
    return PreparedRun(config, device, checkpoint)


def new_run_dir(run: RunConfig, subject: str, objective: str) -> Path:
    """``runs/<subject>__<objective>__s<seed>__<timestamp>`` unless ``--run-name`` is given; refuses to reuse
    a run folder.
    """
    name = run.run_name or f"{subject}__{objective}__s{run.seed}__{datetime.now():%Y%m%d-%H%M%S}"
    run_dir = run.runs_dir / name
    if (run_dir / "checkpoints").exists():
        raise ValueError(
            f"{run_dir} already holds a run; continue it with --resume {run_dir} or pick another --run-name"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def open_run_folder(
    config, subject: str, objective: str, state: LoopState, checkpoint: dict | None
) -> tuple[Path, RunLogger]:
    """A new run folder with its config.json, or the resumed one with ``state`` restored from ``checkpoint``;
    and the run's logger (which drops metrics a killed run wrote after its last checkpoint)."""
    if checkpoint is None:
        run_dir = new_run_dir(config.run, subject, objective)
        write_config(run_dir, config_to_dict(config))
        return run_dir, RunLogger(run_dir)
    run_dir = Path(config.run.resume)
    state.load_state_dict(checkpoint)
    return run_dir, RunLogger(run_dir, state.iteration, state.global_step)


def save_loop_state(config, run_dir: Path, state: LoopState) -> None:
    """Write ``checkpoints/latest.pt``: the config and the loop's state, atomically."""
    save_checkpoint(
        {"kind": type(config).kind, "config": config_to_dict(config), **state.state_dict()},
        run_dir / "checkpoints" / LATEST,
    )


def checkpoint_due(iteration: int, run: RunConfig, last: bool) -> bool:
    """Every ``--checkpoint-every`` iterations, and after the last one."""
    return iteration % run.checkpoint_every == 0 or last
