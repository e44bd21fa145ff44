"""Collecting MuJoCo experience: bootstrapping at time limits, reward scaling, episode bookkeeping, env snapshots."""

import os

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch

from agents.core.advantages import compute_gae
from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.rollout import EpisodeTracker, RewardScaler, RunningMeanStd, collect_mujoco
from envs.mujoco import (
    UnsupportedEnvironmentError,
    check_env_id,
    make_vector_env,
    restore_vector_env,
    snapshot_vector_env,
)


def test_running_mean_std_merges_batches_exactly():
    stats = RunningMeanStd()
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=n) * 3 + 1 for n in (5, 50, 500)]
    for part in parts:
        stats.update(part)
    everything = np.concatenate(parts)
    assert stats.mean == pytest.approx(everything.mean())
    assert stats.var == pytest.approx(everything.var())


def test_reward_scaler_divides_by_discounted_return_std():
    scaler = RewardScaler(gamma=0.5, num_envs=1)
    rewards = np.array([[1.0], [1.0], [1.0], [1.0]])
    dones = np.array([[False], [True], [False], [False]])
    scaled = scaler.scale(rewards, dones)
    returns = np.array([1.0, 1.5, 1.0, 1.5])  # G reset after the done at step 1
    assert scaled.flatten() == pytest.approx(rewards.flatten() / np.sqrt(returns.var() + 1e-8))
    assert scaler.discounted_return.tolist() == [1.5]


def test_reward_scaler_clips_and_can_be_disabled():
    scaler = RewardScaler(gamma=0.0, num_envs=1)
    scaler.return_stats = RunningMeanStd(0.0, 1e-6, 1e9)  # tiny std: scaled rewards explode
    assert abs(scaler.scale(np.array([[5.0]]), np.array([[False]]))[0, 0]) == 10.0
    off = RewardScaler(gamma=0.9, num_envs=1, enabled=False)
    assert off.scale(np.array([[5.0]]), np.array([[False]]))[0, 0] == 5.0


def test_episode_tracker_splits_episodes_across_blocks():
    tracker = EpisodeTracker(num_envs=2)
    rewards = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    dones = np.array([[False, True], [True, False], [False, False]])
    assert tracker.record(rewards, dones) == [(10.0, 1), (3.0, 2)]
    assert tracker.record(np.array([[4.0, 1.0]]), np.array([[True, True]])) == [(7.0, 2), (51.0, 3)]


def test_truncated_steps_bootstrap_from_the_final_observation():
    envs = make_vector_env("InvertedPendulum-v5", 1)
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 1)
    torch.nn.init.constant_(policy.critic[-1].bias, 7.0)  # V = 7 + small terms everywhere
    obs, _ = envs.reset(seed=0)
    # put the time limit one step from its end so the first step is truncated (unless the pole falls)
    time_limit = envs.envs[0]
    while not hasattr(time_limit, "_max_episode_steps"):
        time_limit = time_limit.env
    time_limit._elapsed_steps = time_limit._max_episode_steps - 1
    rollout = collect_mujoco(
        envs,
        policy,
        obs,
        2,
        RewardScaler(0.99, 1, enabled=False),
        EpisodeTracker(1),
        np.random.default_rng(0),
        0.99,
        0.0,
    )
    batch = rollout.batch
    # lambda = 0: A_0 = r_0 + gamma * V(final obs) - V(s_0), with V(final obs) ~ 7 (not 0, not the reset obs's value)
    final_value = batch.returns[0].item() - 1.0
    assert final_value / 0.99 == pytest.approx(7.0, abs=0.5)
    assert rollout.finished_episodes and rollout.finished_episodes[0][1] == 1


