"""Generalised advantage estimation (single-step, over a multi-turn episode's policy tokens, and RAGEN's bi-level
form), REINFORCE++'s discounted returns and advantage whitening: pure functions."""

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
    gamma: float | torch.Tensor,
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

    Shapes: every input ``(T, B)``; ``terminated``, ``truncated`` and ``mask`` may be bool or float; ``gamma`` is
    one discount or a ``(T, B)`` tensor of per-step discounts (``gamma_t`` in place of ``gamma`` in both lines).
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


class PolicyTokens(NamedTuple):
    """Where each row's policy tokens are: ``order[b, k]`` is the position of row b's k-th policy token for
    ``k < count[b]`` (the other positions follow), so ``gather`` moves the policy tokens of ``(B, T)`` tensors to the
    front of each row in their order and ``scatter`` puts them back."""

    order: torch.Tensor
    valid: torch.Tensor
    """``(B, T)`` bool, in the compact layout: ``k < count[b]``."""
    last: torch.Tensor
    """``(B, T)`` bool, in the compact layout: ``k == count[b] - 1``, the row's last policy token."""

    @classmethod
    def of(cls, policy_mask: torch.Tensor) -> PolicyTokens:
        policy = policy_mask.bool()
        order = torch.argsort((~policy).to(torch.int8), dim=1, stable=True)  # a stable sort keeps their order
        count = policy.sum(1, keepdim=True)
        steps = torch.arange(policy.shape[1], device=policy.device).unsqueeze(0)
        return cls(order, steps < count, steps == count - 1)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` -> compact ``(B, T)``: the policy tokens' entries first, 0 after them."""
        return torch.gather(x, 1, self.order) * self.valid.to(x.dtype)

    def scatter(self, compact: torch.Tensor) -> torch.Tensor:
        """Inverse of ``gather``: compact ``(B, T)`` -> ``(B, T)``, 0 off the policy tokens."""
        return torch.zeros_like(compact).scatter(1, self.order, compact * self.valid.to(compact.dtype))


def following_entries(compact: torch.Tensor) -> torch.Tensor:
    """Each entry's successor along its row, 0 after the last: ``(B, T) -> (B, T)``, the ``V(t_{k+1})`` of GAE."""
    return torch.cat([compact[:, 1:], torch.zeros_like(compact[:, :1])], dim=1)


def policy_token_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    policy_mask: torch.Tensor,
    turn_ends: torch.Tensor,
    gamma: float,
    lam: float,
    turn_gamma: float,
) -> AdvantageEstimate:
    """GAE over each row's policy tokens only: the environment's reply tokens between two turns are not steps, so a
    turn's last token bootstraps from the first token of the next turn across the reply (the masking verl added for
    multi-turn rollouts; Wang et al. 2025, RAGEN, arXiv 2504.20073).

    With row b's policy tokens ``t_1 < ... < t_n``:
    ``delta_k = r_{t_k} + g_k V(t_{k+1}) - V(t_k)``, ``A_k = delta_k + g_k lam A_{k+1}``, ``R_k = A_k + V(t_k)``,
    ``g_k = turn_gamma`` where ``t_k`` ends a turn (``turn_ends``) and ``gamma`` inside a turn, and
    ``V(t_{n+1}) = A_{n+1} = 0``: the episode ends at its last policy token. Environment and padding positions get
    ``A = R = 0``. Without environment tokens and with ``turn_gamma == gamma`` this is ``compute_gae`` of each row.

    Shapes: every input ``(B, T)``; ``policy_mask`` and ``turn_ends`` bool or float. Returns ``(B, T)`` tensors.
    """
    tokens = PolicyTokens.of(policy_mask)
    compact_values = tokens.gather(values)
    next_values = following_entries(compact_values)
    step_gamma: float | torch.Tensor = gamma
    if turn_gamma != gamma:
        ends = tokens.gather(turn_ends.to(values.dtype)).bool()
        step_gamma = torch.where(ends, turn_gamma, gamma).to(values.dtype).T
    estimate = compute_gae(
        tokens.gather(rewards).T,
        compact_values.T,
        next_values.T,
        tokens.last.T,
        torch.zeros_like(tokens.valid).T,
        tokens.valid.T,
        step_gamma,
        lam,
    )
    return AdvantageEstimate(tokens.scatter(estimate.advantages.T), tokens.scatter(estimate.returns.T))


def bi_level_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    policy_mask: torch.Tensor,
    turn_ends: torch.Tensor,
    gamma: float,
    lam: float,
    turn_gamma: float,
) -> AdvantageEstimate:
    """Bi-level GAE (RAGEN, Wang et al. 2025, arXiv 2504.20073): GAE over the turns first, then over the tokens of
    each turn toward that turn's return.

    Turn level, over row b's turns ``k = 1..K`` whose last tokens are ``e_k`` (``turn_ends``; the row's last policy
    token always closes its last turn): ``delta_k = r_{e_k} + turn_gamma V(e_{k+1}) - V(e_k)``,
    ``A_k = delta_k + turn_gamma lam A_{k+1}``, ``V(e_{K+1}) = 0``, and the turn's return ``G_k = A_k + V(e_k)``.
    Token level, within turn k (its policy tokens ``t``, each turn an episode of its own): the reward at ``e_k``
    becomes ``G_k`` and nothing is bootstrapped past it, ``delta_t = r_t + gamma V(t+1) - V(t)`` inside the turn, so
    ``A_{e_k} = G_k - V(e_k)``, the turn-level advantage, and the turn's earlier tokens discount toward it.
    ``R_t = A_t + V(t)``. Environment and padding positions get 0.

    Shapes: every input ``(B, T)``; ``policy_mask`` and ``turn_ends`` bool or float. Returns ``(B, T)`` tensors.
    """
    tokens = PolicyTokens.of(policy_mask)
    compact_values, compact_rewards = tokens.gather(values), tokens.gather(rewards)
    ends = (tokens.gather(turn_ends.to(values.dtype)).bool() | tokens.last) & tokens.valid
    turn_tokens = PolicyTokens.of(ends)  # each row's turn ends, moved to its front
    turn_values, turn_rewards = turn_tokens.gather(compact_values), turn_tokens.gather(compact_rewards)
    next_turn_values = following_entries(turn_values)
    no_truncation = torch.zeros_like(ends).T
    turn_level = compute_gae(
        turn_rewards.T, turn_values.T, next_turn_values.T, turn_tokens.last.T, no_truncation,
        turn_tokens.valid.T, turn_gamma, lam,
    )  # fmt: skip
    turn_returns = turn_tokens.scatter(turn_level.returns.T)  # G_k at each turn end, compact token layout
    token_rewards = torch.where(ends, turn_returns, compact_rewards)
    next_values = following_entries(compact_values)
    token_level = compute_gae(
        token_rewards.T, compact_values.T, next_values.T, ends.T, no_truncation, tokens.valid.T, gamma, lam
    )
    return AdvantageEstimate(tokens.scatter(token_level.advantages.T), tokens.scatter(token_level.returns.T))


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


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float | torch.Tensor) -> torch.Tensor:
    """Per-token returns ``G_t = r_t + gamma_t G_{t+1}`` along each row of ``(B, T)`` ``rewards`` whose valid entries
    (``mask``) are a prefix; padding gets 0 and ends each row's sum. ``gamma`` is one discount or a ``(B, T)`` tensor
    (``gamma_t``: the discount from step ``t`` to step ``t + 1``)."""
    mask_f = mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    following = torch.zeros_like(rewards[:, 0])
    per_step = isinstance(gamma, torch.Tensor)
    for t in range(rewards.shape[1] - 1, -1, -1):
        following = (rewards[:, t] + (gamma[:, t] if per_step else gamma) * following) * mask_f[:, t]
        returns[:, t] = following
    return returns


def reinforce_pp_advantages(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    sum_over_processes: Callable[[torch.Tensor], torch.Tensor] = lambda total: total,
    turn_ends: torch.Tensor | None = None,
    turn_gamma: float | None = None,
) -> torch.Tensor:
    """REINFORCE++ (Hu et al. 2025, arXiv 2501.03262): no critic; the advantage of token t is its discounted return
    ``G_t = sum_{s >= t} gamma^(s-t) r_s`` (per-token rewards, the k1 reference KL among them), whitened over the
    global batch: ``(G - mean) / (std + 1e-8)`` over every valid token of every process (``sum_over_processes``).
    The baseline variant centres each group's outcome rewards before the returns are taken (the caller's part).
    The sum runs over the tokens of ``mask`` only, skipping the others (a dialogue's environment replies), with
    ``turn_gamma`` in place of ``gamma`` from a turn's last token (``turn_ends``) to the next turn's first.

    Shapes: ``rewards``, ``mask``, ``turn_ends`` ``(B, T)``; returns ``(B, T)``, 0 off the mask.
    """
    tokens = PolicyTokens.of(mask)
    step_gamma: float | torch.Tensor = gamma
    if turn_ends is not None and turn_gamma is not None and turn_gamma != gamma:
        ends = tokens.gather(turn_ends.to(rewards.dtype)).bool()
        step_gamma = torch.where(ends, turn_gamma, gamma).to(rewards.dtype)
    returns = tokens.scatter(discounted_returns(tokens.gather(rewards), tokens.valid, step_gamma))
    return whiten(returns, mask, sum_over_processes=sum_over_processes)
