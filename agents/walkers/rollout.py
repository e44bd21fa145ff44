"""Collecting experience: one MuJoCo rollout of ``num_steps`` steps per env, turned into a PPO batch; or, for the
group-relative objectives, whole groups of episodes that start from one state, each scored by its return."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from gymnasium.vector import SyncVectorEnv

from agents.core.advantages import compute_gae, discounted_returns, whiten
from agents.core.batch import Minibatch, flatten_time_major
from agents.core.distributed import all_reduce_sum, merge_moments
from agents.core.group_advantages import GROUP_ESTIMATORS, SampledGroups, fill_batch, zero_variance_groups
from agents.core.moments import combine_moments
from agents.core.objectives import REINFORCE_PP_ESTIMATORS, SamplingPlan
from agents.walkers.gaussian import GaussianActorCritic
from envs.mujoco_batch import BatchedMujocoVectorEnv

REWARD_CLIP = 10.0  # clip scaled rewards to +-10 (Huang et al. 2022, continuous detail 9; CleanRL's TransformReward)
REWARD_SCALE_EPS = 1e-8  # variance floor, as gymnasium NormalizeReward


@dataclass
class RunningMeanStd:
    """Running mean and (population) variance of a stream of arrays, merged batch by batch (Chan et al. 1979)."""

    mean: float = 0.0
    var: float = 1.0
    count: float = 0.0

    def update(self, values: np.ndarray) -> None:
        batch_count = float(values.size)
        if batch_count == 0:
            return
        batch_mean, batch_var = float(values.mean()), float(values.var())
        merged = merge_moments(
            torch.tensor(batch_mean, dtype=torch.float64), torch.tensor(batch_var, dtype=torch.float64), batch_count
        )
        batch_mean, batch_var, batch_count = float(merged[0]), float(merged[1]), merged[2]  # over every process
        self.mean, self.var, self.count = combine_moments(
            self.mean, self.var, self.count, batch_mean, batch_var, batch_count
        )


@dataclass
class RewardScaler:
    """Reward scaling of openai/baselines VecNormalize: divide by the std of the discounted return
    ``G_t = gamma * G_{t-1} * (1 - done_{t-1}) + r_t`` (no mean subtraction), then clip to +-10.

    The statistics are merged once per rollout and then applied to the whole rollout.
    """

    gamma: float
    num_envs: int
    enabled: bool = True
    return_stats: RunningMeanStd = field(default_factory=RunningMeanStd)
    discounted_return: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.discounted_return = np.zeros(self.num_envs)

    def scale(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """Scale a ``(T, B)`` block of rewards; ``dones[t]`` resets the running return after step ``t``."""
        if not self.enabled:
            return rewards
        returns = np.empty_like(rewards)
        for t in range(rewards.shape[0]):
            self.discounted_return = self.discounted_return * self.gamma + rewards[t]
            returns[t] = self.discounted_return
            self.discounted_return = np.where(dones[t], 0.0, self.discounted_return)
        self.return_stats.update(returns)
        return np.clip(rewards / np.sqrt(self.return_stats.var + REWARD_SCALE_EPS), -REWARD_CLIP, REWARD_CLIP)

    def state_dict(self) -> dict:
        stats = self.return_stats
        return {
            "mean": stats.mean,
            "var": stats.var,
            "count": stats.count,
            "discounted_return": self.discounted_return.copy(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.return_stats = RunningMeanStd(state["mean"], state["var"], state["count"])
        self.discounted_return = np.asarray(state["discounted_return"], dtype=np.float64).copy()


@dataclass
class EpisodeTracker:
    """Undiscounted return and length of the episode each env is in, and of those that finished."""

    num_envs: int
    running_return: np.ndarray = field(init=False)
    running_length: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.running_return = np.zeros(self.num_envs)
        self.running_length = np.zeros(self.num_envs, dtype=np.int64)

    def record(self, rewards: np.ndarray, dones: np.ndarray) -> list[tuple[float, int]]:
        """Add a ``(T, B)`` block of rewards; return ``(return, length)`` of each episode that ended in it,
        by end step.
        """
        ended: list[tuple[int, float, int]] = []
        for env_index in range(self.num_envs):
            start = 0
            for end in np.flatnonzero(dones[:, env_index]):
                episode_return = self.running_return[env_index] + float(rewards[start : end + 1, env_index].sum())
                ended.append((int(end), episode_return, int(self.running_length[env_index]) + int(end) + 1 - start))
                self.running_return[env_index], self.running_length[env_index], start = 0.0, 0, int(end) + 1
            self.running_return[env_index] += float(rewards[start:, env_index].sum())
            self.running_length[env_index] += rewards.shape[0] - start
        return [(episode_return, length) for _, episode_return, length in sorted(ended, key=lambda item: item[0])]

    def state_dict(self) -> dict:
        return {"running_return": self.running_return.copy(), "running_length": self.running_length.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.running_return = np.asarray(state["running_return"], dtype=np.float64).copy()
        self.running_length = np.asarray(state["running_length"], dtype=np.int64).copy()


@dataclass(frozen=True)
class CriticTargets:
    """A rollout's rewards and step ends, kept so that its advantages and value targets can be computed again with
    another critic: at collection, and before every epoch after the first with ``--recompute-advantages``
    (Andrychowicz et al. 2021, sec. 3.5; Tianshou's ``recompute_adv``)."""

    rewards: torch.Tensor
    """Scaled rewards ``(T, B)``."""
    terminated: torch.Tensor
    """1.0 where the step ended its episode in a terminal state ``(T, B)``: no bootstrap."""
    truncated: torch.Tensor
    """1.0 where the step ended its episode at the time limit ``(T, B)``: bootstrap from the final observation."""
    next_obs: torch.Tensor
    """Raw observation each env is in after the last step ``(B, obs_dim)``."""
    final_obs: torch.Tensor
    """Raw final observations of the truncated episodes ``(K, obs_dim)``, K >= 0."""
    final_steps: torch.Tensor
    """Step ``t`` of each truncated episode's end ``(K,)``."""
    final_envs: torch.Tensor
    """Env ``b`` of each truncated episode's end ``(K,)``."""
    gamma: float
    """Discount factor of the GAE recursion."""
    gae_lambda: float
    """GAE lambda."""

    def advantages(self, policy: GaussianActorCritic, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE advantages and value targets ``(T, B)`` from ``values`` ``(T, B)`` of the rollout's observations and
        ``policy``'s critic at where each step led: the next step's value, V(final obs) after a truncation, V(next
        obs) after the last step; a terminated step bootstraps from 0 (``compute_gae``)."""
        next_values = torch.cat([values[1:], policy.value(self.next_obs).unsqueeze(0)])
        if len(self.final_obs):
            next_values[self.final_steps, self.final_envs] = policy.value(self.final_obs)
        mask = torch.ones_like(values)
        return compute_gae(
            self.rewards, values, next_values, self.terminated, self.truncated, mask, self.gamma, self.gae_lambda
        )

    def refreshed(self, policy: GaussianActorCritic, batch: Minibatch) -> Minibatch:
        """``batch`` (this rollout's, time-major flattened) with values, advantages and value targets from
        ``policy``'s critic as it is now; the policy's side (old log-probs, old actions) is unchanged."""
        values = policy.value(batch.inputs["obs"]).reshape(self.rewards.shape)
        advantages, returns = self.advantages(policy, values)
        return batch._replace(
            advantages=advantages.reshape(-1), returns=returns.reshape(-1), old_values=values.reshape(-1)
        )


class Rollout(NamedTuple):
    """One iteration's experience, ready for ``ppo_update``."""

    batch: Minibatch
    """Flattened ``T * B`` transitions with advantages and value targets."""
    next_obs: np.ndarray | None
    """Observation each env is in after the rollout ``(B, obs_dim)``: where the next rollout starts; None for group
    rollouts (every group starts from a reset)."""
    observations: np.ndarray
    """Raw observations seen ``(T * B, obs_dim)``, for the normaliser update after the PPO update."""
    finished_episodes: list[tuple[float, int]]
    """``(return, length)`` of every episode that ended during the rollout, in order."""
    zero_variance_groups: int = 0
    """Group rollouts: groups whose episode returns are all equal (no gradient), among those in the batch."""
    groups: int = 0
    """Group rollouts: groups collected (dropped ones included)."""
    groups_dropped: int = 0
    """Group rollouts with dynamic sampling: zero-variance groups left out of the batch."""
    steps: int = 0
    """Group rollouts: environment steps taken (dropped groups included)."""
    sampling_rounds: int = 0
    """Group rollouts: rounds of ``fill_batch``."""
    filler_groups: int = 0
    """Group rollouts with dynamic sampling: dropped groups put back to fill the batch (zero advantage)."""
    targets: CriticTargets | None = None
    """What recomputing the batch's advantages with a newer critic needs (``CriticTargets.refreshed``); None for
    group rollouts (no critic)."""


def collect_mujoco(
    envs: SyncVectorEnv | BatchedMujocoVectorEnv,
    policy: GaussianActorCritic,
    obs: np.ndarray,
    num_steps: int,
    reward_scaler: RewardScaler,
    tracker: EpisodeTracker,
    action_rng: np.random.Generator,
    gamma: float,
    gae_lambda: float,
) -> Rollout:
    """Step ``envs`` for ``num_steps`` with actions sampled from ``policy`` and build the PPO batch.

    Actions are clipped to the action bounds for the env but stored unclipped, so their
    log-probabilities are those of the Gaussian that sampled them (Huang et al. 2022, continuous
    detail 5). Actions come from a numpy copy of the actor (``NumpyActor``) and ``action_rng``;
    log-probs and values of the whole rollout come from one batched torch forward afterwards
    (the policy is frozen during collection).
    A truncated episode bootstraps from V(``info["final_obs"]``); a terminated one from 0.
    """
    device = policy.actor_log_std.device
    num_envs = envs.num_envs
    low, high = envs.single_action_space.low, envs.single_action_space.high
    obs_buffer = np.empty((num_steps, num_envs, obs.shape[-1]), dtype=np.float32)
    action_buffer = np.empty((num_steps, num_envs, low.shape[0]), dtype=np.float32)
    rewards = np.empty((num_steps, num_envs))
    terminated = np.empty((num_steps, num_envs), dtype=bool)
    truncated = np.empty((num_steps, num_envs), dtype=bool)
    truncated_final_obs: list[tuple[int, int, np.ndarray]] = []
    actor = policy.numpy_actor()
    for t in range(num_steps):
        obs_buffer[t] = obs
        action_buffer[t] = actor.sample(obs_buffer[t], action_rng)
        obs, rewards[t], terminated[t], truncated[t], info = envs.step(
            np.minimum(np.maximum(action_buffer[t], low), high)
        )
        if truncated[t].any():
            for env_index in np.flatnonzero(truncated[t] & ~terminated[t]):
                truncated_final_obs.append((t, env_index, info["final_obs"][env_index]))
    obs = obs.astype(np.float32)
    finished = tracker.record(rewards, terminated | truncated)

    flat_obs = torch.from_numpy(obs_buffer.reshape(num_steps * num_envs, -1)).to(device)
    flat_actions = torch.from_numpy(action_buffer.reshape(num_steps * num_envs, -1)).to(device)
    record = policy.rollout_record(flat_obs, flat_actions)
    values = record["values"].reshape(num_steps, num_envs)
    float_tensor = functools.partial(torch.as_tensor, dtype=torch.float32, device=device)
    targets = CriticTargets(
        rewards=float_tensor(reward_scaler.scale(rewards, terminated | truncated)),
        terminated=float_tensor(terminated),
        truncated=float_tensor(truncated),
        next_obs=float_tensor(obs),
        final_obs=float_tensor(np.array([o for _, _, o in truncated_final_obs]).reshape(-1, obs.shape[-1])),
        final_steps=torch.tensor([t for t, _, _ in truncated_final_obs], dtype=torch.long, device=device),
        final_envs=torch.tensor([b for _, b, _ in truncated_final_obs], dtype=torch.long, device=device),
        gamma=gamma,
        gae_lambda=gae_lambda,
    )
    advantages, returns = targets.advantages(policy, values)
    mask = torch.ones(num_steps, num_envs, device=device)

    def time_major(flat: torch.Tensor) -> torch.Tensor:
        return flat.reshape(num_steps, num_envs, *flat.shape[1:])

    batch = flatten_time_major(
        inputs={
            "obs": time_major(flat_obs),
            "actions": time_major(flat_actions),
            "old_mean": time_major(record["old_mean"]),
            "old_log_std": time_major(record["old_log_std"]),
        },
        old_logp=time_major(record["old_logp"]),
        advantages=advantages,
        returns=returns,
        old_values=values,
        mask=mask,
    )
    return Rollout(batch, obs, obs_buffer.reshape(num_steps * num_envs, -1), finished, targets=targets)


def episode_batch(transitions: Minibatch, lengths: list[int]) -> Minibatch:
    """The transitions of consecutive episodes of ``lengths`` as one row per episode: every ``(N, ...)`` tensor
    becomes ``(E, T_max, ...)``, zero past an episode's end, where the mask is 0."""

    def rows(flat: torch.Tensor) -> torch.Tensor:
        return torch.nn.utils.rnn.pad_sequence(list(flat.split(lengths)), batch_first=True)

    return Minibatch(
        inputs={key: rows(value) for key, value in transitions.inputs.items()},
        old_logp=rows(transitions.old_logp),
        advantages=rows(transitions.advantages),
        returns=rows(transitions.returns),
        old_values=rows(transitions.old_values),
        mask=rows(transitions.mask),
    )


KEEP_EVERY_GROUP = SamplingPlan()
"""No dynamic sampling: one round, every group in the batch."""


class EpisodeGroup(NamedTuple):
    """G episodes run side by side from one initial state."""

    observations: list[list[np.ndarray]]
    """Per episode, the observation of each step."""
    actions: list[list[np.ndarray]]
    """Per episode, the (unclipped) action of each step."""
    returns: np.ndarray
    """``(G,)`` undiscounted returns."""
    rewards: list[list[float]] | None = None
    """Per episode, the reward of each step (REINFORCE++ reads them); None for scripted groups."""

    @property
    def lengths(self) -> list[int]:
        return [len(episode) for episode in self.observations]


def play_group(envs: SyncVectorEnv, actor, action_rng: np.random.Generator) -> EpisodeGroup:
    """Reset all ``G = num_envs`` environments with one seed (drawn from ``action_rng``), so the G episodes start
    from the same state, and run them with actions sampled from ``actor`` until every one has ended (terminated or
    truncated by the time limit)."""
    group_size = envs.num_envs
    low, high = envs.single_action_space.low, envs.single_action_space.high
    obs, _ = envs.reset(seed=[int(action_rng.integers(2**31 - 1))] * group_size)
    active = np.ones(group_size, dtype=bool)
    episode_obs, episode_actions = [[] for _ in range(group_size)], [[] for _ in range(group_size)]
    episode_rewards: list[list[float]] = [[] for _ in range(group_size)]
    returns = np.zeros(group_size)
    obs = obs.astype(np.float32)
    while active.any():
        sampled = actor.sample(obs, action_rng)  # for all G, so the random stream does not depend on who is done
        clipped = np.minimum(np.maximum(sampled, low), high)
        for index in np.flatnonzero(active):  # only the episodes still running are stepped
            episode_obs[index].append(obs[index].copy())
            episode_actions[index].append(sampled[index])
            next_obs, reward, terminated, truncated, _ = envs.envs[index].step(clipped[index])
            returns[index] += reward
            episode_rewards[index].append(float(reward))
            obs[index] = next_obs
            active[index] = not (terminated or truncated)
    return EpisodeGroup(episode_obs, episode_actions, returns, episode_rewards)


def reinforce_pp_steps(gamma: float, estimator: str, group: EpisodeGroup) -> torch.Tensor:
    """``(G, T_max)`` discounted returns of each step of the group's episodes (REINFORCE++, before whitening), from
    their per-step rewards; ``reinforce++-baseline`` first subtracts the group's mean reward at each step, an
    episode already over counting 0. Steps past an episode's end are 0."""
    if group.rewards is None:
        raise ValueError("REINFORCE++ reads each step's reward: the group was played without recording them")
    width = max(len(r) for r in group.rewards)
    rewards = torch.tensor([r + [0.0] * (width - len(r)) for r in group.rewards], dtype=torch.float64)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in group.rewards], dtype=torch.float64)
    if estimator == "reinforce++-baseline":
        rewards = (rewards - rewards.mean(0, keepdim=True)) * mask
    return discounted_returns(rewards, mask, gamma).to(torch.float32)


def collect_mujoco_groups(
    envs: SyncVectorEnv,
    policy: GaussianActorCritic,
    min_steps: int,
    estimator: str,
    action_rng: np.random.Generator,
    plan: SamplingPlan = KEEP_EVERY_GROUP,
    play: Callable[[], EpisodeGroup] | None = None,
    gamma: float = 1.0,
    episode_rows: bool = False,
) -> Rollout:
    """Whole groups of episodes (``play_group``), until the batch holds at least ``min_steps`` transitions.

    The batch holds transitions, ``(N,)`` each; with ``episode_rows`` (the sequence-level objectives: a walker
    episode is their sequence) it holds one row per episode, ``(E, T_max)`` padded and masked, as a text batch
    holds one row per completion (``episode_batch``).

    Each episode's undiscounted return is the outcome reward of all its steps; the group-relative ``estimator``
    (``GROUP_ESTIMATORS``) turns the G returns into G advantages, and every step of an episode gets its episode's.
    There is no critic and no bootstrapping: the outcome is the whole return, time-limit truncation included.

    The batch is filled by the core's ``fill_batch``, as text's is, in environment steps: one round plays groups
    until it has the steps still missing; with ``plan.drop_zero_variance`` (DAPO's dynamic sampling) groups whose
    returns are all equal are dropped and another round runs, at most ``plan.max_sampling_rounds``, after which
    dropped groups fill the batch (the group size is the number of environments, whatever ``plan`` says). ``play``
    replaces ``play_group`` (tests script the returns with it).

    REINFORCE++ (``REINFORCE_PP_ESTIMATORS``) reads the steps' own rewards instead: each step's advantage is its
    discounted return (``gamma``) within its episode, the baseline variant's rewards first less the group's mean
    reward at that step (0 for episodes already over), whitened over every process's batch (``reinforce_pp_steps``).
    """
    device = policy.actor_log_std.device
    group_size = envs.num_envs
    actor = policy.numpy_actor()
    play = play or (lambda: play_group(envs, actor, action_rng))
    rounds: list[list[EpisodeGroup]] = []
    finished: list[tuple[float, int]] = []

    def sample_round(missing_steps: int) -> SampledGroups:
        played: list[EpisodeGroup] = []
        while sum(sum(group.lengths) for group in played) < missing_steps:
            played.append(play())
            finished.extend(zip(played[-1].returns.tolist(), played[-1].lengths))
        rounds.append(played)
        rewards = torch.cat([torch.as_tensor(group.returns, dtype=torch.float32) for group in played])
        return SampledGroups(rewards, [sum(group.lengths) for group in played])

    filled = fill_batch(sample_round, min_steps, group_size, plan.max_sampling_rounds, plan.drop_zero_variance)
    reinforce_pp = estimator in REINFORCE_PP_ESTIMATORS
    observations, actions, advantages = [], [], []
    zero_variance = 0
    for round_index, group_index in filled.kept + filled.fillers:
        group = rounds[round_index][group_index]
        outcome = torch.as_tensor(group.returns, dtype=torch.float32)
        zero_variance += int(zero_variance_groups(outcome, group_size).all())
        if reinforce_pp:
            steps = reinforce_pp_steps(gamma, estimator, group)
            advantages.extend(steps[index, :length] for index, length in enumerate(group.lengths))
        else:
            group_advantages = GROUP_ESTIMATORS[estimator](outcome, group_size)
            advantages.extend(group_advantages[index].expand(length) for index, length in enumerate(group.lengths))
        for index in range(group_size):
            observations.extend(group.observations[index])
            actions.extend(group.actions[index])
    flat_advantages = torch.cat(advantages)
    if reinforce_pp:  # REINFORCE++ whitens over every process's steps
        flat_advantages = whiten(flat_advantages, torch.ones_like(flat_advantages), sum_over_processes=all_reduce_sum)
    flat_obs = torch.from_numpy(np.stack(observations)).to(device)
    flat_actions = torch.from_numpy(np.stack(actions)).to(device)
    record = policy.rollout_record(flat_obs, flat_actions)
    zeros = torch.zeros(len(observations), device=device)
    batch = Minibatch(
        inputs={
            "obs": flat_obs,
            "actions": flat_actions,
            "old_mean": record["old_mean"],
            "old_log_std": record["old_log_std"],
        },
        old_logp=record["old_logp"],
        advantages=flat_advantages.to(device),
        returns=zeros,
        old_values=zeros,
        mask=torch.ones(len(observations), device=device),
    )
    if episode_rows:
        batch = episode_batch(batch, [len(episode) for episode in advantages])  # one tensor per episode, in order
    steps = sum(length for _, length in finished)
    return Rollout(
        batch, None, np.stack(observations), finished, zero_variance, filled.groups_sampled,
        filled.groups_dropped, steps, filled.rounds, len(filled.fillers),
    )  # fmt: skip
