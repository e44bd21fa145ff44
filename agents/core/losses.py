"""PPO loss terms: pure functions of per-sample tensors that return a scalar to *minimise*.

The policy surrogates are siblings with identical inputs (``SurrogateInputs``), so any objective runs on any
environment. Every tensor has the same shape (``(N,)`` for transitions, ``(B, T)`` for sequences) and ``mask``
selects the entries that count. The sequence-level ones (GSPO, GSPO-token, GMPO) read ``(N,)`` transitions as
``(N, 1)``: one-token sequences, as ``aggregate`` does.
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


def dual_clip_surrogate(
    x: SurrogateInputs,
    clip_coef: float | torch.Tensor,
    clip_coef_high: float | torch.Tensor | None,
    dual_clip: float | torch.Tensor,
    how: LossAggregation = "token-mean",
) -> torch.Tensor:
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729, section 3.1), negated: PPO-Clip's objective
    ``L = min(r A, clip(r, 1-eps_low, 1+eps_high) A)``, and for ``A < 0`` the lower bound ``max(L, c A)``, so a
    ratio far above 1 on a bad action cannot make the objective (and its gradient) unboundedly large; ``c > 1``.
    Where ``c A`` binds the gradient is exactly 0."""
    ratio = torch.exp(x.logp - x.old_logp)
    high = clip_coef if clip_coef_high is None else clip_coef_high
    clipped = torch.minimum(ratio * x.advantages, torch.clamp(ratio, 1.0 - clip_coef, 1.0 + high) * x.advantages)
    bounded = torch.where(x.advantages < 0, torch.maximum(clipped, dual_clip * x.advantages), clipped)
    return -aggregate(bounded, x.mask, how)


