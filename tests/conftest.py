"""Shared helpers: tiny training configs and running the ``ppo`` command in a subprocess."""

import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from agents.core.config import PPOConfig
from agents.core.objectives import Clip
from agents.runs.config import RunConfig
from agents.walkers.config import MujocoEnvConfig, TrainConfig

MEASURED_KEYS = {"sps", "rollout_seconds", "update_seconds", "eval_seconds", "rollout_peak_gb", "update_peak_gb",
                 "eval_peak_gb", "sampling_seconds", "batch_forward_seconds", "elapsed_seconds"}  # fmt: skip
"""Metrics that measure the machine (seconds, memory), not the run: left out when two runs are compared."""


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


def without_measurements(records: list[dict]) -> list[dict]:
    """``records`` less the ``MEASURED_KEYS``."""
    return [{k: v for k, v in record.items() if k not in MEASURED_KEYS} for record in records]


def passes_gymnasium_and_sb3_checkers(env: gym.Env) -> None:
    """Gymnasium's and Stable-Baselines3's env checkers both run on ``env`` without an error or a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
        sb3_check_env(env.unwrapped)
