"""``ppo train``: the walker training loop, top to bottom (after CleanRL's ppo_continuous_action.py). With a
group-relative objective (grpo, dr-grpo, rloo, dapo) an iteration collects whole groups of G episodes that start
from one state instead of a fixed number of steps, and no critic is built."""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from gymnasium.vector import SyncVectorEnv

from agents.core.batch import Minibatch
from agents.core.config import PPOConfig
from agents.core.distributed import all_reduce_sum, gather_objects, rank, world_size
from agents.core.kl import KLController
from agents.core.minibatch_step import make_minibatch_step
from agents.core.objectives import SamplingPlan, uses_critic
from agents.core.optimizer import AdamState
from agents.core.update import ppo_update
from agents.runs.checkpoint import (
    CheckpointError,
    from_storable,
    global_rng_state,
    restore_global_rng_state,
    to_storable,
)
from agents.runs.iteration import (
    IterationClock,
    RunProgress,
    broadcast_trainable,
    update_metrics,
    update_schedule,
)
from agents.runs.session import checkpoint_due, open_run_folder, prepare_run, save_loop_state
from agents.walkers.config import MujocoEnvConfig, TrainConfig, validate_config
from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.rollout import EpisodeTracker, RewardScaler, Rollout, collect_mujoco, collect_mujoco_groups
from envs.mujoco import available_threads, make_vector_env, restore_vector_env, snapshot_vector_env
from envs.mujoco_batch import BATCHED_TASKS, BatchedMujocoVectorEnv

RECENT_EPISODES = 100  # "last 100 episodes" return, as CleanRL and SB3 report


@dataclass
class WalkerLoopState:
    """Everything that decides the rest of a walker run: networks, optimiser, controllers, RNGs and environments."""

    shared_keys: ClassVar[frozenset[str]] = frozenset(
        {"policy", "adam", "penalty", "recent_returns", "recent_lengths", "global_step", "iteration"}
    )

    policy: GaussianActorCritic
    adam: AdamState
    penalty: KLController
    reward_scaler: RewardScaler
    tracker: EpisodeTracker
    minibatch_generator: torch.Generator
    action_rng: np.random.Generator
    envs: SyncVectorEnv | BatchedMujocoVectorEnv
    obs: np.ndarray
    """The observation each environment is in: where the next rollout starts."""
    device: torch.device
    recent_returns: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_EPISODES))
    recent_lengths: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_EPISODES))
    global_step: int = 0
    iteration: int = 0

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "adam": self.adam.state_dict(),
            "penalty": self.penalty.state_dict(),
            "reward_scaler": to_storable(self.reward_scaler.state_dict()),
            "episode_tracker": to_storable(self.tracker.state_dict()),
            **global_rng_state(),
            "minibatch_rng": self.minibatch_generator.get_state(),
            "action_rng": to_storable(self.action_rng.bit_generator.state),
            "envs": to_storable(snapshot_vector_env(self.envs)),
            "obs": to_storable(self.obs),
            "recent_returns": to_storable(list(self.recent_returns)),
            "recent_lengths": to_storable(list(self.recent_lengths)),
            "global_step": self.global_step,
            "iteration": self.iteration,
        }

    def load_state_dict(self, state: dict) -> None:
        """Inverse of ``state_dict``; a ``CheckpointError`` names what does not fit."""
        try:
            self.policy.load_state_dict(state["policy"])
        except RuntimeError as error:
            raise CheckpointError(
                f"checkpoint policy does not fit this config ({str(error).splitlines()[0]})"
            ) from error
        self.adam.load_state_dict(state["adam"])
        self.penalty.load_state_dict(state["penalty"])
        self.reward_scaler.load_state_dict(from_storable(state["reward_scaler"]))
        self.tracker.load_state_dict(from_storable(state["episode_tracker"]))
        restore_global_rng_state(state, self.device)
        self.minibatch_generator.set_state(state["minibatch_rng"].cpu())
        self.action_rng.bit_generator.state = state["action_rng"]
        restore_vector_env(self.envs, from_storable(state["envs"]))
        self.obs = from_storable(state["obs"])
        self.recent_returns.extend(state["recent_returns"])
        self.recent_lengths.extend(state["recent_lengths"])
        self.global_step, self.iteration = state["global_step"], state["iteration"]


