"""Many simulations of one Gymnasium MuJoCo v5 task stepped together on a C thread pool, with Gymnasium's results.

MuJoCo 4.0's ``mujoco.batch.Batch`` keeps each simulation as its ``mjSTATE_INTEGRATION`` row and steps all of them
on ``nthread`` threads (the caller's included), "bit-identical to a loop over one MjData per simulation at any thread
count" (mujoco/batch.py). It steps physics only; everything else a Gymnasium task defines (observation, reward,
termination, the time limit, reset noise, ``info``) is computed here for all simulations at once, each task
mirroring its Gymnasium file (gymnasium/envs/mujoco/<task>_v5.py) and its settings read from a ``gym.make`` of the
task, so registered keyword arguments count. ``BatchedMujocoVectorEnv`` returns what ``SyncVectorEnv`` over
``gym.make(env_id)`` envs returns in same-step autoreset mode, bit for bit; tests/test_mujoco_batch.py steps each
task beside it. Elementwise arithmetic is exact however it is vectorised; the few expressions whose rounding could
depend on array shape (``np.linalg.norm``'s dot product, ``sin``/``cos``, scalar ``**``) run per simulation exactly
as Gymnasium writes them. Ant, Humanoid and HumanoidStandup read contact forces (``cfrc_ext``), which Gymnasium
computes with ``mj_rnePostConstraint`` after each step and a Batch does not: their batch keeps one ``MjData`` per
simulation (``persistent=True``) and runs that function on each after the step, as Gymnasium does.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

BATCH_STATE_SPEC = mujoco.mjtState.mjSTATE_INTEGRATION
"""A Batch row is this state (mujoco/batch.py): snapshots hold it, as ``envs.mujoco.snapshot_vector_env``'s do."""
BODY_POSITIONS = ("xpos", "xipos")
"""Derived fields a step reads before it simulates (Ant's main body, Humanoid's centre of mass), as the previous
step left them; no state spec holds them, so snapshots carry them to resume exactly."""


class Simulations(NamedTuple):
    """Live ``(N, ...)`` views of a Batch: state rows, and the derived fields a task reads (refreshed by each call,
    describing the state before the last substep after a step, as ``mj_step`` leaves ``MjData``)."""

    qpos: np.ndarray
    """``(N, nq)`` joint positions."""
    qvel: np.ndarray
    """``(N, nv)`` joint velocities."""
    ctrl: np.ndarray
    """``(N, nu)`` controls, float64: the actions the last step applied, as ``MjData.ctrl`` holds them."""
    derived: dict[str, np.ndarray]
    """The task's ``derived_fields`` by name, ``(N, ...)`` each, read-only; with ``reads_contact_forces`` also
    ``cfrc_ext`` ``(N, nbody, 6)``, as ``mj_rnePostConstraint`` leaves it after a step (zero after a reset)."""


class StateBefore(NamedTuple):
    """What a step reads from before it simulates: the state, and the body positions the previous call left (one
    substep behind that state, as ``mj_step`` leaves ``MjData``; Ant's and Humanoid's velocities are measured from
    them)."""

    qpos: np.ndarray
    """``(N, nq)``."""
    xpos: np.ndarray
    """``(N, nbody, 3)`` body frame positions."""
    xipos: np.ndarray
    """``(N, nbody, 3)`` body centres of mass."""


class StepOutcome(NamedTuple):
    """What a task's ``step`` returns beside the observation, for every simulation."""

    reward: np.ndarray
    """``(N,)`` float64."""
    terminated: np.ndarray
    """``(N,)`` bool."""
    info: dict[str, np.ndarray]
    """Each key of the task's step ``info``, ``(N,)`` with the dtype of Gymnasium's value (``(N, k)`` for an array
    value of ``k`` entries, as Humanoid's tendon lengths)."""


class ResetState(NamedTuple):
    """One simulation's state after ``reset_model``'s noise."""

    qpos: np.ndarray
    """``(nq,)``."""
    qvel: np.ndarray
    """``(nv,)``."""


