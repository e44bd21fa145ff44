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
from typing import ClassVar, Generic, NamedTuple, Protocol, TypeVar

import torch
import torch.distributed as dist

from agents.core.distributed import gather_objects, rank, world_size
from agents.runs.checkpoint import LATEST, CheckpointError, load_checkpoint, save_checkpoint
from agents.runs.config import RunConfig, config_from_dict, config_to_dict, read_config, write_config
from agents.runs.logger import METRICS_FILE, RunLogger
from agents.runs.machine import record_machine

Config = TypeVar("Config")


class LoopState(Protocol):
    """A training loop's resumable state: everything that decides the rest of the run, as one record.

    ``state_dict`` gives it in storable form (tensors, numbers, lists, dicts); ``load_state_dict``
    restores it and raises ``CheckpointError`` for a checkpoint that does not fit.
    """

    shared_keys: ClassVar[frozenset[str]]
    """Keys of ``state_dict`` that are identical on every process (weights, optimiser, controllers): a
    checkpoint holds them once, and every process's own entries (RNGs, environments) beside them."""
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
    """``auto`` -> cuda when available, else cpu; an explicit ``cuda`` without a GPU is an error. Under torchrun
    each process takes the GPU of its ``LOCAL_RANK``."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but torch sees no CUDA device; use --device auto or cpu")
    kind = ("cuda" if torch.cuda.is_available() else "cpu") if requested == "auto" else requested
    if kind == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device(kind)


def init_distributed(device: torch.device) -> None:
    """Join the process group that torchrun describes in the environment (``WORLD_SIZE`` > 1): gloo on the CPU,
    nccl on CUDA. Nothing to do in a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def shutdown_distributed(finished: bool = False) -> None:
    """Leave the process group, if this process joined one. ``finished`` (the run ended normally on every process):
    wait at a barrier first, so no process tears its connections down while another still works (the first one
    writes the policy folder after the last collective); after an error there is no barrier, which could hang."""
    if dist.is_available() and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


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
    device = resolve_device(config.run.device)
    init_distributed(device)
    if resume_dir is None:
        config = replace(config, run=replace(config.run, nproc=world_size()))  # config.json records the truth
    validate(config)
    torch.set_num_threads(config.run.torch_threads or os.cpu_count() or 1)
    checkpoint = load_checkpoint(resume_dir, map_location=device) if resume_dir is not None else None
    if checkpoint is not None and checkpoint.get("world_size", 1) != world_size():
        raise CheckpointError(
            f"{resume_dir} was trained with {checkpoint.get('world_size', 1)} processes and this run has "
            f"{world_size()}; resume it with torchrun --nproc-per-node {checkpoint.get('world_size', 1)}"
        )
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
    if (run_dir / METRICS_FILE).exists():  # a run that stopped before its first checkpoint: nothing to resume
        raise ValueError(
            f"{run_dir} holds the log of a run that stopped before its first checkpoint (nothing to resume); "
            "delete the folder or pick another --run-name"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def open_run_folder(
    config, subject: str, objective: str, state: LoopState, checkpoint: dict | None
) -> tuple[Path, RunLogger]:
    """A new run folder with its config.json and machine.json, or the resumed one (its machine.json extended if it
    resumes on another machine) with ``state`` restored from ``checkpoint``
    (each process its own share); and the run's logger, which writes on the first process only (and drops
    metrics a killed run wrote after its last checkpoint)."""
    if checkpoint is None:
        run_dir = None
        if rank() == 0:
            run_dir = new_run_dir(config.run, subject, objective)
            write_config(run_dir, config_to_dict(config))
            record_machine(run_dir)
        run_dir = gather_objects(run_dir)[0]  # the first process's folder name (it holds a timestamp)
        return run_dir, RunLogger(run_dir, enabled=rank() == 0)
    run_dir = Path(config.run.resume)
    if rank() == 0:
        record_machine(run_dir)
    own = checkpoint if rank() == 0 else checkpoint["rank_states"][rank() - 1]
    state.load_state_dict({**checkpoint, **own})
    return run_dir, RunLogger(run_dir, state.iteration, state.global_step, enabled=rank() == 0)


def save_loop_state(config, run_dir: Path, state: LoopState) -> None:
    """Write ``checkpoints/latest.pt`` atomically from the first process: the config, the loop's state, and every
    other process's own entries of it (all processes must call this together)."""
    full = state.state_dict()
    own = {key: value for key, value in full.items() if key not in type(state).shared_keys}
    others = gather_objects(own)[1:]
    if rank() == 0:
        save_checkpoint(
            {"kind": type(config).kind, "config": config_to_dict(config), **full, "world_size": world_size(),
             "rank_states": others},
            run_dir / "checkpoints" / LATEST,
        )  # fmt: skip


def checkpoint_due(iteration: int, run: RunConfig, last: bool) -> bool:
    """Every ``--checkpoint-every`` iterations, and after the last one."""
    return iteration % run.checkpoint_every == 0 or last
