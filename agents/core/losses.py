"""PPO loss terms: pure functions of per-sample tensors that return a scalar to *minimise*.

The three policy surrogates are siblings with identical inputs (``SurrogateInputs``), so any
objective runs on any environment. Every tensor has the same shape (``(N,)`` for transitions,
``(B, T)`` for sequences) and ``mask`` selects the entries that count.
"""

from __future__ import annotations

from typing import NamedTuple

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


def clip_surrogate(x: SurrogateInputs, clip_coef: float | torch.Tensor) -> torch.Tensor:
    """PPO-Clip (Schulman et al. 2017, eq. 7), negated: ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]``,
    ``r = exp(logp - old_logp)``.
    """
    ratio = torch.exp(x.logp - x.old_logp)
    unclipped = ratio * x.advantages
    clipped = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * x.advantages
    return -masked_mean(torch.minimum(unclipped, clipped), x.mask)


def kl_penalty_surrogate(x: SurrogateInputs, beta: float | torch.Tensor) -> torch.Tensor:
    """PPO-Penalty (Schulman et al. 2017, eq. 8), negated: ``-E[r A - beta KL(pi_old || pi)]``."""
    ratio = torch.exp(x.logp - x.old_logp)
    return -masked_mean(ratio * x.advantages - beta * x.kl, x.mask)


def unclipped_surrogate(x: SurrogateInputs) -> torch.Tensor:
    """The paper's "no clipping or penalty" ablation (eq. 6), negated: ``-E[r A]``."""
    ratio = torch.exp(x.logp - x.old_logp)
    return -masked_mean(ratio * x.advantages, x.mask)


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