def equal_shares(batch: Minibatch, generator: torch.Generator) -> Minibatch:
    """Group rollouts differ in size between processes, but every process must take the same number of gradient
    steps (each ends in an all-reduce): with several processes, each keeps a random subset of the smallest size."""
    if world_size() == 1:
        return batch
    smallest = min(gather_objects(batch.size))
    return batch.select(torch.randperm(batch.size, generator=generator)[:smallest])


def episode_minibatches(ppo: PPOConfig, batch: Minibatch) -> PPOConfig:
    """A batch of whole episodes (sequence-level objectives) in minibatches of whole episodes: ``ppo`` with
    ``minibatch_size`` counted in episodes, as many per minibatch as give about the minibatches ``--minibatch-size``
    transitions would (``episodes x minibatch_size / steps``), at least one per process. Decided from counts over
    every process, so each takes the same number of gradient steps."""
    steps = float(all_reduce_sum(batch.mask.sum().reshape(1)))
    episodes = batch.size * world_size()
    per_process = max(1, round(episodes * ppo.minibatch_size / steps / world_size()))
    return replace(ppo, minibatch_size=per_process * world_size())


def group_metrics(rollout: Rollout, plan: SamplingPlan) -> dict[str, float]:
    """Over every process: the share of the iteration's groups whose episode returns are all equal, the groups
    sampled, and those dynamic sampling dropped (with its rounds and filler groups when it is on)."""
    counts = [rollout.zero_variance_groups, rollout.groups, rollout.groups_dropped]
    counts += [rollout.sampling_rounds, rollout.filler_groups]
    zero, groups, dropped, rounds, fillers = all_reduce_sum(torch.tensor(counts)).tolist()
    metrics = {"zero_variance_groups": zero / groups, "groups_sampled": groups, "groups_dropped": dropped}
    if plan.drop_zero_variance:
        metrics.update(sampling_rounds=rounds / world_size(), filler_groups=fillers)
    return metrics


def episode_metrics(state: WalkerLoopState, episodes: list[tuple[float, int]]) -> dict[str, float]:
    """The mean return and length of the last ``RECENT_EPISODES`` episodes (of every process), and of this
    iteration's."""
    nan = float("nan")
    return {
        "episode_return": float(np.mean(state.recent_returns)) if state.recent_returns else nan,
        "episode_length": float(np.mean(state.recent_lengths)) if state.recent_lengths else nan,
        "episode_return_latest": float(np.mean([r for r, _ in episodes])) if episodes else nan,
        "episodes_finished": len(episodes),
    }


def stepping_threads(env_cfg: MujocoEnvConfig, groups: bool) -> int | None:
    """Threads for ``make_vector_env``: None (Gymnasium's envs one by one) for one env, for the group objectives
    (``play_group`` steps each env alone) and for a task without a batched form unless threads were asked for (the
    factory then says in one line that it falls back); else ``--env-threads``, 0 meaning ``available_threads()``."""
    if groups or env_cfg.num_envs == 1 or (env_cfg.env_threads == 0 and env_cfg.env_id not in BATCHED_TASKS):
        return None
    return env_cfg.env_threads or available_threads()


