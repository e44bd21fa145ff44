"""GaussianActorCritic: initialisation, the observation normaliser, the numpy actor, evaluation."""

import math

import numpy as np
import pytest
import torch

from agents.walkers.gaussian import GaussianActorCritic, diagonal_gaussian_log_prob


def test_initialisation_follows_the_implementation_details():
    torch.manual_seed(0)
    policy = GaussianActorCritic(11, 3)
    hidden = policy.actor_mean[0].weight
    # orthogonal with gain sqrt(2): W W^T = 2 I (rows <= columns is false here: 64x11, so W^T W = 2 I)
    torch.testing.assert_close(hidden.T @ hidden, 2.0 * torch.eye(11), atol=1e-5, rtol=0)
    out = policy.actor_mean[-1].weight  # 3x64 with gain 0.01: W W^T = 1e-4 I
    torch.testing.assert_close(out @ out.T, 1e-4 * torch.eye(3), atol=1e-8, rtol=0)
    value_out = policy.critic[-1].weight  # 1x64 with gain 1
    assert value_out.norm().item() == pytest.approx(1.0, abs=1e-5)
    assert all(layer.bias.abs().max().item() == 0 for layer in policy.actor_mean if hasattr(layer, "bias"))
    assert policy.actor_log_std.tolist() == [0.0, 0.0, 0.0]


def test_normalizer_matches_numpy_statistics_over_batches():
    policy = GaussianActorCritic(3, 1)
    rng = np.random.default_rng(0)
    batches = [rng.normal(5.0, 3.0, size=(n, 3)) for n in (10, 37, 200)]
    for batch in batches:
        policy.update_normalizer(batch)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(policy.obs_mean.numpy(), everything.mean(0), rtol=1e-10)
    np.testing.assert_allclose(policy.obs_var.numpy(), everything.var(0), rtol=1e-10)
    assert policy.obs_count.item() == len(everything)
    normalised = policy.normalize(torch.tensor(everything, dtype=torch.float32))
    np.testing.assert_allclose(normalised.mean(0).numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(normalised.std(0, unbiased=False).numpy(), 1.0, atol=1e-4)


def test_normalizer_clips_to_ten():
    policy = GaussianActorCritic(1, 1)
    policy.update_normalizer(np.array([[0.0], [1.0]]))
    assert policy.normalize(torch.tensor([[1e6], [-1e6]])).flatten().tolist() == [10.0, -10.0]


def test_numpy_actor_matches_the_torch_actor():
    torch.manual_seed(0)
    policy = GaussianActorCritic(5, 2, initial_log_std=-0.5)
    torch.nn.init.normal_(policy.actor_mean[-1].weight)  # make the mean non-trivial
    policy.update_normalizer(np.random.default_rng(1).normal(2.0, 4.0, size=(100, 5)))
    obs = np.random.default_rng(2).normal(2.0, 4.0, size=(7, 5)).astype(np.float32)
    actor = policy.numpy_actor()
    np.testing.assert_allclose(actor.mean(obs), policy.action_mean(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-6)
    samples = actor.sample(np.repeat(obs[:1], 20000, axis=0), np.random.default_rng(3))
    np.testing.assert_allclose(samples.std(0), math.exp(-0.5), rtol=0.03)
    assert samples.dtype == np.float32


def test_forward_evaluates_log_prob_entropy_value_and_kl():
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    obs, actions = torch.randn(8, 4), torch.randn(8, 2)
    record = policy.rollout_record(obs, actions)
    evaluation = policy(
        {"obs": obs, "actions": actions, "old_mean": record["old_mean"], "old_log_std": record["old_log_std"]}
    )
    torch.testing.assert_close(evaluation.logp, record["old_logp"])
    torch.testing.assert_close(evaluation.value, record["values"])
    assert evaluation.kl.abs().max().item() < 1e-6
    expected_entropy = torch.distributions.Normal(torch.zeros(2), torch.ones(2)).entropy().sum()
    torch.testing.assert_close(evaluation.entropy, expected_entropy.expand(8))
    torch.testing.assert_close(
        evaluation.logp, diagonal_gaussian_log_prob(actions, record["old_mean"], torch.zeros(8, 2))
    )
