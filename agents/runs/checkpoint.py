"""Checkpoints: everything that decides a run's future, written atomically, loaded with clear errors."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import torch

CHECKPOINT_FORMAT = 1
LATEST = "latest.pt"


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or belongs to a different setup."""


def checkpoint_path(run_or_file: Path) -> Path:
    """``runs/<run>`` -> ``runs/<run>/checkpoints/latest.pt``; a file path is returned as it is."""
    run_or_file = Path(run_or_file)
    if run_or_file.is_dir():
        return run_or_file / "checkpoints" / LATEST
    return run_or_file


def to_storable(value):
    """Numpy arrays become tensors (recursively) so the file loads with ``torch.load(weights_only=True)``."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: to_storable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_storable(item) for item in value)
    return value


def from_storable(value):
    """Inverse of ``to_storable`` for CPU tensors that stood for numpy arrays."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {key: from_storable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(from_storable(item) for item in value)
    return value


def save_checkpoint(state: dict, path: Path) -> None:
    """Write ``state`` to ``path`` via a temporary file and an atomic rename, so a kill mid-write
    leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            torch.save({"format": CHECKPOINT_FORMAT, **state}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def checkpoint_iteration(run_or_file: Path) -> int | None:
    """The iteration a run's checkpoint was written after, read without loading its tensors (``mmap``); None when
    there is no readable checkpoint."""
    path = checkpoint_path(run_or_file)
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["iteration"])
    except (OSError, RuntimeError, KeyError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, TypeError):
        return None


def load_checkpoint(run_or_file: Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint written by ``save_checkpoint``; one-line ``CheckpointError`` if it is missing or corrupt."""
    path = checkpoint_path(run_or_file)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; pass a run folder that has checkpoints/{LATEST} or a .pt file")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated ({type(error).__name__}); "
            "resume from an earlier copy or start a new run"
        ) from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is not a checkpoint of this version of ppo "
            f"(format {state.get('format') if isinstance(state, dict) else '?'}); start a new run"
        )
    return state


def global_rng_state() -> dict:
    """torch's global CPU and CUDA generator states, for a checkpoint."""
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_global_rng_state(state: dict, device: torch.device) -> None:
    """Inverse of ``global_rng_state`` (the CUDA states only when running on CUDA)."""
    torch.set_rng_state(state["torch_rng"].cpu())
    if state.get("cuda_rng") and device.type == "cuda":
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