class BatchedTask(ABC):
    """One Gymnasium v5 task's definitions over N simulations; ``env`` is a Gymnasium env of the task, read for its
    settings (weights, ranges, ``init_qpos``, ``dt``) and never stepped."""

    derived_fields: ClassVar[tuple[str, ...]] = ()
    """MjData fields besides the state that the observation or reward reads."""
    reads_contact_forces: ClassVar[bool] = False
    """The task reads ``cfrc_ext`` (``Simulations.derived["cfrc_ext"]``)."""
    normal_velocity_noise: ClassVar[bool] = False
    """``reset_model`` draws ``qvel`` noise from a standard normal times the scale instead of a uniform."""

    def __init__(self, env: MujocoEnv) -> None:
        self.env = env
        self.dt = env.dt

    @abstractmethod
    def observe(self, sims: Simulations, rows: np.ndarray | slice) -> np.ndarray:
        """``(n, obs_dim)`` float64 observations of the simulations ``rows``."""

    @abstractmethod
    def outcome(self, sims: Simulations, before: StateBefore, actions: np.ndarray) -> StepOutcome:
        """Reward, termination and info of the step from ``before`` with ``actions`` ``(N, nu)``."""

    def reset_state(self, rng: np.random.Generator) -> ResetState:
        """``reset_model``'s state for one simulation, drawing from ``rng`` as Gymnasium draws from ``np_random``."""
        env = self.env
        noise_low, noise_high = -env._reset_noise_scale, env._reset_noise_scale
        qpos = env.init_qpos + rng.uniform(low=noise_low, high=noise_high, size=env.model.nq)
        if self.normal_velocity_noise:
            qvel = env.init_qvel + env._reset_noise_scale * rng.standard_normal(env.model.nv)
        else:
            qvel = env.init_qvel + rng.uniform(low=noise_low, high=noise_high, size=env.model.nv)
        return ResetState(qpos, qvel)

    def reset_info(self, sims: Simulations, rows: np.ndarray) -> dict[str, np.ndarray]:
        """``_get_reset_info`` of the simulations ``rows``, ``(n,)`` per key; MujocoEnv's default is empty."""
        return {}

    def control_cost(self, actions: np.ndarray) -> np.ndarray:
        """``(N,)`` ``ctrl_cost_weight * sum(action**2)`` in the actions' dtype, as the locomotion tasks write it."""
        return self.env._ctrl_cost_weight * np.sum(np.square(actions), axis=1)


class Hopper(BatchedTask):
    """gymnasium/envs/mujoco/hopper_v5.py."""

    def observe(self, sims, rows):
        position = sims.qpos[rows]
        velocity = np.clip(sims.qvel[rows], -10, 10)
        if self.env._exclude_current_positions_from_observation:
            position = position[:, 1:]
        return np.concatenate((position, velocity), axis=1)

    def is_healthy(self, sims: Simulations) -> np.ndarray:
        env = self.env
        z, angle = sims.qpos[:, 1], sims.qpos[:, 2]
        state = np.concatenate((sims.qpos, sims.qvel), axis=1)[:, 2:]
        min_state, max_state = env._healthy_state_range
        min_z, max_z = env._healthy_z_range
        min_angle, max_angle = env._healthy_angle_range
        healthy_state = np.all(np.logical_and(min_state < state, state < max_state), axis=1)
        healthy_z = (min_z < z) & (z < max_z)
        healthy_angle = (min_angle < angle) & (angle < max_angle)
        return healthy_state & healthy_z & healthy_angle

    def outcome(self, sims, before, actions):
        env = self.env
        x_position_after = sims.qpos[:, 0].copy()
        x_velocity = (x_position_after - before.qpos[:, 0]) / self.dt
        healthy = self.is_healthy(sims)
        forward_reward = env._forward_reward_weight * x_velocity
        healthy_reward = healthy * env._healthy_reward
        ctrl_cost = self.control_cost(actions)
        reward = forward_reward + healthy_reward - ctrl_cost
        info = {
            "x_position": x_position_after,
            "z_distance_from_origin": sims.qpos[:, 1] - env.init_qpos[1],
            "x_velocity": x_velocity,
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_survive": healthy_reward,
        }
        return StepOutcome(reward, ~healthy & env._terminate_when_unhealthy, info)

    def reset_info(self, sims, rows):
        return {
            "x_position": sims.qpos[rows, 0],
            "z_distance_from_origin": sims.qpos[rows, 1] - self.env.init_qpos[1],
        }


class Walker2d(Hopper):
    """gymnasium/envs/mujoco/walker2d_v5.py: Hopper's definitions but for health, which checks height and angle."""

    def is_healthy(self, sims):
        env = self.env
        z, angle = sims.qpos[:, 1], sims.qpos[:, 2]
        min_z, max_z = env._healthy_z_range
        min_angle, max_angle = env._healthy_angle_range
        return (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)


