"""The critic-free group objectives on walkers: groups of G episodes from one initial state, each episode's return
its steps' outcome, no critic, DAPO's dynamic sampling, and GRPO learning InvertedPendulum."""

import json

import numpy as np
import pytest
import torch

from agents.core.config import ConfigError, PPOConfig
from agents.core.objectives import DAPO, GRPO, RLOO, DrGRPO, SamplingPlan
from agents.runs.checkpoint import load_checkpoint
from agents.runs.config import RunConfig
from agents.walkers.config import MujocoEnvConfig, TrainConfig, validate_config
from agents.walkers.evaluate import evaluate, load_policy
from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.rollout import collect_mujoco_groups
from agents.walkers.train import train
from envs.mujoco import make_vector_env
from tests.conftest import tiny_config

# GRPO (G = 8, seed 1) first has every episode of an iteration at 1000 at about 49k steps, PPO-Clip at about 25k
GRPO_BUDGET = 81_920


def group_starts(rollout) -> np.ndarray:
    """The first observation of every episode of a group rollout, in order."""
    starts = np.cumsum([0] + [length for _, length in rollout.finished_episodes[:-1]])
    return rollout.observations[starts]


def pendulum_groups(group_size=4, log_std=0.0):
    envs = make_vector_env("InvertedPendulum-v5", group_size)
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 1, (16,), log_std, normalize_observations=False, critic=False)
    return envs, policy, np.random.default_rng(0)


def test_a_group_starts_from_one_state_and_groups_differ():
    envs, policy, rng = pendulum_groups()
    rollout = collect_mujoco_groups(envs, policy, min_steps=1, estimator="grpo", action_rng=rng)
    first = group_starts(rollout)
    assert rollout.groups == 1 and len(first) == 4 and (first == first[0]).all(), "the G first observations are equal"
    lengths = [n for _, n in rollout.finished_episodes]
    assert len(set(lengths)) > 1, "then the sampled actions set the episodes apart"
    again = collect_mujoco_groups(envs, policy, min_steps=1, estimator="grpo", action_rng=rng)
    assert not np.array_equal(group_starts(again)[0], first[0]), "another group starts elsewhere"


@pytest.mark.parametrize("estimator", ["grpo", "dr-grpo", "rloo"])
def test_every_step_of_an_episode_gets_its_returns_advantage_within_the_group(estimator):
    envs, policy, rng = pendulum_groups()
    rollout = collect_mujoco_groups(envs, policy, min_steps=200, estimator=estimator, action_rng=rng)
    returns = np.array([r for r, _ in rollout.finished_episodes])
    lengths = [n for _, n in rollout.finished_episodes]
    assert rollout.batch.size == sum(lengths) == rollout.steps and rollout.groups == len(returns) // 4 >= 2
    per_step = torch.split(rollout.batch.advantages, lengths)
    for group in range(rollout.groups):
        r = returns[4 * group : 4 * group + 4]
        expected = {
            "grpo": (r - r.mean()) / (r.std(ddof=1) + 1e-4),
            "dr-grpo": r - r.mean(),
            "rloo": np.array([r[i] - np.delete(r, i).mean() for i in range(4)]),
        }[estimator]
        for i in range(4):
            steps = per_step[4 * group + i]
            assert torch.allclose(steps, torch.full_like(steps, float(expected[i])), atol=1e-4)
    assert torch.equal(rollout.batch.old_values, torch.zeros(rollout.batch.size)), "no critic, no values"


def test_dynamic_sampling_drops_groups_of_equal_returns_until_the_cap():
    # log std -20: the policy is deterministic, so a group's G episodes are identical and every group is flat
    envs, policy, rng = pendulum_groups(log_std=-20.0)
    plain = collect_mujoco_groups(envs, policy, min_steps=50, estimator="grpo", action_rng=rng)
    assert plain.zero_variance_groups == plain.groups and plain.groups_dropped == 0
    assert torch.equal(plain.batch.advantages, torch.zeros(plain.batch.size))
    plan = SamplingPlan(group_size=4, drop_zero_variance=True, max_sampling_rounds=4)
    dynamic = collect_mujoco_groups(envs, policy, min_steps=50, estimator="grpo", action_rng=rng, plan=plan)
    assert dynamic.sampling_rounds == 4, "it kept sampling until the cap"
    assert dynamic.groups_dropped == dynamic.groups, "every group was flat"
    assert dynamic.filler_groups >= 1 and dynamic.zero_variance_groups == dynamic.filler_groups
    assert dynamic.batch.size >= 50, "fillers top the batch up to its size"
    assert torch.equal(dynamic.batch.advantages, torch.zeros(dynamic.batch.size)), "fillers carry no gradient"


@pytest.mark.parametrize("objective", [cls(group_size=4) for cls in (GRPO, DrGRPO, RLOO, DAPO)], ids=lambda o: o.name)
def test_each_group_objective_trains_a_walker_without_a_critic(tmp_path, objective):
    run_dir = train(tiny_config(tmp_path, objective.name, objective=objective, env_id="InvertedPendulum-v5"))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["global_step"] >= 512 and all(r["value_loss"] == 0.0 for r in records)
    assert all(0.0 <= r["zero_variance_groups"] <= 1.0 and r["groups_sampled"] >= 1 for r in records)
    assert not any(name.startswith("critic.") for name in load_checkpoint(run_dir)["policy"])
    policy, _ = load_policy(run_dir)
    assert policy.critic is None


def test_group_objectives_take_no_num_envs(tmp_path):
    config = tiny_config(tmp_path, "g", objective=GRPO())
    with pytest.raises(ConfigError, match="grpo steps --group-size environments side by side"):
        validate_config(config.__class__(env=MujocoEnvConfig(num_envs=2), objective=GRPO(), run=config.run))


@pytest.mark.slow
def test_grpo_learns_inverted_pendulum(tmp_path):
    config = TrainConfig(
        env=MujocoEnvConfig(env_id="InvertedPendulum-v5"),
        objective=GRPO(),
        ppo=PPOConfig(total_steps=GRPO_BUDGET),
        run=RunConfig(runs_dir=tmp_path, run_name="pendulum", progress=False),
    )
    policy, env_id = load_policy(train(config))
    result = evaluate(policy, env_id, episodes=10, seed=100, deterministic=True)
    assert result.mean >= 900, f"mean return {result.mean:.0f} over 10 episodes"
