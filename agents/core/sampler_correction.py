"""Importance-sampling correction between the sampler and the trainer: the tokens were drawn from the sampler's
distribution mu (its log-probs kept from the moment of sampling), the update's ratios start from the trainer's
recomputed pi_old; where the two differ (another precision, other kernels, a faster sampling engine) each token's
advantage is weighted by a truncated or masked ``pi_old / mu``. Pure functions."""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from agents.core.advantages import masked_mean

SamplerCorrection = Literal["none", "truncate", "mask"]
"""``none``: no weight (the gap is still logged); ``truncate``: ``min(rho, cap)`` (TIS); ``mask``: ``rho`` where
``rho <= cap``, else 0 (the token or sequence leaves the loss; MIS)."""
SamplerCorrectionLevel = Literal["token", "sequence"]
"""``token``: one ratio per token; ``sequence``: the product of the sequence's token ratios, for all its tokens."""


class SamplerWeights(NamedTuple):
    """The correction's weights and what to log about the gap."""

    weights: torch.Tensor
    """``(B, T)``: the factor each token's advantage is multiplied by; 1 everywhere with ``none``, 0 off the mask."""
    gap_mean: float
    """Mean of ``|log pi_old - log mu|`` over the valid tokens: 0 when sampler and trainer compute alike."""
    gap_max: float
    """Largest ``|log pi_old - log mu|`` of a valid token."""
    corrected_fraction: float
    """Share of the valid tokens whose ratio was above the cap (truncated, or masked out); 0 with ``none``."""


def sampler_weights(
    old_logp: torch.Tensor,
    sampled_logp: torch.Tensor,
    mask: torch.Tensor,
    correction: SamplerCorrection,
    level: SamplerCorrectionLevel,
    cap: float,
) -> SamplerWeights:
    """``rho_t = exp(log pi_old(y_t) - log mu(y_t))`` per token, or ``rho = exp(sum_t (log pi_old - log mu))`` per
    sequence (broadcast over its tokens); then truncated, ``w = min(rho, cap)`` (Yao et al. 2025, "Your efficient RL
    framework secretly brings you off-policy RL training", TIS), or masked, ``w = rho * 1[rho <= cap]`` (verl's
    ``rollout_is`` "mask" mode); ``none`` gives ``w = 1``. The weights are data (no gradient). With ``mu == pi_old``
    exactly every ``rho`` is 1 and so is every weight: the correction is then the identity.

    Shapes: ``old_logp``, ``sampled_logp``, ``mask`` ``(B, T)``; returns ``(B, T)`` weights, 0 off the mask.
    """
    valid = mask.bool()
    log_ratio = torch.where(valid, old_logp - sampled_logp, torch.zeros_like(old_logp)).detach()
    gap = log_ratio.abs()
    gap_mean, gap_max = float(masked_mean(gap, valid)), float(gap.max()) if gap.numel() else 0.0
    if correction == "none":
        return SamplerWeights(valid.to(old_logp.dtype), gap_mean, gap_max, 0.0)
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)
    rho = torch.exp(log_ratio)
    above = (rho > cap) & valid
    weights = rho.clamp(max=cap) if correction == "truncate" else torch.where(above, torch.zeros_like(rho), rho)
    return SamplerWeights(weights * valid.to(weights.dtype), gap_mean, gap_max, float(masked_mean(above, valid)))