class HalfCheetah(BatchedTask):
    """gymnasium/envs/mujoco/half_cheetah_v5.py."""

    normal_velocity_noise = True

    def observe(self, sims, rows):
        position = sims.qpos[rows]
        if self.env._exclude_current_positions_from_observation:
            position = position[:, 1:]
        return np.concatenate((position, sims.qvel[rows]), axis=1)

    def outcome(self, sims, before, actions):
        x_position_after = sims.qpos[:, 0].copy()
        x_velocity = (x_position_after - before.qpos[:, 0]) / self.dt
        forward_reward = self.env._forward_reward_weight * x_velocity
        ctrl_cost = self.control_cost(actions)
        info = {
            "x_position": x_position_after,
            "x_velocity": x_velocity,
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
        }
        return StepOutcome(forward_reward - ctrl_cost, np.zeros(len(actions), dtype=bool), info)

    def reset_info(self, sims, rows):
        return {"x_position": sims.qpos[rows, 0]}


class Swimmer(BatchedTask):
    """gymnasium/envs/mujoco/swimmer_v5.py."""

    def observe(self, sims, rows):
        position = sims.qpos[rows]
        if self.env._exclude_current_positions_from_observation:
            position = position[:, 2:]
        return np.concatenate((position, sims.qvel[rows]), axis=1)

    def outcome(self, sims, before, actions):
        xy_position_after = sims.qpos[:, 0:2].copy()
        xy_velocity = (xy_position_after - before.qpos[:, 0:2]) / self.dt
        forward_reward = self.env._forward_reward_weight * xy_velocity[:, 0]
        ctrl_cost = self.control_cost(actions)
        info = {
            "x_position": xy_position_after[:, 0],
            "y_position": xy_position_after[:, 1],
            "distance_from_origin": distances_from_origin(xy_position_after),
            "x_velocity": xy_velocity[:, 0],
            "y_velocity": xy_velocity[:, 1],
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
        }
        return StepOutcome(forward_reward - ctrl_cost, np.zeros(len(actions), dtype=bool), info)

    def reset_info(self, sims, rows):
        xy = sims.qpos[rows, 0:2]
        return {"x_position": xy[:, 0], "y_position": xy[:, 1], "distance_from_origin": distances_from_origin(xy)}


def squared_sums(values: np.ndarray) -> np.ndarray:
    """``(N,)`` ``np.sum(np.square(values[i]))`` of each simulation, one call per simulation as Gymnasium makes it (a
    sum over many entries is pairwise, whose order may differ from a reduction over one axis of a larger array)."""
    return np.array([np.sum(np.square(value)) for value in values])


def distances_from_origin(points: np.ndarray) -> np.ndarray:
    """``(n,)`` ``np.linalg.norm(point, ord=2)`` of each row of ``points`` ``(n, d)``, one call per row as Gymnasium
    makes it (the vector norm is a dot product, whose summation may differ from a row-wise reduction)."""
    return np.array([np.linalg.norm(point, ord=2) for point in points], dtype=np.float64)


class InvertedPendulum(BatchedTask):
    """gymnasium/envs/mujoco/inverted_pendulum_v5.py."""

    def observe(self, sims, rows):
        return np.concatenate((sims.qpos[rows], sims.qvel[rows]), axis=1)

    def outcome(self, sims, before, actions):
        observation = self.observe(sims, slice(None))
        terminated = ~np.isfinite(observation).all(axis=1) | (np.abs(observation[:, 1]) > 0.2)
        reward = (~terminated).astype(np.int64)  # int(not terminated): an int, as the info's "reward_survive"
        return StepOutcome(reward.astype(np.float64), terminated, {"reward_survive": reward})


class InvertedDoublePendulum(BatchedTask):
    """gymnasium/envs/mujoco/inverted_double_pendulum_v5.py; its observation (``sin``, ``cos``) and penalties
    (scalar ``**``) are computed per simulation, as Gymnasium writes them."""

    derived_fields = ("site_xpos", "qfrc_constraint")
    normal_velocity_noise = True  # Gymnasium writes standard_normal(nv) * scale: the same product

    def observe(self, sims, rows):
        qfrc_constraint = sims.derived["qfrc_constraint"]
        return np.stack(
            [
                np.concatenate(
                    [
                        sims.qpos[i][:1],
                        np.sin(sims.qpos[i][1:]),
                        np.cos(sims.qpos[i][1:]),
                        np.clip(sims.qvel[i], -10, 10),
                        np.clip(qfrc_constraint[i], -10, 10)[:1],
                    ]
                ).ravel()
                for i in np.arange(len(sims.qpos))[rows]
            ]
        )

    def outcome(self, sims, before, actions):
        site_xpos = sims.derived["site_xpos"]
        count = len(actions)
        reward, terminated = np.empty(count), np.empty(count, dtype=bool)
        survive, distance, velocity = np.empty(count), np.empty(count), np.empty(count)
        for i in range(count):
            x, _, y = site_xpos[i, 0]
            terminated[i] = bool(y <= 1)
            v1, v2 = sims.qvel[i, 1:3]
            dist_penalty = 0.01 * x**2 + (y - 2) ** 2
            vel_penalty = 1e-3 * v1**2 + 5e-3 * v2**2
            survive[i] = self.env._healthy_reward * int(not terminated[i])
            reward[i] = survive[i] - dist_penalty - vel_penalty
            distance[i], velocity[i] = -dist_penalty, -vel_penalty
        info = {"reward_survive": survive, "distance_penalty": distance, "velocity_penalty": velocity}
        return StepOutcome(reward, terminated, info)


