"""PPO loss terms: pure functions of per-sample tensors that return a scalar to *minimise*.

The three policy surrogates are siblings with identical inputs (``SurrogateInputs``), so any
objective runs on any environment. Every tensor has the same shape (``(N,)`` for transitions,
``(B, T)`` for sequences) and ``mask`` selects the entries that count.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from agents.core.advantages import masked_mean


class SurrogateInputs(NamedTuple):
    """What every policy surrogate sees, per sample."""

    logp: torch.Tensor
    """log pi(a|s) under the parameters being trained."""
    old_logp: torch.Tensor
    """log pi_old(a|s), recorded when the rollout was collected."""
    advantages: torch.Tensor
    """Advantage estimates A (already normalised if the config asks for it)."""
    kl: torch.Tensor
    """Per-sample KL(pi_old(.|s) || pi(.|s)), exact where the policy can give it."""
    mask: torch.Tensor
    """1 for valid samples, 0 for padding."""


LossAggregation = Literal["token-mean", "sequence-mean", "constant-length"]
"""How a per-token loss becomes one number: see ``aggregate``."""


def aggregate(values: torch.Tensor, mask: torch.Tensor, how: LossAggregation = "token-mean") -> torch.Tensor:
    """Average per-token ``values`` ``(B, T)`` (or per-transition ``(N,)``, read as ``(N, 1)``) over the valid ones:

    - ``token-mean``: ``sum(m v) / sum(m)``, every valid token of the minibatch weighs the same (DAPO);
    - ``sequence-mean``: ``mean_b [sum_t m v / sum_t m]`` over sequences with a valid token (GRPO);
    - ``constant-length``: ``sum(m v) / (B T)``, T the padded length (the token limit; Dr. GRPO).

    For transitions (one token per item, all valid) the three are the same mean.
    """
    if how == "token-mean":
        return masked_mean(values, mask)
    grid = values if values.dim() > 1 else values.unsqueeze(-1)
    mask_f = (mask if mask.dim() > 1 else mask.unsqueeze(-1)).to(grid.dtype)
    if how == "sequence-mean":
        lengths = mask_f.sum(-1)
        per_sequence = (grid * mask_f).sum(-1) / lengths.clamp(min=1.0)
        return masked_mean(per_sequence, (lengths > 0).to(grid.dtype))
    if how == "constant-length":
        return (grid * mask_f).sum() / grid.numel()
    raise ValueError(f"unknown loss aggregation {how!r}; use token-mean, sequence-mean or constant-length")


def clip_surrogate(
    x: SurrogateInputs,
    clip_coef: float | torch.Tensor,
    clip_coef_high: float | torch.Tensor | None = None,
    how: LossAggregation = "token-mean",
) -> torch.Tensor:
    """PPO-Clip (Schulman et al. 2017, eq. 7), negated: ``-E[min(r A, clip(r, 1-eps_low, 1+eps_high) A)]``,
    ``r = exp(logp - old_logp)``; ``eps_high = clip_coef_high`` (DAPO's clip-higher, Yu et al. 2025) or
    ``eps_low = clip_coef`` when None. ``E`` is ``aggregate(., mask, how)``.
    """
    ratio = torch.exp(x.logp - x.old_logp)
    unclipped = ratio * x.advantages
    high = clip_coef if clip_coef_high is None else clip_coef_high
    clipped = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + high) * x.advantages
    return -aggregate(torch.minimum(unclipped, clipped), x.mask, how)


def kl_penalty_surrogate(
    x: SurrogateInputs, beta: float | torch.Tensor, how: LossAggregation = "token-mean"
) -> torch.Tensor:
    """PPO-Penalty (Schulman et al. 2017, eq. 8), negated: ``-E[r A - beta KL(pi_old || pi)]``."""
    ratio = torch.exp(x.logp - x.old_logp)
    return -aggregate(ratio * x.advantages - beta * x.kl, x.mask, how)


def unclipped_surrogate(x: SurrogateInputs, how: LossAggregation = "token-mean") -> torch.Tensor:
    """The paper's "no clipping or penalty" ablation (eq. 6), negated: ``-E[r A]``."""
    ratio = torch.exp(x.logp - x.old_logp)
    return -aggregate(ratio * x.advantages, x.mask, how)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_coef: float | None,
) -> torch.Tensor:
    """``0.5 E[(V - R)^2]``; with ``clip_coef`` the pessimistic clipped form of openai/baselines ppo2:
    ``0.5 E[max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)]``."""
    squared_error = (values - returns) ** 2
    if clip_coef is not None:
        clipped_values = old_values + torch.clamp(values - old_values, -clip_coef, clip_coef)
        squared_error = torch.maximum(squared_error, (clipped_values - returns) ** 2)
    return 0.5 * masked_mean(squared_error, mask)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``E[H(pi(.|s))]``: subtracted from the loss times ``ent_coef``."""
    return masked_mean(entropy, mask)


def clip_fraction(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, clip_coef: float) -> torch.Tensor:
    """Fraction of valid samples whose ratio left ``[1 - eps, 1 + eps]`` (a diagnostic for every objective)."""
    ratio = torch.exp(logp - old_logp)
    return masked_mean(((ratio - 1.0).abs() > clip_coef).to(logp.dtype), mask)
