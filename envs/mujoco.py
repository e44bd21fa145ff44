"""Gymnasium MuJoCo tasks behind one factory: validated ids, seeded synchronous vector envs, exact state snapshots,
and two measurements with uniform random actions (stepping speed, the random policy's return)."""

from __future__ import annotations

import copy
import os
import time

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from envs.mujoco_batch import BATCHED_TASKS, BODY_POSITIONS, BatchedMujocoVectorEnv

AUTORESET_MODE = AutoresetMode.SAME_STEP
"""Rollouts rely on same-step autoreset: ``step`` returns the first observation of the next episode and
``info["final_obs"]`` holds the last observation of the one that ended (Gymnasium 1.x)."""

STATE_SPEC = mujoco.mjtState.mjSTATE_INTEGRATION  # everything mj_step reads, warm-start included: restores bit for bit
TRACKING_CAMERA = "track"
"""The camera every Gymnasium locomotion model (Hopper, Walker2d, HalfCheetah, Ant, Humanoid, Swimmer) defines on its
root body with ``mode="trackcom"``: it follows the walker. Gymnasium's default view is a free camera that stays put."""


class UnsupportedEnvironmentError(ValueError):
    """The requested environment cannot be trained here: an unknown id, not a MuJoCo task, or not Box actions."""


def check_env_id(env_id: str) -> gym.spaces.Box:
    """Build ``env_id`` once and return its action space; a clear one-line error if it is not a Box-action
    MuJoCo task.
    """
    try:
        env = gym.make(env_id)
    except gym.error.Error as error:
        known = ", ".join(
            sorted(i for i, spec in gym.registry.items() if "mujoco" in str(spec.entry_point) and i.endswith("-v5"))
        )
        raise UnsupportedEnvironmentError(
            f"unknown environment id {env_id!r} ({type(error).__name__}); MuJoCo v5 ids: {known}"
        ) from error
    try:
        if not isinstance(env.unwrapped, MujocoEnv):
            raise UnsupportedEnvironmentError(
                f"{env_id!r} is not a MuJoCo environment; this trainer takes Gymnasium MuJoCo ids such as Hopper-v5"
            )
        if not isinstance(env.action_space, gym.spaces.Box):
            raise UnsupportedEnvironmentError(
                f"{env_id!r} has a {type(env.action_space).__name__} action space; "
                "the Gaussian policy needs Box actions"
            )
        return env.action_space
    finally:
        env.close()


class FinalObsSyncVectorEnv(SyncVectorEnv):
    """Gymnasium's ``SyncVectorEnv`` in same-step autoreset mode whose ``step`` info holds only
    ``final_obs`` / ``_final_obs``: the one entry rollouts read.

    Merging every env's info dict into arrays costs ~12 us per step for Hopper's six info keys,
    ~14 % of an env step (benchmarks/speed_vs_sb3.py); everything else is inherited unchanged,
    and a test checks that observations, rewards, flags and final observations equal
    ``SyncVectorEnv``'s.
    """

    def step(self, actions: np.ndarray):
        final_obs = np.full(self.num_envs, None, dtype=object)
        has_final_obs = np.zeros(self.num_envs, dtype=bool)
        for i, env in enumerate(self.envs):
            self._env_obs[i], self._rewards[i], self._terminations[i], self._truncations[i], _ = env.step(actions[i])
            if self._terminations[i] or self._truncations[i]:
                final_obs[i], has_final_obs[i] = self._env_obs[i], True
                self._env_obs[i], _ = env.reset()
        self._observations = np.stack(self._env_obs)
        infos = {"final_obs": final_obs, "_final_obs": has_final_obs} if has_final_obs.any() else {}
        return self._observations, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos


def camera_options(env_id: str) -> dict[str, str]:
    """``gym.make`` options for rendering ``env_id``: its tracking camera where the model has one, else none."""
    env = gym.make(env_id)
    try:
        model = env.unwrapped.model
        tracks = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, TRACKING_CAMERA) >= 0
    finally:
        env.close()
    return {"camera_name": TRACKING_CAMERA} if tracks else {}