class Reacher(BatchedTask):
    """gymnasium/envs/mujoco/reacher_v5.py; the fingertip-to-target distance and the observation's ``cos``/``sin``
    are computed per simulation, as Gymnasium writes them."""

    derived_fields = ("xpos",)

    def __init__(self, env: MujocoEnv) -> None:
        super().__init__(env)
        self.fingertip = env.model.body("fingertip").id
        self.target = env.model.body("target").id

    def fingertip_to_target(self, sims: Simulations, i: int) -> np.ndarray:
        """``get_body_com("fingertip") - get_body_com("target")`` of simulation ``i``, ``(3,)``."""
        xpos = sims.derived["xpos"][i]
        return xpos[self.fingertip] - xpos[self.target]

    def observe(self, sims, rows):
        observations = []
        for i in np.arange(len(sims.qpos))[rows]:
            theta = sims.qpos[i].flatten()[:2]
            parts = [
                np.cos(theta),
                np.sin(theta),
                sims.qpos[i].flatten()[2:],
                sims.qvel[i].flatten()[:2],
                self.fingertip_to_target(sims, i)[:2],
            ]
            observations.append(np.concatenate(parts))
        return np.stack(observations)

    def outcome(self, sims, before, actions):
        env = self.env
        distance = np.array([-np.linalg.norm(self.fingertip_to_target(sims, i)) for i in range(len(actions))])
        reward_dist = distance * env._reward_dist_weight
        reward_ctrl = -np.square(actions).sum(axis=1) * env._reward_control_weight
        info = {"reward_dist": reward_dist, "reward_ctrl": reward_ctrl}
        return StepOutcome(reward_dist + reward_ctrl, np.zeros(len(actions), dtype=bool), info)

    def reset_state(self, rng):
        env = self.env
        qpos = rng.uniform(low=-0.1, high=0.1, size=env.model.nq) + env.init_qpos
        while True:
            goal = rng.uniform(low=-0.2, high=0.2, size=2)
            if np.linalg.norm(goal) < 0.2:
                break
        qpos[-2:] = goal
        qvel = env.init_qvel + rng.uniform(low=-0.005, high=0.005, size=env.model.nv)
        qvel[-2:] = 0
        return ResetState(qpos, qvel)


class Pusher(BatchedTask):
    """gymnasium/envs/mujoco/pusher_v5.py; the two distances are computed per simulation, as Gymnasium writes them.
    Gymnasium's ``reset_model`` writes the cylinder and goal into ``init_qpos`` itself (``qpos = self.init_qpos``,
    no copy); only those four entries change, and every reset overwrites them, so a copy gives the same states."""

    derived_fields = ("xpos",)

    def __init__(self, env: MujocoEnv) -> None:
        super().__init__(env)
        self.bodies = [env.model.body(name).id for name in ("tips_arm", "object", "goal")]

    def observe(self, sims, rows):
        xpos = sims.derived["xpos"][rows][:, self.bodies].reshape(-1, 9)
        return np.concatenate((sims.qpos[rows][:, :7], sims.qvel[rows][:, :7], xpos), axis=1)

    def outcome(self, sims, before, actions):
        env = self.env
        tips, obj, goal = (sims.derived["xpos"][:, body] for body in self.bodies)
        near = np.array([np.linalg.norm(vector) for vector in obj - tips])
        dist = np.array([np.linalg.norm(vector) for vector in obj - goal])
        reward_near = -near * env._reward_near_weight
        reward_dist = -dist * env._reward_dist_weight
        reward_ctrl = -np.square(actions).sum(axis=1) * env._reward_control_weight
        info = {"reward_dist": reward_dist, "reward_ctrl": reward_ctrl, "reward_near": reward_near}
        return StepOutcome(reward_dist + reward_ctrl + reward_near, np.zeros(len(actions), dtype=bool), info)

    def reset_state(self, rng):
        env = self.env
        qpos = env.init_qpos.copy()
        goal = np.asarray([0, 0])
        while True:
            cylinder = np.concatenate([rng.uniform(low=-0.3, high=0, size=1), rng.uniform(low=-0.2, high=0.2, size=1)])
            if np.linalg.norm(cylinder - goal) > 0.17:
                break
        qpos[-4:-2] = cylinder
        qpos[-2:] = goal
        qvel = env.init_qvel + rng.uniform(low=-0.005, high=0.005, size=env.model.nv)
        qvel[-4:] = 0
        return ResetState(qpos, qvel)


