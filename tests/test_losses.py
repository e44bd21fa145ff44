"""The surrogates, the value loss and the clip fraction: values and gradients by hand."""

import pytest
import torch

from agents.core.losses import (
    SurrogateInputs,
    aggregate,
    clip_fraction,
    clip_surrogate,
    entropy_bonus,
    kl_penalty_surrogate,
    unclipped_surrogate,
    value_loss,
)


def inputs(log_ratio, advantages, kl=None):
    log_ratio = torch.tensor(log_ratio, dtype=torch.float64, requires_grad=True)
    advantages = torch.tensor(advantages, dtype=torch.float64)
    kl = torch.zeros_like(advantages) if kl is None else torch.tensor(kl, dtype=torch.float64)
    return log_ratio, SurrogateInputs(
        log_ratio, torch.zeros_like(advantages), advantages, kl, torch.ones_like(advantages)
    )


def test_clip_at_ratio_one_is_minus_mean_advantage():
    _, x = inputs([0.0, 0.0, 0.0], [1.0, -2.0, 4.0])
    assert clip_surrogate(x, 0.2).item() == pytest.approx(-1.0)


def test_clip_zero_gradient_beyond_the_trust_region_on_the_improving_side():
    import math

    logp, x = inputs([math.log(1.5), math.log(0.5)], [1.0, -1.0])  # A>0 above 1+eps, A<0 below 1-eps
    clip_surrogate(x, 0.2).backward()
    assert logp.grad.tolist() == [0.0, 0.0]


def test_clip_keeps_full_gradient_on_the_wrong_side():
    import math

    # A>0 with ratio below 1-eps, A<0 with ratio above 1+eps: the min picks the unclipped term
    logp, x = inputs([math.log(0.5), math.log(1.5)], [1.0, -1.0])
    loss = clip_surrogate(x, 0.2)
    loss.backward()
    # d/dlogp of -mean(r*A) = -r*A/N
    assert logp.grad.tolist() == pytest.approx([-0.5 * 1.0 / 2, 1.5 * 1.0 / 2])
    assert loss.item() == pytest.approx(-(0.5 * 1.0 + 1.5 * -1.0) / 2)


def test_clip_value_beyond_range_is_the_clipped_term():
    import math

    _, x = inputs([math.log(2.0)], [3.0])
    assert clip_surrogate(x, 0.2).item() == pytest.approx(-1.2 * 3.0)


def test_penalty_with_zero_beta_equals_the_plain_surrogate():
    _, x = inputs([0.3, -0.2, 0.1], [1.0, 2.0, -1.0], kl=[0.5, 0.1, 0.9])
    assert kl_penalty_surrogate(x, 0.0).item() == pytest.approx(unclipped_surrogate(x).item())


def test_penalty_adds_beta_times_mean_kl():
    _, x = inputs([0.0, 0.0], [1.0, 3.0], kl=[0.5, 0.1])
    assert kl_penalty_surrogate(x, 2.0).item() == pytest.approx(-2.0 + 2.0 * 0.3)


def test_unclipped_surrogate_value():
    import math

    _, x = inputs([math.log(2.0), 0.0], [1.0, 1.0])
    assert unclipped_surrogate(x).item() == pytest.approx(-1.5)


def test_value_loss_plain_and_clipped():
    values = torch.tensor([2.0, 0.0])
    old = torch.tensor([0.0, 0.0])
    returns = torch.tensor([1.0, 1.0])
    mask = torch.ones(2)
    assert value_loss(values, old, returns, mask, None).item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    # clipped: V=2 clipped to 0.5 -> (0.5-1)^2=0.25 < (2-1)^2=1: max keeps 1; V=0: both 1
    assert value_loss(values, old, returns, mask, 0.5).item() == pytest.approx(0.5)
    # clipping can only raise the loss: V=0.2 from old 0 towards R=1 clipped to 0.1 -> 0.81 > 0.64
    assert value_loss(
        torch.tensor([0.2]), torch.tensor([0.0]), torch.tensor([1.0]), torch.ones(1), 0.1
    ).item() == pytest.approx(0.5 * 0.81)


def test_losses_ignore_masked_samples():
    logp = torch.zeros(3)
    x = SurrogateInputs(logp, logp, torch.tensor([1.0, 1.0, 1e6]), torch.zeros(3), torch.tensor([1.0, 1.0, 0.0]))
    assert clip_surrogate(x, 0.2).item() == pytest.approx(-1.0)
    assert entropy_bonus(torch.tensor([1.0, 3.0, 1e6]), x.mask).item() == pytest.approx(2.0)


def test_clip_fraction_counts_ratios_outside_the_range():
    import math

    logp = torch.tensor([0.0, math.log(1.3), math.log(0.7), math.log(1.1), math.log(5.0)])
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    assert clip_fraction(logp, torch.zeros(5), mask, 0.2).item() == pytest.approx(0.5)


VALUES = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # lengths 3, 2, 0


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 10 + 20) / 5),  # 7.2: every valid token weighs the same
        ("sequence-mean", (2.0 + 15.0) / 2),  # 8.5: each sequence's mean, the empty one left out
        ("constant-length", (1 + 2 + 3 + 10 + 20) / (3 * 4)),  # 3.0: the sum over 3 sequences x token limit 4
    ],
)
def test_each_loss_aggregation_against_hand_computed_values(how, expected):
    assert aggregate(VALUES, MASK, how).item() == pytest.approx(expected)


def test_the_aggregations_agree_on_transitions():
    values = torch.tensor([1.0, 2.0, 6.0])
    means = {
        how: aggregate(values, torch.ones(3), how).item() for how in ("token-mean", "sequence-mean", "constant-length")
    }
    assert means == {"token-mean": 3.0, "sequence-mean": 3.0, "constant-length": 3.0}


def test_an_unknown_aggregation_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown loss aggregation 'mean'"):
        aggregate(VALUES, MASK, "mean")


def test_clip_higher_zero_gradient_exactly_outside_the_asymmetric_range():
    import math

    # DAPO: eps_low 0.2, eps_high 0.28. A > 0: gradient up to 1.28, none beyond; A < 0: none below 0.8.
    ratios = [1.25, 1.29, 0.85, 0.79]
    logp, x = inputs([math.log(r) for r in ratios], [1.0, 1.0, -1.0, -1.0])
    clip_surrogate(x, 0.2, clip_coef_high=0.28).backward()
    grads = logp.grad.tolist()
    assert grads[0] == pytest.approx(-1.25 / 4) and grads[1] == 0.0  # d(-r A / 4) / d log r = -r A / 4
    assert grads[2] == pytest.approx(0.85 / 4) and grads[3] == 0.0
    logp, x = inputs([math.log(1.25)], [1.0])
    clip_surrogate(x, 0.2).backward()
    assert logp.grad.item() == 0.0  # the symmetric 0.2 range already clips 1.25