def _grid(values: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` as it is; ``(N,)`` transitions as ``(N, 1)``, one-token sequences."""
    return values if values.dim() > 1 else values.unsqueeze(-1)


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)``: ``sum_t m v / max(sum_t m, 1)``, the mean of each sequence's valid entries of ``values`` ``(B, T)``
    (``(N,)`` read as ``(N, 1)``)."""
    mask_f = _grid(mask).to(values.dtype)
    return (_grid(values) * mask_f).sum(-1) / mask_f.sum(-1).clamp(min=1.0)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's ``log s_i = (1/|y_i|) sum_t (log pi - log pi_old)``: the log of the geometric mean of the token ratios
    of each sequence, ``(B, T) -> (B,)``."""
    return sequence_mean(logp - old_logp, mask)


def _per_sequence_loss(per_sequence: torch.Tensor, mask: torch.Tensor, how: LossAggregation) -> torch.Tensor:
    """Minus the aggregate of one objective value per sequence ``(B,)`` given to each of its valid tokens: under
    ``sequence-mean`` the mean over sequences; under ``token-mean`` each weighs its length."""
    grid_mask = _grid(mask)
    return -aggregate(per_sequence.unsqueeze(-1).expand(grid_mask.shape), grid_mask, how)


def gspo_surrogate(
    x: SurrogateInputs,
    clip_coef: float | torch.Tensor,
    clip_coef_high: float | torch.Tensor | None = None,
    how: LossAggregation = "sequence-mean",
) -> torch.Tensor:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071, section 4.1), negated: with the sequence ratio
    ``s_i = exp((1/|y_i|) sum_t log r_i,t)`` and the sequence's advantage ``A_i`` (the mean of its token advantages,
    which group objectives give every token alike), ``-E_i[min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i)]``.
    A clipped sequence gives none of its tokens a gradient; an unclipped one gives each ``A_i s_i / |y_i|``."""
    ratio = torch.exp(sequence_log_ratio(x.logp, x.old_logp, x.mask))
    advantage = sequence_mean(x.advantages, x.mask)
    high = clip_coef if clip_coef_high is None else clip_coef_high
    objective = torch.minimum(ratio * advantage, torch.clamp(ratio, 1.0 - clip_coef, 1.0 + high) * advantage)
    return _per_sequence_loss(objective, x.mask, how)


def gspo_token_surrogate(
    x: SurrogateInputs,
    clip_coef: float | torch.Tensor,
    clip_coef_high: float | torch.Tensor | None = None,
    how: LossAggregation = "sequence-mean",
) -> torch.Tensor:
    """GSPO-token (Zheng et al. 2025, section 4.3), negated: the token ratio ``s_i,t = sg[s_i] pi(y_t) / sg[pi(y_t)]``
    (its value is ``s_i``, its gradient ``sg[s_i] grad log pi(y_t)``) in PPO-Clip's ``min`` with per-token
    advantages ``A_i,t``. With ``A_i,t = A_i`` it equals GSPO in value and gradient."""
    log_ratio = sequence_log_ratio(x.logp, x.old_logp, x.mask).detach()
    token_ratio = torch.exp(log_ratio.unsqueeze(-1) + _grid(x.logp) - _grid(x.logp).detach())
    advantages = _grid(x.advantages)
    high = clip_coef if clip_coef_high is None else clip_coef_high
    clipped = torch.clamp(token_ratio, 1.0 - clip_coef, 1.0 + high) * advantages
    return -aggregate(torch.minimum(token_ratio * advantages, clipped), _grid(x.mask), how)


def gmpo_surrogate(
    x: SurrogateInputs,
    clip_coef: float | torch.Tensor,
    clip_coef_high: float | torch.Tensor | None = None,
    how: LossAggregation = "sequence-mean",
) -> torch.Tensor:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673), negated: the geometric mean of the token ratios, each
    clipped pessimistically in log space, times the sequence's advantage:
    ``-E_i[A_i exp((1/|y_i|) sum_t sgn(A_i) min(sgn(A_i) log r_i,t, sgn(A_i) clip(log r_i,t, -eps_low, eps_high)))]``.
    For ``A_i > 0`` only ``log r > eps_high`` is clipped, for ``A_i < 0`` only ``log r < -eps_low``; a clipped token
    gets no gradient, an unclipped one ``A_i G_i / |y_i|`` with ``G_i`` the sequence's clipped geometric mean."""
    log_ratio = _grid(x.logp - x.old_logp)
    advantage = sequence_mean(x.advantages, x.mask)
    sign = torch.sign(advantage).unsqueeze(-1)
    high = clip_coef if clip_coef_high is None else clip_coef_high
    clipped = torch.clamp(log_ratio, -clip_coef, high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped)
    geometric_mean = torch.exp(sequence_mean(pessimistic, x.mask))
    return _per_sequence_loss(advantage * geometric_mean, x.mask, how)


def cispo_surrogate(
    x: SurrogateInputs, max_weight: float | torch.Tensor, how: LossAggregation = "token-mean"
) -> torch.Tensor:
    """CISPO (MiniMax 2025, MiniMax-M1, arXiv 2506.13585, section 3.1), negated:
    ``-E[sg(min(r, max_weight)) A log pi]``. The weight is clipped and detached, so every token keeps the gradient
    ``sg(w) A grad log pi``, clipped ones included, where PPO-Clip would give them none."""
    weight = torch.clamp(torch.exp(x.logp - x.old_logp), max=max_weight).detach()
    return -aggregate(weight * x.advantages * x.logp, x.mask, how)


def sapo_surrogate(
    x: SurrogateInputs,
    temperature_pos: float,
    temperature_neg: float,
    how: LossAggregation = "sequence-mean",
) -> torch.Tensor:
    """SAPO (soft adaptive policy optimization, arXiv 2511.20347; TRL 1.16 ``loss_type="sapo"``), negated: the soft gate
    ``f(r) = sigmoid(tau (r - 1)) * 4 / tau`` in place of the clipped ratio, ``-E[f(r) A]``, with ``tau`` the positive
    temperature where ``A > 0`` and the negative one elsewhere. ``f'(1) = 1``, so on-policy it is the plain policy
    gradient; the gradient ``sigmoid'(tau (r - 1)) 4 r A`` fades smoothly as ``r`` leaves 1, faster for larger tau."""
    ratio = torch.exp(x.logp - x.old_logp)
    positive, negative = torch.full_like(ratio, temperature_pos), torch.full_like(ratio, temperature_neg)
    temperature = torch.where(x.advantages > 0, positive, negative)
    gate = torch.sigmoid(temperature * (ratio - 1.0)) * 4.0 / temperature
    return -aggregate(gate * x.advantages, x.mask, how)


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