class Ant(BatchedTask):
    """gymnasium/envs/mujoco/ant_v5.py; the contact cost and the distance are computed per simulation, as Gymnasium
    writes them."""

    derived_fields = ("xpos",)
    reads_contact_forces = True
    normal_velocity_noise = True

    def __init__(self, env: MujocoEnv) -> None:
        super().__init__(env)
        self.main_body = env.model.body(env._main_body).id

    def contact_forces(self, sims: Simulations, rows: np.ndarray | slice) -> np.ndarray:
        """``(n, nbody, 6)`` ``cfrc_ext`` clipped to ``contact_force_range``."""
        min_value, max_value = self.env._contact_force_range
        return np.clip(sims.derived["cfrc_ext"][rows], min_value, max_value)

    def observe(self, sims, rows):
        position, velocity = sims.qpos[rows], sims.qvel[rows]
        if self.env._exclude_current_positions_from_observation:
            position = position[:, 2:]
        if not self.env._include_cfrc_ext_in_observation:
            return np.concatenate((position, velocity), axis=1)
        contact_force = self.contact_forces(sims, rows)[:, 1:].reshape(len(position), -1)
        return np.concatenate((position, velocity, contact_force), axis=1)

    def outcome(self, sims, before, actions):
        env = self.env
        xy_position_before = before.xpos[:, self.main_body, :2]
        xy_position_after = sims.derived["xpos"][:, self.main_body, :2].copy()
        xy_velocity = (xy_position_after - xy_position_before) / self.dt
        state = np.concatenate((sims.qpos, sims.qvel), axis=1)
        min_z, max_z = env._healthy_z_range
        healthy = np.isfinite(state).all(axis=1) & (min_z <= state[:, 2]) & (state[:, 2] <= max_z)
        forward_reward = xy_velocity[:, 0] * env._forward_reward_weight
        healthy_reward = healthy * env._healthy_reward
        ctrl_cost = self.control_cost(actions)
        contact_forces = self.contact_forces(sims, slice(None))
        contact_cost = env._contact_cost_weight * squared_sums(contact_forces)
        reward = (forward_reward + healthy_reward) - (ctrl_cost + contact_cost)
        info = {
            "x_position": sims.qpos[:, 0].copy(),
            "y_position": sims.qpos[:, 1].copy(),
            "distance_from_origin": distances_from_origin(sims.qpos[:, 0:2]),
            "x_velocity": xy_velocity[:, 0],
            "y_velocity": xy_velocity[:, 1],
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": healthy_reward,
        }
        return StepOutcome(reward, ~healthy & env._terminate_when_unhealthy, info)

    def reset_info(self, sims, rows):
        qpos = sims.qpos[rows]
        return {
            "x_position": qpos[:, 0],
            "y_position": qpos[:, 1],
            "distance_from_origin": distances_from_origin(qpos[:, 0:2]),
        }


