"""Shared helpers: tiny training configs and running the ``ppo`` command in a subprocess."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from agents.core.config import PPOConfig
from agents.core.objectives import Clip
from agents.runs.config import RunConfig
from agents.walkers.config import MujocoEnvConfig, TrainConfig

TIMING_KEYS = {"sps", "rollout_seconds", "update_seconds"}


@pytest.fixture(autouse=True)
def one_torch_thread():
    torch.set_num_threads(1)


def tiny_config(
    runs_dir: Path, name: str, objective=Clip(), env_id: str = "Hopper-v5", total_steps: int = 512, **run
) -> TrainConfig:
    """A run of a few 128-step iterations, eager (compiling would dominate such a short run)."""
    return TrainConfig(
        env=MujocoEnvConfig(env_id=env_id, num_steps=128),
        objective=objective,
        ppo=PPOConfig(total_steps=total_steps, epochs=2, minibatch_size=32),
        run=replace(
            RunConfig(runs_dir=runs_dir, run_name=name, compile=False, progress=False, checkpoint_every=1), **run
        ),
    )


def run_ppo(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m agents ARGS`` (the ``ppo`` command) with output captured."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "agents", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in record.items() if k not in TIMING_KEYS} for record in records]
