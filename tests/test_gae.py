"""compute_gae and whiten against hand-computed values."""

import pytest
import torch

from agents.core.advantages import compute_gae, masked_mean, whiten


def column(*values):
    return torch.tensor(values, dtype=torch.float64).unsqueeze(1)


def zeros(t):
    return torch.zeros(t, 1, dtype=torch.float64)


def ones(t):
    return torch.ones(t, 1, dtype=torch.float64)


def test_constant_values_zero_rewards_gives_discount_shortfall():
    # V = 1 everywhere, r = 0, no ends: delta = gamma*1 - 1 = -0.1 each step; A_t = sum_k (gamma*lam)^k * -0.1
    gamma, lam = 0.9, 0.5
    out = compute_gae(zeros(3), ones(3), ones(3), zeros(3), zeros(3), ones(3), gamma, lam)
    d = gamma - 1.0
    expected = [d + gamma * lam * (d + gamma * lam * d), d + gamma * lam * d, d]
    assert out.advantages.squeeze(1).tolist() == pytest.approx(expected)
    assert out.returns.squeeze(1).tolist() == pytest.approx([1.0 + e for e in expected])


def test_single_terminal_reward():
    # reward 1 at the last step, which terminates; V = 0: A_t = (gamma*lam)^(T-1-t)
    gamma, lam = 0.99, 0.95
    rewards = column(0.0, 0.0, 1.0)
    terminated = column(0.0, 0.0, 1.0)
    out = compute_gae(rewards, zeros(3), column(0.0, 0.0, 123.0), terminated, zeros(3), ones(3), gamma, lam)
    assert out.advantages.squeeze(1).tolist() == pytest.approx([(gamma * lam) ** 2, gamma * lam, 1.0])


def test_lambda_one_gives_monte_carlo_returns():
    gamma = 0.9
    rewards = column(1.0, 2.0, 3.0, 4.0)
    values = column(0.5, -1.0, 2.0, 0.3)
    terminated = column(0.0, 0.0, 0.0, 1.0)
    out = compute_gae(rewards, values, torch.cat([values[1:], zeros(1)]), terminated, zeros(4), ones(4), gamma, 1.0)
    mc = [1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 4, 2 + 0.9 * 3 + 0.81 * 4, 3 + 0.9 * 4, 4.0]
    assert out.returns.squeeze(1).tolist() == pytest.approx(mc)


def test_lambda_zero_gives_one_step_td():
    gamma = 0.9
    rewards = column(1.0, 2.0, 3.0)
    values = column(0.5, -1.0, 2.0)
    next_values = column(-1.0, 2.0, 7.0)
    out = compute_gae(rewards, values, next_values, zeros(3), zeros(3), ones(3), gamma, 0.0)
    td = [1 + 0.9 * -1.0 - 0.5, 2 + 0.9 * 2.0 + 1.0, 3 + 0.9 * 7.0 - 2.0]
    assert out.advantages.squeeze(1).tolist() == pytest.approx(td)


def test_truncation_and_termination_differ_exactly_by_the_bootstrap():
    gamma, lam = 0.99, 0.95
    rewards = column(1.0, 1.0)
    values = column(0.2, 0.4)
    next_values = column(0.4, 5.0)  # V(final observation) = 5 at the end of episode
    end = column(0.0, 1.0)
    truncated = compute_gae(rewards, values, next_values, zeros(2), end, ones(2), gamma, lam)
    terminated = compute_gae(rewards, values, next_values, end, zeros(2), ones(2), gamma, lam)
    difference = truncated.advantages - terminated.advantages
    assert difference.squeeze(1).tolist() == pytest.approx([gamma * lam * gamma * 5.0, gamma * 5.0])


def test_episode_end_cuts_the_recursion_between_episodes():
    # step 0 truncates; step 1 starts a new episode with a huge advantage that must not leak back
    rewards = column(0.0, 100.0)
    out = compute_gae(rewards, zeros(2), zeros(2), zeros(2), column(1.0, 0.0), ones(2), 0.99, 0.95)
    assert out.advantages[0, 0].item() == 0.0
    assert out.advantages[1, 0].item() == pytest.approx(100.0)


def test_masked_steps_are_zero_and_do_not_leak():
    rewards = column(1.0, 50.0, 50.0)
    mask = column(1.0, 0.0, 0.0)
    out = compute_gae(rewards, zeros(3), zeros(3), zeros(3), zeros(3), mask, 1.0, 1.0)
    assert out.advantages.squeeze(1).tolist() == [1.0, 0.0, 0.0]
    assert out.returns.squeeze(1).tolist() == [1.0, 0.0, 0.0]


def test_batch_columns_are_independent():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    values = torch.zeros(2, 2, dtype=torch.float64)
    out = compute_gae(rewards, values, values, torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2), 0.5, 1.0)
    assert out.advantages.flatten().tolist() == pytest.approx([1.0, 1.0, 0.0, 2.0])


def test_whiten_has_zero_mean_unit_std_over_valid_entries():
    x = torch.tensor([1.0, 2.0, 3.0, 1000.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    out = whiten(x, mask)
    assert out[:3].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-6)
    assert out[3].item() == 0.0


def test_masked_mean_ignores_padding():
    assert masked_mean(torch.tensor([2.0, 4.0, 100.0]), torch.tensor([1, 1, 0])).item() == 3.0
