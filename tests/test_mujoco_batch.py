"""The batched MuJoCo path (envs/mujoco_batch.py) returns what Gymnasium's own environments return, bit for bit: every
supported task (every MuJoCo v5 one) stepped beside ``SyncVectorEnv`` over ``gym.make(id)`` from the same seeds and
actions, through terminations, resets and the time limit; 1 thread against 2; snapshots exact and interchangeable
with ``snapshot_vector_env``'s; the walker rollout unchanged on it; and the factory's fallback line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.rollout import EpisodeTracker, RewardScaler, collect_mujoco
from envs.mujoco import FinalObsSyncVectorEnv, make_vector_env, restore_vector_env, snapshot_vector_env
from envs.mujoco_batch import BATCHED_TASKS, BatchedMujocoVectorEnv

NUM_ENVS = 3
STEPS = 300
STEPS_BEFORE_LIMIT = 2  # env 0 starts this close to the time limit: even InvertedPendulum stays up that long
ACTION_SCALE = {"Hopper-v5": 0.3, "Walker2d-v5": 0.3}
"""Random actions shrunk so these walkers fall after tens of steps, not at once: several episodes each."""
TERMINATES = {"Hopper-v5", "Walker2d-v5", "InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Humanoid-v5"}
"""The supported tasks with a termination condition (the others end only at the time limit)."""


def gymnasium_envs(env_id: str, num_envs: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)


def assert_identical(expected, actual, where: str = "") -> None:
    """Equal keys, dtypes and values bit for bit (NaN equal to NaN), through tuples, dicts and object arrays."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), where
        for index, (item, other) in enumerate(zip(expected, actual)):
            assert_identical(item, other, f"{where}[{index}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and set(expected) == set(actual), (where, set(expected) ^ set(actual))
        for key in expected:
            assert_identical(expected[key], actual[key], f"{where}/{key}")
    elif isinstance(expected, np.ndarray) and expected.dtype == object:
        assert isinstance(actual, np.ndarray) and actual.dtype == object and actual.shape == expected.shape, where
        for index, (item, other) in enumerate(zip(expected, actual)):
            assert (item is None) == (other is None), f"{where}[{index}]"
            if item is not None:
                assert_identical(item, other, f"{where}[{index}]")
    else:
        expected, actual = np.asarray(expected), np.asarray(actual)
        assert expected.dtype == actual.dtype, (where, expected.dtype, actual.dtype)
        assert np.array_equal(expected, actual, equal_nan=True), (where, expected, actual)


def random_actions(envs, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """``(N, nu)`` float32 actions uniform in the action bounds times ``scale``, as the rollout passes them."""
    space = envs.single_action_space
    return (rng.uniform(space.low, space.high, size=(envs.num_envs, *space.shape)) * scale).astype(np.float32)


def step_both(reference, batched, rng: np.random.Generator, steps: int, scale: float = 1.0) -> tuple[int, int]:
    """Step both with the same actions, requiring identical results; returns (terminations, truncations) seen."""
    terminations = truncations = 0
    for t in range(steps):
        actions = random_actions(reference, rng, scale)
        expected, actual = reference.step(actions), batched.step(actions)
        for name, a, b in zip(["obs", "reward", "terminated", "truncated", "info"], expected, actual):
            assert_identical(a, b, f"step {t} {name}")
        terminations, truncations = terminations + int(expected[2].sum()), truncations + int(expected[3].sum())
    return terminations, truncations


@pytest.mark.parametrize("env_id", sorted(BATCHED_TASKS))
def test_every_batched_task_steps_as_gymnasium(env_id):
    """Seeded resets (an int, then a list, then None), several episodes ended by the task and by the 1,000-step (or
    registered) limit: env 0 is put near the limit through a ``snapshot_vector_env`` record of Gymnasium's envs
    restored into both, so the batched env takes Gymnasium's snapshots too."""
    reference, batched = gymnasium_envs(env_id, NUM_ENVS), BatchedMujocoVectorEnv(env_id, NUM_ENVS, threads=2)
    rng, scale = np.random.default_rng(0), ACTION_SCALE.get(env_id, 1.0)
    for seed in [7, [11, 3, 11]]:
        assert_identical(reference.reset(seed=seed), batched.reset(seed=seed), f"reset(seed={seed})")
        snapshots = snapshot_vector_env(reference)
        snapshots[0]["elapsed_steps"] = batched.max_episode_steps - STEPS_BEFORE_LIMIT
        restore_vector_env(reference, snapshots)
        batched.restore(snapshots)
        terminations, truncations = step_both(reference, batched, rng, STEPS, scale)
        assert truncations >= 1
        assert terminations >= (2 if env_id in TERMINATES else 0)
    assert_identical(reference.reset(), batched.reset(), "reset(seed=None)")
    step_both(reference, batched, rng, 20, scale)


def test_results_do_not_depend_on_the_thread_count():
    one, two = BatchedMujocoVectorEnv("Hopper-v5", 4, threads=1), BatchedMujocoVectorEnv("Hopper-v5", 4, threads=2)
    assert (one.threads, two.threads) == (1, 2)
    assert_identical(one.reset(seed=1), two.reset(seed=1))
    terminations, _ = step_both(one, two, np.random.default_rng(1), 400, scale=0.3)
    assert terminations >= 4


@pytest.mark.parametrize("env_id", ["Walker2d-v5", "Ant-v5", "Humanoid-v5"])
def test_a_snapshot_restores_exactly_and_moves_to_gymnasium(env_id):
    """Restoring the batched env's own snapshot replays the same steps; the snapshot restored into Gymnasium's envs
    reset elsewhere continues as the batched env does. Ant and Humanoid measure their first step's velocity from
    body positions the previous step left (no MuJoCo state holds them): without them in the snapshot, the first
    reward after a restore differed."""
    batched = BatchedMujocoVectorEnv(env_id, NUM_ENVS, threads=2)
    batched.reset(seed=4)
    rng = np.random.default_rng(4)
    for _ in range(30):
        batched.step(random_actions(batched, rng, 0.3))
    snapshots = batched.snapshot()
    actions = [random_actions(batched, rng, 0.3) for _ in range(200)]
    first = [batched.step(a) for a in actions]
    batched.restore(snapshots)
    assert_identical(first, [batched.step(a) for a in actions])

    reference = gymnasium_envs(env_id, NUM_ENVS)
    reference.reset(seed=0)
    restore_vector_env(reference, snapshots)
    batched.restore(snapshots)
    for t, a in enumerate(actions):
        assert_identical(reference.step(a), batched.step(a), f"step {t}")


def test_restore_refuses_a_snapshot_of_another_model():
    hopper = make_vector_env("Hopper-v5", 2)
    hopper.reset(seed=0)
    batched = BatchedMujocoVectorEnv("HalfCheetah-v5", 2, threads=1)
    with pytest.raises(ValueError, match="another env id"):
        batched.restore(snapshot_vector_env(hopper))


def snapshot_any(envs) -> list[dict]:
    """What the checkpoint code will call: the batched env's own snapshot, or ``snapshot_vector_env``."""
    return envs.snapshot() if isinstance(envs, BatchedMujocoVectorEnv) else snapshot_vector_env(envs)


def restore_any(envs, snapshots: list[dict]) -> None:
    if isinstance(envs, BatchedMujocoVectorEnv):
        envs.restore(snapshots)
    else:
        restore_vector_env(envs, snapshots)


def test_the_walker_rollout_collects_the_same_batch_on_it():
    """``collect_mujoco`` (truncation bootstrapping from ``final_obs`` included) gives the same batch on the batched
    env as on ``make_vector_env``'s, over a rollout that ends episodes by termination and by the time limit."""
    rollouts, flags = [], []
    for envs in [make_vector_env("Hopper-v5", 2), make_vector_env("Hopper-v5", 2, threads=2)]:
        torch.manual_seed(0)
        policy = GaussianActorCritic(envs.single_observation_space.shape[0], envs.single_action_space.shape[0])
        obs, _ = envs.reset(seed=3)
        snapshots = snapshot_any(envs)
        snapshots[1]["elapsed_steps"] = 997  # env 1 reaches the 1,000-step limit in the rollout
        restore_any(envs, snapshots)
        seen, step = [], envs.step

        def recording_step(actions, step=step, seen=seen):
            result = step(actions)
            seen.append((result[2].copy(), result[3].copy()))
            return result

        envs.step = recording_step
        rollout = collect_mujoco(
            envs, policy, obs, 64, RewardScaler(0.99, 2), EpisodeTracker(2), np.random.default_rng(5), 0.99, 0.95
        )
        rollouts.append(rollout)
        flags.append(np.array(seen))
    assert np.array_equal(flags[0], flags[1])
    assert flags[0][:, 0].any() and (flags[0][:, 1] & ~flags[0][:, 0]).any()  # terminated, and truncated alone
    gymnasium_rollout, batched_rollout = rollouts
    assert gymnasium_rollout.finished_episodes == batched_rollout.finished_episodes
    assert np.array_equal(gymnasium_rollout.next_obs, batched_rollout.next_obs)
    assert np.array_equal(gymnasium_rollout.observations, batched_rollout.observations)
    for field in ["advantages", "returns", "old_logp", "old_values"]:
        assert torch.equal(getattr(gymnasium_rollout.batch, field), getattr(batched_rollout.batch, field)), field


def test_the_factory_batches_supported_tasks_and_falls_back_with_one_line(capsys):
    batched = make_vector_env("Hopper-v5", 2, threads=1)
    assert isinstance(batched, BatchedMujocoVectorEnv) and batched.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert isinstance(make_vector_env("Hopper-v5", 2), FinalObsSyncVectorEnv)
    assert capsys.readouterr().out == ""

    fallback = make_vector_env("Hopper-v4", 2, threads=2)
    assert isinstance(fallback, FinalObsSyncVectorEnv)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Hopper-v4: no batched stepping for Hopper-v4"), lines
    assert "Gymnasium's environments" in lines[0]
