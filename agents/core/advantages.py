"""Generalised advantage estimation, REINFORCE++'s discounted returns and advantage whitening: pure functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch


class AdvantageEstimate(NamedTuple):
    """GAE output, both ``(T, B)``, zero where ``mask`` is 0."""

    advantages: torch.Tensor
    returns: torch.Tensor


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> AdvantageEstimate:
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16) over ``(T, B)`` tensors.

    ``delta_t = r_t + gamma * (1 - terminated_t) * V'_t - V(s_t)``
    ``A_t = mask_t * (delta_t + gamma * lam * (1 - done_t) * A_{t+1})``,  ``done_t = terminated_t or truncated_t``
    ``R_t = A_t + V(s_t)`` (the value target).

    ``V'_t = next_values[t]`` is the value of the observation that followed step ``t``; for a
    truncated step it must be V(final observation) so the time limit is bootstrapped, not
    treated as death. Steps with ``mask == 0`` (padding after a text episode ended) get
    ``A = R = 0`` and never leak into valid steps. The estimate after the last row
    bootstraps through ``next_values[T-1]``.

    Shapes: every input ``(T, B)``; ``terminated``, ``truncated`` and ``mask`` may be bool or float.
    """
    terminated = terminated.to(values.dtype)
    not_done = 1.0 - torch.maximum(terminated, truncated.to(values.dtype))
    mask = mask.to(values.dtype)
    deltas = (rewards + gamma * (1.0 - terminated) * next_values - values) * mask
    # The backward recursion runs over numpy rows: a per-row torch op costs ~4 us of dispatch, T=2048 rows add up.
    deltas_np = deltas.detach().cpu().double().numpy()
    decay_np = (gamma * lam * not_done * mask).detach().cpu().double().numpy()
    advantages_np = np.zeros_like(deltas_np)
    following = np.zeros(deltas_np.shape[1:])
    for t in range(deltas_np.shape[0] - 1, -1, -1):
        following = deltas_np[t] + decay_np[t] * following
        advantages_np[t] = following
    advantages = torch.from_numpy(advantages_np).to(device=values.device, dtype=values.dtype)
    return AdvantageEstimate(advantages, (advantages + values) * mask)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum(x * mask) / max(sum(mask), 1)``: the mean over valid entries; any shape."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def whiten(
    x: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-8,
    sum_over_processes: Callable[[torch.Tensor], torch.Tensor] = lambda total: total,
) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over the valid entries (unbiased std); masked entries become 0.

    Any shape.
    ``sum_over_processes`` turns each local sum into the sum over every process (e.g. ``all_reduce_sum``), so
    mean and std are those of every process's entries together; by default they are this tensor's own.
    """
    mask_f = mask.to(x.dtype)
    count = sum_over_processes(mask_f.sum())
    mean = sum_over_processes((x * mask_f).sum()) / count.clamp(min=1.0)
    variance = sum_over_processes((((x - mean) * mask_f) ** 2).sum()) / (count - 1.0).clamp(min=1.0)
    return (x - mean) / (variance.sqrt() + eps) * mask_f


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per-token returns ``G_t = r_t + gamma G_{t+1}`` along each row of ``(B, T)`` ``rewards`` whose valid entries
    (``mask``) are a prefix; padding gets 0 and ends each row's sum."""
    mask_f = mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    following = torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        following = (rewards[:, t] + gamma * following) * mask_f[:, t]
        returns[:, t] = following
    return returns


def reinforce_pp_advantages(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    sum_over_processes: Callable[[torch.Tensor], torch.Tensor] = lambda total: total,
) -> torch.Tensor:
    """REINFORCE++ (Hu et al. 2025, arXiv 2501.03262): no critic; the advantage of token t is its discounted return
    ``G_t = sum_{s >= t} gamma^(s-t) r_s`` (per-token rewards, the k1 reference KL among them), whitened over the
    global batch: ``(G - mean) / (std + 1e-8)`` over every valid token of every process (``sum_over_processes``).
    The baseline variant centres each group's outcome rewards before the returns are taken (the caller's part).

    Shapes: ``rewards``, ``mask`` ``(B, T)``, valid entries a prefix of each row; returns ``(B, T)``, padding 0.
    """
    return whiten(discounted_returns(rewards, mask, gamma), mask, sum_over_processes=sum_over_processes)