def make_vector_env(
    env_id: str, num_envs: int, render_mode: str | None = None, threads: int | None = None
) -> SyncVectorEnv | BatchedMujocoVectorEnv:
    """``num_envs`` copies of ``env_id`` stepped in this process with same-step autoreset.

    With a ``render_mode`` the frames come from the model's tracking camera (``camera_options``), so a walker stays
    in the picture however far it runs.

    Synchronous on purpose: on a 2-core machine worker processes cost more in IPC than they save
    (measured on a 2-vCPU machine: AsyncVectorEnv x2 about 6,000 steps/s against about 13,700 for one env).
    Seed it with ``reset(seed=seed)``: env ``i`` gets ``seed + i``.

    With ``threads``, a task of ``BATCHED_TASKS`` steps all its simulations on that many threads
    (``BatchedMujocoVectorEnv``, bit-identical to Gymnasium's envs; snapshot it with its own ``snapshot``/``restore``);
    any other task, or rendering, falls back to Gymnasium's envs with one printed line that says so.
    """
    check_env_id(env_id)
    if threads is not None:
        if env_id in BATCHED_TASKS and render_mode is None:
            return BatchedMujocoVectorEnv(env_id, num_envs, threads)
        reason = "rendering" if render_mode else f"no batched stepping for {env_id} (only {', '.join(BATCHED_TASKS)})"
        print(f"{env_id}: {reason}; stepping Gymnasium's environments one by one on one thread instead")
    options = camera_options(env_id) if render_mode else {}
    envs = FinalObsSyncVectorEnv(
        [lambda: gym.make(env_id, render_mode=render_mode, **options) for _ in range(num_envs)],
        autoreset_mode=AUTORESET_MODE,
    )
    assert envs.metadata["autoreset_mode"] == AUTORESET_MODE, "rollouts assume same-step autoreset"
    return envs


def available_threads() -> int:
    """The CPUs this process may run on, shared among the processes torchrun started on this machine
    (``LOCAL_WORLD_SIZE``), at least 1: the stepping threads ``--env-threads 0`` gives."""
    return max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def _time_limit(env: gym.Env) -> gym.wrappers.TimeLimit | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return env
        env = env.env
    return None


def snapshot_vector_env(envs: SyncVectorEnv | BatchedMujocoVectorEnv) -> list[dict]:
    """Everything that decides each env's future: MuJoCo integration state, the body positions the last step left
    (``BODY_POSITIONS``: Ant and Humanoid measure their velocity from them), time-limit counter, RNG state (the
    same records for both kinds of vector env, so a checkpoint resumes on either)."""
    if isinstance(envs, BatchedMujocoVectorEnv):
        return envs.snapshot()
    snapshots = []
    for env in envs.envs:
        inner = env.unwrapped
        state = np.empty(mujoco.mj_stateSize(inner.model, STATE_SPEC))
        mujoco.mj_getState(inner.model, inner.data, state, STATE_SPEC)
        time_limit = _time_limit(env)
        snapshots.append(
            {
                "mujoco_state": state,
                "body_positions": {name: getattr(inner.data, name).copy() for name in BODY_POSITIONS},
                "elapsed_steps": None if time_limit is None else time_limit._elapsed_steps,
                "rng_state": copy.deepcopy(inner.np_random.bit_generator.state),
            }
        )
    return snapshots


def restore_vector_env(envs: SyncVectorEnv | BatchedMujocoVectorEnv, snapshots: list[dict]) -> None:
    """Put every env back into a state taken by ``snapshot_vector_env`` (after a ``reset``)."""
    if isinstance(envs, BatchedMujocoVectorEnv):
        envs.restore(snapshots)
        return
    if len(snapshots) != envs.num_envs:
        raise ValueError(f"checkpoint holds {len(snapshots)} environment states but the run has {envs.num_envs} envs")
    for env, snapshot in zip(envs.envs, snapshots):
        inner = env.unwrapped
        expected = mujoco.mj_stateSize(inner.model, STATE_SPEC)
        if snapshot["mujoco_state"].shape != (expected,):
            raise ValueError(
                "checkpoint environment state does not match this environment's model; was it saved for another env id?"
            )
        mujoco.mj_setState(inner.model, inner.data, snapshot["mujoco_state"], STATE_SPEC)
        for name, value in snapshot.get("body_positions", {}).items():  # absent from checkpoints made before
            getattr(inner.data, name)[:] = value
        time_limit = _time_limit(env)
        if time_limit is not None:
            time_limit._elapsed_steps = snapshot["elapsed_steps"]
        inner.np_random.bit_generator.state = snapshot["rng_state"]


def raw_stepping_speed(env_id: str = "Hopper-v5", steps: int = 20_000, seed: int = 0) -> float:
    """Steps/s of one ``gym.make(env_id)`` stepped with uniform random actions, resetting when an episode ends: the
    yardstick a machine's training speeds scale with (docs/results.md states its figures beside it)."""
    env = gym.make(env_id)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - start
    env.close()
    return steps / elapsed


def random_policy_return(env_id: str, episodes: int, seed: int = 0) -> float:
    """Mean undiscounted return of ``episodes`` episodes of uniform random actions (``action_space.sample()``),
    episode i reset with ``seed + i`` and the action space seeded with ``seed``."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    try:
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))