def rollout_with_a_truncation(policy, steps=6):
    """A rollout of 2 InvertedPendulum envs whose env 0 reaches its time limit at step 1 (unless the pole falls)."""
    envs = make_vector_env("InvertedPendulum-v5", 2)
    obs, _ = envs.reset(seed=0)
    time_limit = envs.envs[0]
    while not hasattr(time_limit, "_max_episode_steps"):
        time_limit = time_limit.env
    time_limit._elapsed_steps = time_limit._max_episode_steps - 2
    scaler, tracker = RewardScaler(0.99, 2, enabled=False), EpisodeTracker(2)
    return collect_mujoco(envs, policy, obs, steps, scaler, tracker, np.random.default_rng(0), 0.99, 0.9)


def test_refreshed_batch_with_the_same_critic_is_the_rollouts_own():
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 1)
    rollout = rollout_with_a_truncation(policy)
    assert rollout.targets.truncated[1, 0] == 1.0 and len(rollout.targets.final_obs) == 1
    refreshed = rollout.targets.refreshed(policy, rollout.batch)
    for name in ("advantages", "returns", "old_values"):
        torch.testing.assert_close(getattr(refreshed, name), getattr(rollout.batch, name), rtol=0, atol=1e-6)
    assert refreshed.old_logp is rollout.batch.old_logp and refreshed.inputs is rollout.batch.inputs


def test_refreshed_batch_takes_the_new_critics_values_and_bootstraps():
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 1)
    rollout = rollout_with_a_truncation(policy)
    targets = rollout.targets
    with torch.no_grad():
        policy.critic[-1].bias.add_(5.0)  # every value 5 higher: a new critic
    refreshed = targets.refreshed(policy, rollout.batch)
    values = policy.value(rollout.batch.inputs["obs"]).reshape(6, 2)
    # next values by hand: the next row; after the last step V(next obs); after the truncation V(final obs)
    next_values = torch.cat([values[1:], policy.value(targets.next_obs)[None]])
    next_values[1, 0] = policy.value(targets.final_obs)[0]
    advantages, returns = compute_gae(
        targets.rewards, values, next_values, targets.terminated, targets.truncated, torch.ones(6, 2), 0.99, 0.9
    )
    torch.testing.assert_close(refreshed.old_values, values.reshape(-1))
    torch.testing.assert_close(refreshed.advantages, advantages.reshape(-1))
    torch.testing.assert_close(refreshed.returns, returns.reshape(-1))
    assert not torch.allclose(refreshed.returns, rollout.batch.returns)


def test_rollout_shapes_and_unclipped_actions():
    envs = make_vector_env("Hopper-v5", 2)
    torch.manual_seed(0)
    policy = GaussianActorCritic(11, 3, initial_log_std=1.0)  # std e: many actions outside [-1, 1]
    obs, _ = envs.reset(seed=0)
    rollout = collect_mujoco(
        envs, policy, obs, 16, RewardScaler(0.99, 2), EpisodeTracker(2), np.random.default_rng(0), 0.99, 0.95
    )
    assert rollout.batch.size == 32
    assert rollout.batch.inputs["actions"].abs().max().item() > 1.0
    assert rollout.observations.shape == (32, 11)
    assert rollout.next_obs.shape == (2, 11)


def test_env_id_errors_are_one_line_and_name_the_problem():
    with pytest.raises(UnsupportedEnvironmentError, match="unknown environment id 'Hoppper-v5'"):
        check_env_id("Hoppper-v5")
    with pytest.raises(UnsupportedEnvironmentError, match="not a MuJoCo environment"):
        check_env_id("CartPole-v1")
    with pytest.raises(UnsupportedEnvironmentError) as error:
        check_env_id("Nope-v0")
    assert "\n" not in str(error.value)


def test_snapshot_restore_reproduces_the_future_bit_for_bit():
    envs = make_vector_env("Hopper-v5", 2)
    envs.reset(seed=3)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(400, 2, 3)).astype(np.float32)
    for t in range(50):
        envs.step(actions[t])
    snapshot = snapshot_vector_env(envs)
    first = [envs.step(a)[:4] for a in actions[50:]]
    restore_vector_env(envs, snapshot)
    second = [envs.step(a)[:4] for a in actions[50:]]
    assert sum(int(f[2].sum() + f[3].sum()) for f in first) > 0, "the window should include resets"
    for a, b in zip(first, second):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)