class Humanoid(BatchedTask):
    """gymnasium/envs/mujoco/humanoid_v5.py; the centre of mass (``mass_center``'s ``einsum``), the squared sums and
    the distance are computed per simulation, as Gymnasium writes them."""

    derived_fields = ("xipos", "cinert", "cvel", "qfrc_actuator", "ten_length", "ten_velocity")
    reads_contact_forces = True

    def observe(self, sims, rows):
        env, derived = self.env, sims.derived
        position, velocity = sims.qpos[rows], sims.qvel[rows]
        count = len(position)
        parts = [position[:, 2:] if env._exclude_current_positions_from_observation else position, velocity]
        if env._include_cinert_in_observation is True:
            parts.append(derived["cinert"][rows][:, 1:].reshape(count, -1))
        if env._include_cvel_in_observation is True:
            parts.append(derived["cvel"][rows][:, 1:].reshape(count, -1))
        if env._include_qfrc_actuator_in_observation is True:
            parts.append(derived["qfrc_actuator"][rows][:, 6:])
        if env._include_cfrc_ext_in_observation is True:
            parts.append(derived["cfrc_ext"][rows][:, 1:].reshape(count, -1))
        return np.concatenate(parts, axis=1)

    def mass_centers(self, xipos: np.ndarray) -> np.ndarray:
        """``(N, 2)`` ``mass_center`` of each simulation's ``xipos`` ``(nbody, 3)``."""
        masses = self.env.model.body_mass
        return np.stack([(np.einsum("b,bj->j", masses, positions) / masses.sum())[0:2] for positions in xipos])

    def tendons(self, sims: Simulations, rows: np.ndarray | slice) -> dict[str, np.ndarray]:
        return {
            "tendon_length": sims.derived["ten_length"][rows].copy(),
            "tendon_velocity": sims.derived["ten_velocity"][rows].copy(),
        }

    def outcome(self, sims, before, actions):
        env = self.env
        xy_velocity = (self.mass_centers(sims.derived["xipos"]) - self.mass_centers(before.xipos)) / self.dt
        min_z, max_z = env._healthy_z_range
        healthy = (min_z < sims.qpos[:, 2]) & (sims.qpos[:, 2] < max_z)
        forward_reward = env._forward_reward_weight * xy_velocity[:, 0]
        healthy_reward = healthy * env._healthy_reward
        ctrl_cost = env._ctrl_cost_weight * squared_sums(sims.ctrl)
        contact_cost = np.clip(
            env._contact_cost_weight * squared_sums(sims.derived["cfrc_ext"]), *env._contact_cost_range
        )
        reward = (forward_reward + healthy_reward) - (ctrl_cost + contact_cost)
        info = {
            "x_position": sims.qpos[:, 0].copy(),
            "y_position": sims.qpos[:, 1].copy(),
            **self.tendons(sims, slice(None)),
            "distance_from_origin": distances_from_origin(sims.qpos[:, 0:2]),
            "x_velocity": xy_velocity[:, 0],
            "y_velocity": xy_velocity[:, 1],
            "reward_survive": healthy_reward,
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
        }
        return StepOutcome(reward, ~healthy & env._terminate_when_unhealthy, info)

    def reset_info(self, sims, rows):
        qpos = sims.qpos[rows]
        return {
            "x_position": qpos[:, 0],
            "y_position": qpos[:, 1],
            **self.tendons(sims, rows),
            "distance_from_origin": distances_from_origin(qpos[:, 0:2]),
        }


class HumanoidStandup(Humanoid):
    """gymnasium/envs/mujoco/humanoidstandup_v5.py: Humanoid's observation; the reward for height, no termination."""

    derived_fields = ("cinert", "cvel", "qfrc_actuator", "ten_length", "ten_velocity")

    def outcome(self, sims, before, actions):
        env = self.env
        pos_after = sims.qpos[:, 2].copy()
        uph_cost = (pos_after - 0) / env.model.opt.timestep
        quad_ctrl_cost = env._ctrl_cost_weight * squared_sums(sims.ctrl)
        quad_impact_cost = np.clip(
            env._impact_cost_weight * squared_sums(sims.derived["cfrc_ext"]), *env._impact_cost_range
        )
        reward = uph_cost - quad_ctrl_cost - quad_impact_cost + 1
        info = {
            "x_position": sims.qpos[:, 0].copy(),
            "y_position": sims.qpos[:, 1].copy(),
            "z_distance_from_origin": pos_after - env.init_qpos[2],
            **self.tendons(sims, slice(None)),
            "reward_linup": uph_cost,
            "reward_quadctrl": -quad_ctrl_cost,
            "reward_impact": -quad_impact_cost,
        }
        return StepOutcome(reward, np.zeros(len(actions), dtype=bool), info)

    def reset_info(self, sims, rows):
        qpos = sims.qpos[rows]
        return {
            "x_position": qpos[:, 0],
            "y_position": qpos[:, 1],
            "z_distance_from_origin": qpos[:, 2] - self.env.init_qpos[2],
            **self.tendons(sims, rows),
        }


BATCHED_TASKS: dict[str, type[BatchedTask]] = {
    "Hopper-v5": Hopper,
    "Walker2d-v5": Walker2d,
    "HalfCheetah-v5": HalfCheetah,
    "Swimmer-v5": Swimmer,
    "InvertedPendulum-v5": InvertedPendulum,
    "InvertedDoublePendulum-v5": InvertedDoublePendulum,
    "Reacher-v5": Reacher,
    "Pusher-v5": Pusher,
    "Ant-v5": Ant,
    "Humanoid-v5": Humanoid,
    "HumanoidStandup-v5": HumanoidStandup,
}
"""The tasks ``BatchedMujocoVectorEnv`` computes exactly: every MuJoCo v5 task Gymnasium ships."""


