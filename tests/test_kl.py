"""KL estimators against the exact Gaussian KL; the adaptive rule at its thresholds."""

import pytest
import torch

from agents.core.kl import AdaptivePenalty, FixedPenalty, gaussian_kl, kl_k1, kl_k3, kl_k3_ratio
from agents.walkers.gaussian import diagonal_gaussian_log_prob


def test_gaussian_kl_hand_value_and_zero_for_equal():
    # 1-D: KL(N(0,1) || N(1,2^2)) = log 2 + (1 + 1) / 8 - 1/2
    import math

    value = gaussian_kl(
        torch.tensor([[0.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.tensor([[math.log(2.0)]])
    )
    assert value.item() == pytest.approx(math.log(2.0) + 2.0 / 8.0 - 0.5)
    mean, log_std = torch.randn(4, 3), torch.randn(4, 3)
    assert gaussian_kl(mean, log_std, mean, log_std).abs().max().item() < 1e-6


def test_estimators_agree_with_exact_kl_on_samples():
    torch.manual_seed(0)
    mean_old, log_std_old = torch.tensor([0.0, 0.5, -0.3]), torch.tensor([0.0, -0.2, 0.1])
    mean_new, log_std_new = torch.tensor([0.1, 0.4, -0.2]), torch.tensor([-0.05, -0.1, 0.1])
    exact = gaussian_kl(mean_old, log_std_old, mean_new, log_std_new).item()
    actions = mean_old + torch.exp(log_std_old) * torch.randn(200_000, 3)
    old_logp = diagonal_gaussian_log_prob(actions, mean_old, log_std_old.expand_as(actions))
    new_logp = diagonal_gaussian_log_prob(actions, mean_new, log_std_new.expand_as(actions))
    assert kl_k1(new_logp, old_logp).mean().item() == pytest.approx(exact, rel=0.05)
    assert kl_k3(new_logp, old_logp).mean().item() == pytest.approx(exact, rel=0.05)
    assert (kl_k3(new_logp, old_logp) >= 0).all()


def test_k3_ratio_is_k3_times_the_ratio_to_the_sampling_policy_and_k3_on_policy():
    import math

    # log pi_ref = -1, log pi = -2, log pi_old = -2.5: k3 = e^1 - 1 - 1 = e - 2, ratio = e^0.5
    ref, logp, old = torch.tensor([-1.0]), torch.tensor([-2.0]), torch.tensor([-2.5])
    assert kl_k3_ratio(ref, logp, old).item() == pytest.approx((math.e - 2) * math.exp(0.5), rel=1e-6)
    assert kl_k3_ratio(ref, logp, logp).item() == pytest.approx(kl_k3(ref, logp).item(), rel=1e-7)


def test_log_prob_matches_torch_distributions():
    mean, log_std, actions = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(actions).sum(-1)
    assert torch.allclose(diagonal_gaussian_log_prob(actions, mean, log_std), expected, atol=1e-5)


@pytest.mark.parametrize(
    ("kl", "expected_beta"),
    [
        (0.01 / 1.5 - 1e-6, 0.5),  # just below d_targ/1.5: halve
        (0.01 / 1.5 + 1e-6, 1.0),  # just above: keep
        (0.01, 1.0),
        (0.015 - 1e-6, 1.0),  # just below 1.5 d_targ: keep
        (0.015 + 1e-6, 2.0),  # just above: double
    ],
)
def test_adaptive_penalty_thresholds(kl, expected_beta):
    penalty = AdaptivePenalty(beta=1.0, kl_target=0.01)
    penalty.update(kl, 2048)
    assert penalty.beta == expected_beta


def test_adaptive_penalty_state_round_trip_and_non_finite_kl():
    penalty = AdaptivePenalty(beta=1.0, kl_target=0.02)
    penalty.update(1.0, 2048)
    restored = AdaptivePenalty(beta=123.0, kl_target=0.5)
    restored.load_state_dict(penalty.state_dict())
    assert (restored.beta, restored.kl_target) == (2.0, 0.02)
    with pytest.raises(ValueError, match="non-finite"):
        penalty.update(float("nan"), 2048)


def test_fixed_penalty_never_moves():
    penalty = FixedPenalty(beta=3.0)
    for kl in (0.0, 1.0, 100.0):
        penalty.update(kl, 2048)
    assert penalty.beta == 3.0


def test_proportional_kl_follows_the_ziegler_formula():
    from agents.core.kl import ProportionalKL

    controller = ProportionalKL(beta=0.2, kl_target=6.0, horizon=10_000)
    controller.update(kl=9.0, n=256)  # e = clip(9/6 - 1) = 0.2 (clipped from 0.5)
    assert controller.beta == pytest.approx(0.2 * (1 + 0.2 * 256 / 10_000))
    controller.update(kl=5.4, n=100)  # e = -0.1, inside the clip range
    assert controller.beta == pytest.approx(0.2 * (1 + 0.2 * 256 / 10_000) * (1 - 0.1 * 100 / 10_000))
    before = controller.beta
    controller.update(kl=6.0, n=1000)
    assert controller.beta == before
    restored = ProportionalKL(beta=1.0, kl_target=1.0, horizon=1)
    restored.load_state_dict(controller.state_dict())
    assert (restored.beta, restored.kl_target, restored.horizon) == (before, 6.0, 10_000)