def train(config: TrainConfig) -> Path:
    """Train PPO on a MuJoCo task as ``config`` says; returns the run folder."""
    config, device, checkpoint = prepare_run(config, validate_config)
    env_cfg, ppo_cfg, run_cfg, objective = config.env, config.ppo, config.run, config.objective
    plan = objective.sampling_plan()
    groups = not uses_critic(objective)  # group-relative: G environments run the G episodes of a group side by side
    num_envs = plan.group_size if groups else env_cfg.num_envs
    # every process steps its own environments: env i of process r resets with seed + r * num_envs + i
    process_seed = run_cfg.seed + rank() * num_envs

    # Environments and agent
    envs = make_vector_env(env_cfg.env_id, num_envs, threads=stepping_threads(env_cfg, groups))
    torch.manual_seed(run_cfg.seed)
    policy = GaussianActorCritic(
        envs.single_observation_space.shape[0],
        envs.single_action_space.shape[0],
        config.policy.hidden_sizes,
        config.policy.initial_log_std,
        env_cfg.normalize_observations,
        critic=not groups,
        activation=config.policy.activation,
        orthogonal_init=config.policy.orthogonal_init,
    ).to(device)
    params = broadcast_trainable(policy)  # identical initial weights on every process
    state = WalkerLoopState(
        policy=policy,
        adam=AdamState(params),
        penalty=objective.kl_controller(),
        reward_scaler=RewardScaler(ppo_cfg.gamma, num_envs, enabled=env_cfg.scale_rewards),
        tracker=EpisodeTracker(num_envs),
        minibatch_generator=torch.Generator().manual_seed(process_seed),
        action_rng=np.random.default_rng(process_seed),
        envs=envs,
        obs=envs.reset(seed=process_seed)[0],
        device=device,
    )
    run_dir, logger = open_run_folder(config, env_cfg.env_id, objective.name, state, checkpoint)
    # episode rows change length every iteration, and torch.compile refuses the length as a dynamic dimension
    # (ConstraintViolationError): the sequence-level objectives step eagerly
    minibatch_step = make_minibatch_step(policy, objective, ppo_cfg, run_cfg.compile and not objective.sequence_level)

    batch_size = env_cfg.num_steps * env_cfg.num_envs * world_size()  # every process's steps (groups: at least)
    num_iterations = ppo_cfg.total_steps // batch_size  # groups: the budget in steps decides instead
    total_steps = ppo_cfg.total_steps if groups else num_iterations * batch_size
    progress = RunProgress(run_cfg, total_steps, state.global_step, unit="step")
    try:
        while state.global_step < total_steps:
            iteration = state.iteration + 1
            clock = IterationClock()
            done = state.global_step / ppo_cfg.total_steps if groups else (iteration - 1) / num_iterations
            schedule = update_schedule(ppo_cfg, done, state.penalty)

            if groups:
                rollout = collect_mujoco_groups(
                    envs,
                    policy,
                    env_cfg.num_steps,
                    objective.advantage_estimator,
                    state.action_rng,
                    plan,
                    gamma=ppo_cfg.gamma,
                    episode_rows=objective.sequence_level,
                )
                steps = int(all_reduce_sum(torch.tensor(rollout.steps)))  # stepped by every process
                batch = equal_shares(rollout.batch, state.minibatch_generator).of_any_size()
                update_cfg = episode_minibatches(ppo_cfg, batch) if objective.sequence_level else ppo_cfg
            else:
                rollout = collect_mujoco(
                    envs,
                    policy,
                    state.obs,
                    env_cfg.num_steps,
                    state.reward_scaler,
                    state.tracker,
                    state.action_rng,
                    ppo_cfg.gamma,
                    ppo_cfg.gae_lambda,
                )
                steps, batch, state.obs = batch_size, rollout.batch, rollout.next_obs
                update_cfg = ppo_cfg
            state.global_step += steps
            clock.rollout_done()

            recompute = ppo_cfg.recompute_advantages and rollout.targets is not None
            refresh = functools.partial(rollout.targets.refreshed, policy) if recompute else None
            result = ppo_update(
                policy,
                params,
                state.adam,
                minibatch_step,
                batch,
                update_cfg,
                schedule,
                state.minibatch_generator,
                refresh=refresh,
            )
            # once per iteration, from the whole update (paper, section 4)
            state.penalty.update(result.kl_after_update, batch.size * world_size())
            policy.update_normalizer(rollout.observations)  # after the update, so training saw the rollout's statistics
            clock.update_done()

            episodes = [episode for part in gather_objects(rollout.finished_episodes) for episode in part]
            state.recent_returns.extend(r for r, _ in episodes)
            state.recent_lengths.extend(n for _, n in episodes)
            state.iteration = iteration
            metrics = {
                "iteration": iteration,
                "global_step": state.global_step,
                **episode_metrics(state, episodes),
                "policy_std": float(torch.exp(policy.actor_log_std.detach()).mean()),
                **(group_metrics(rollout, plan) if groups else {}),
                **update_metrics(schedule, state.penalty, result),
                **clock.metrics(steps),
            }
            logger.log(metrics)
            progress.advance(steps, sps=f"{metrics['sps']:.0f}", ret=f"{metrics['episode_return']:.1f}")

            if checkpoint_due(iteration, run_cfg, last=state.global_step >= total_steps):
                save_loop_state(config, run_dir, state)
    finally:
        progress.close()
        logger.close()
        envs.close()
    return run_dir