class BatchedMujocoVectorEnv(VectorEnv):
    """``num_envs`` simulations of ``env_id`` stepped by ``mujoco.batch.Batch`` on ``threads`` threads, returning
    what ``SyncVectorEnv([gym.make(env_id)] * num_envs, autoreset_mode=SAME_STEP)`` returns, bit for bit: observations
    ``(N, obs_dim)`` float64, rewards ``(N,)``, terminations and truncations (at the registered time limit) ``(N,)``,
    and its ``info`` (each key an ``(N,)`` array with its ``_key`` mask; for the envs that ended, ``final_obs``,
    ``final_info`` and the reset's info). Seeds as ``SyncVectorEnv``: ``reset(seed=s)`` seeds env ``i`` with
    ``s + i``. ``snapshot``/``restore`` take and give ``envs.mujoco.snapshot_vector_env``'s records, so a state
    moves between the two exactly. Results do not depend on ``threads``.
    """

    metadata: ClassVar[dict] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, threads: int) -> None:
        if env_id not in BATCHED_TASKS:
            raise ValueError(f"{env_id!r} is not one of the batched tasks: {', '.join(BATCHED_TASKS)}")
        if num_envs < 1 or threads < 1:
            raise ValueError(f"num_envs and threads must be at least 1, got {num_envs} and {threads}")
        self._template = gym.make(env_id)
        inner = self._template.unwrapped
        self.task = BATCHED_TASKS[env_id](inner)
        self.spec = self._template.spec
        self.max_episode_steps = self.spec.max_episode_steps
        self.frame_skip = inner.frame_skip
        self.num_envs = num_envs
        self.single_observation_space = self._template.observation_space
        self.single_action_space = self._template.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.batch = mujoco.batch.Batch(
            inner.model, num_envs, nthread=threads, persistent=self.task.reads_contact_forces
        )
        assert self.batch.nstate == mujoco.mj_stateSize(inner.model, BATCH_STATE_SPEC)
        derived = {name: self.batch.bind(name) for name in self.task.derived_fields}
        if self.task.reads_contact_forces:
            derived["cfrc_ext"] = np.zeros((num_envs, inner.model.nbody, 6))
            self._scratch = mujoco.MjData(inner.model)
        self.sims = Simulations(self.batch.bind("qpos"), self.batch.bind("qvel"), self.batch.bind("ctrl"), derived)
        self._positions = {name: self.batch.bind(name) for name in BODY_POSITIONS}
        self._positions_before = {name: np.zeros_like(value) for name, value in self._positions.items()}
        self._elapsed_steps = np.zeros(num_envs, dtype=np.int64)
        self._rngs: list[np.random.Generator | None] = [None] * num_envs

    @property
    def threads(self) -> int:
        """Threads the batch steps on, the caller's included."""
        return self.batch.nthread

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        """Reset every env; ``seed`` as ``SyncVectorEnv.reset``'s. Returns ``(obs (N, obs_dim), info)``."""
        if options is not None:
            raise ValueError("BatchedMujocoVectorEnv.reset takes no options (MuJoCo v5 tasks read none)")
        if seed is None:
            seed = [None] * self.num_envs
        elif isinstance(seed, int):
            seed = [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(f"{len(seed)} seeds for {self.num_envs} environments")
        rows = np.arange(self.num_envs)
        observations = self._reset_rows(rows, seed)
        return observations, self._mask_info({}, rows, self.task.reset_info(self.sims, rows))

    def _reset_rows(self, rows: np.ndarray, seeds: list[int | None]) -> np.ndarray:
        """MujocoEnv.reset for each of ``rows``: reseed where a seed is given, ``mj_resetData``, ``reset_model``'s
        noise, ``mj_forward``; returns their ``(n, obs_dim)`` observations."""
        self.batch.reset(rows, stage=mujoco.mjtStage.mjSTAGE_NONE)
        for row, seed in zip(rows, seeds):
            if seed is not None or self._rngs[row] is None:
                self._rngs[row] = seeding.np_random(seed)[0]
            state = self.task.reset_state(self._rngs[row])
            self.sims.qpos[row], self.sims.qvel[row] = state.qpos, state.qvel
        self.batch.forward(rows)
        if self.task.reads_contact_forces:
            self.sims.derived["cfrc_ext"][rows] = 0  # mj_resetData zeroes it and mj_forward does not compute it
        for name, value in self._positions.items():
            self._positions_before[name][rows] = value[rows]
        self._elapsed_steps[rows] = 0
        return self.task.observe(self.sims, rows)

    def step(self, actions: np.ndarray):
        """Step every env with ``actions`` ``(N, nu)``; an env that ends is reset in the same step (its last
        observation in ``info["final_obs"]``). Returns ``(obs, rewards, terminations, truncations, info)``."""
        actions = np.asarray(actions)
        before = StateBefore(self.sims.qpos.copy(), *(self._positions_before[name] for name in BODY_POSITIONS))
        self.sims.ctrl[:] = actions
        self.batch.step(nstep=self.frame_skip)
        if self.task.reads_contact_forces:
            self._compute_contact_forces()
        observations = self.task.observe(self.sims, slice(None))
        outcome = self.task.outcome(self.sims, before, actions)
        for name, value in self._positions.items():  # read by the next step; `before` is done with them
            self._positions_before[name][:] = value
        self._elapsed_steps += 1
        truncated = self._elapsed_steps >= self.max_episode_steps
        done = outcome.terminated | truncated
        if not done.any():
            return observations, outcome.reward, outcome.terminated, truncated, self._mask_info(outcome.info)
        rows = np.flatnonzero(done)
        final_obs = np.full(self.num_envs, None, dtype=object)
        for row in rows:
            final_obs[row] = observations[row].copy()
        final_info = self._mask_info({}, rows, {key: value[rows] for key, value in outcome.info.items()})
        observations[rows] = self._reset_rows(rows, [None] * len(rows))
        info = {"final_obs": final_obs, "_final_obs": done.copy(), "final_info": final_info, "_final_info": done.copy()}
        info.update(self._mask_info(outcome.info, rows, self.task.reset_info(self.sims, rows)))
        return observations, outcome.reward, outcome.terminated, truncated, info

    def _compute_contact_forces(self) -> None:
        """``cfrc_ext`` of every simulation as Gymnasium's step leaves it: ``mj_rnePostConstraint`` on the
        simulation's ``MjData`` after ``mj_step`` (mujoco_env.py ``_step_mujoco_simulation``), one after another."""
        model, scratch = self.batch.model, self._scratch
        for sim in range(self.num_envs):
            self.batch.get_data(sim, scratch)
            mujoco.mj_rnePostConstraint(model, scratch)
            self.sims.derived["cfrc_ext"][sim] = scratch.cfrc_ext

    def _mask_info(
        self,
        running: dict[str, np.ndarray],
        reset_rows: np.ndarray | None = None,
        reset_info: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """``SyncVectorEnv``'s merged info: each key an ``(N,)`` array with a ``_key`` mask of the envs that have it;
        ``running`` holds every env's values, replaced for ``reset_rows`` (which have only ``reset_info``'s keys)."""
        done = np.zeros(self.num_envs, dtype=bool)
        if reset_rows is not None:
            done[reset_rows] = True
        reset_info = reset_info or {}
        info = {}
        for key in dict.fromkeys([*running, *reset_info]):
            if key not in reset_info and done.all():
                continue  # no env has it: SyncVectorEnv makes no entry
            template = running[key] if key in running else reset_info[key]
            values = np.zeros((self.num_envs, *template.shape[1:]), dtype=template.dtype)
            mask = np.zeros(self.num_envs, dtype=bool)
            if key in running:
                values[~done], mask[~done] = running[key][~done], True
            if key in reset_info:
                values[done], mask[done] = reset_info[key], True
            info[key], info[f"_{key}"] = values, mask
        return info

    def snapshot(self) -> list[dict]:
        """Each env's MuJoCo integration state, time-limit counter and RNG state (``snapshot_vector_env``'s records),
        taken after a ``reset``."""
        if any(rng is None for rng in self._rngs):
            raise RuntimeError("snapshot before reset: the environments have no random state yet")
        return [
            {
                "mujoco_state": self.batch.state[i].copy(),
                "body_positions": {name: value[i].copy() for name, value in self._positions_before.items()},
                "elapsed_steps": int(self._elapsed_steps[i]),
                "rng_state": copy.deepcopy(self._rngs[i].bit_generator.state),
            }
            for i in range(self.num_envs)
        ]

    def restore(self, snapshots: list[dict]) -> None:
        """Put every env back into a state taken by ``snapshot`` or ``snapshot_vector_env``."""
        if len(snapshots) != self.num_envs:
            raise ValueError(f"checkpoint holds {len(snapshots)} environment states but the run has {self.num_envs}")
        for i, snapshot in enumerate(snapshots):
            if snapshot["mujoco_state"].shape != (self.batch.nstate,):
                raise ValueError(
                    "checkpoint environment state does not match this environment's model; "
                    "was it saved for another env id?"
                )
            self.batch.state[i] = snapshot["mujoco_state"]
            for name, value in snapshot.get("body_positions", {}).items():  # absent from checkpoints made before
                self._positions_before[name][i] = value
            self._elapsed_steps[i] = snapshot["elapsed_steps"]
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = snapshot["rng_state"]
            self._rngs[i] = rng

    def close_extras(self, **kwargs) -> None:
        self._template.close()