def test_final_obs_vector_env_matches_gymnasium_sync_vector_env():
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    ours = make_vector_env("Hopper-v5", 3)
    theirs = SyncVectorEnv([lambda: gym.make("Hopper-v5") for _ in range(3)], autoreset_mode=AutoresetMode.SAME_STEP)
    obs_a, _ = ours.reset(seed=7)
    obs_b, _ = theirs.reset(seed=7)
    assert np.array_equal(obs_a, obs_b)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(300, 3, 3)).astype(np.float32)
    ends = 0
    for action in actions:
        a, b = ours.step(action), theirs.step(action)
        for x, y in zip(a[:4], b[:4]):
            assert np.array_equal(x, y)
        if "_final_obs" in b[4]:
            ends += int(b[4]["_final_obs"].sum())
            assert np.array_equal(a[4]["_final_obs"], b[4]["_final_obs"])
            for index in np.flatnonzero(b[4]["_final_obs"]):
                assert np.array_equal(a[4]["final_obs"][index], b[4]["final_obs"][index])
        else:
            assert a[4] == {}
    assert ends > 3


WALKERS = ["Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Ant-v5", "Humanoid-v5", "Swimmer-v5"]


def walker_pixels_after_running_forward(env, metres: float = 20.0) -> float:
    """Render the first frame, move the walker ``metres`` forward and return the fraction of the next frame's pixels
    that are its body: those that change when every geom attached to a body other than the world is made invisible."""
    env.render()  # the camera is placed when the first frame is drawn, as in a recorded episode
    inner = env.unwrapped
    inner.data.qpos[0] += metres  # qpos[0] is the root's x (slide joint or free joint) in every walker
    mujoco.mj_forward(inner.model, inner.data)
    with_walker = env.render().astype(int)
    colours = inner.model.geom_rgba.copy()
    inner.model.geom_rgba[inner.model.geom_bodyid > 0, 3] = 0.0
    without_walker = env.render().astype(int)
    inner.model.geom_rgba[:] = colours
    return float((np.abs(with_walker - without_walker).sum(-1) > 30).mean())


@pytest.mark.parametrize("env_id", WALKERS)
def test_rendering_follows_the_walker(env_id, monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # headless rendering
    envs = make_vector_env(env_id, 1, render_mode="rgb_array")
    envs.reset(seed=0)
    assert walker_pixels_after_running_forward(envs.envs[0]) > 0.005, "the walker is in the picture 20 m on"
    envs.close()
    plain = gym.make(env_id, render_mode="rgb_array")  # Gymnasium's default view stays put: the walker is gone
    plain.reset(seed=0)
    assert walker_pixels_after_running_forward(plain) == 0.0
    plain.close()


def test_prompts_in_shuffled_passes_take_each_once_per_pass_and_continue_from_a_saved_pass():
    import numpy as np

    from agents.text.rollout import PromptDraws

    draws = PromptDraws(5, np.random.default_rng(0), shuffled_passes=True)
    taken = np.concatenate([draws(3) for _ in range(5)])  # 15 = three passes of 5, cut across draws
    assert all(sorted(taken[k : k + 5].tolist()) == list(range(5)) for k in (0, 5, 10))
    draws(2)
    saved_rng = np.random.default_rng(0)
    saved_rng.bit_generator.state = draws.rng.bit_generator.state
    resumed = PromptDraws(5, saved_rng, True, list(draws.order), draws.position)
    assert draws(7).tolist() == resumed(7).tolist()
    with_replacement = PromptDraws(5, np.random.default_rng(0))
    assert with_replacement(4).tolist() == np.random.default_rng(0).integers(5, size=4).tolist()
