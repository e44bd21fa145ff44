"""KL estimators and the KL-coefficient controllers.

Every controller has one contract, ``KLController``: read ``beta``; call ``update(kl, n)`` once per
iteration with the iteration's mean KL and the number of items (transitions or sequences) it was
measured on; ``state_dict``/``load_state_dict`` for checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

ReferenceKLEstimator = Literal["k3", "k2", "k3-ratio"]
"""The estimator of KL(pi || pi_ref) in the loss, on the policy's own samples: ``k3 = exp(ref - logp) - (ref - logp)
- 1`` (DeepSeekMath eq. 4; its gradient is biased), ``k2 = (logp - ref)^2 / 2``, whose gradient is the
score-function gradient of the KL (arXiv 2510.01555), or ``k3-ratio``, k3 times the ratio pi / pi_old, whose
gradient is the same score-function gradient (DeepSeek-V3.2; TRL's ``use_bias_correction_kl``)."""


def kl_k1(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-sample estimator of KL(pi_old || pi) from actions sampled under pi_old: ``k1 = log pi_old - log pi``.

    Unbiased, high variance, can be negative (Schulman, "Approximating KL divergence", 2020).
    """
    return old_logp - logp


def kl_k3(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-sample estimator of KL(pi_old || pi): ``k3 = (r - 1) - log r``, ``r = pi / pi_old``.

    Unbiased, non-negative, lower variance than k1 (Schulman 2020).
    """
    log_ratio = logp - old_logp
    return torch.expm1(log_ratio) - log_ratio


def kl_k2(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-sample estimator of KL(pi_old || pi): ``k2 = (log r)^2 / 2``, ``r = pi / pi_old``.

    Biased, non-negative, low variance (Schulman 2020). As a loss on samples of the policy being trained, its
    gradient ``(log pi - log pi_ref) grad log pi`` is the score-function gradient of the KL: k2 in the loss is
    gradient-equivalent to k1 in the reward on-policy (arXiv 2510.01555), where k3 in the loss is not.
    """
    return 0.5 * (logp - old_logp) ** 2


def gaussian_kl(
    mean_p: torch.Tensor, log_std_p: torch.Tensor, mean_q: torch.Tensor, log_std_q: torch.Tensor
) -> torch.Tensor:
    """Exact KL(p || q) between diagonal Gaussians, summed over the last (action) dimension.

    ``sum_i [log s_q - log s_p + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2]``; inputs ``(..., D)``, output ``(...)``.
    """
    var_p = torch.exp(2.0 * log_std_p)
    var_q = torch.exp(2.0 * log_std_q)
    per_dim = log_std_q - log_std_p + (var_p + (mean_p - mean_q) ** 2) / (2.0 * var_q) - 0.5
    return per_dim.sum(-1)


class KLController(Protocol):
    """A KL coefficient that may adapt once per iteration."""

    beta: float

    def update(self, kl: float, n: int) -> None:
        """Adapt ``beta`` to the mean KL ``kl`` measured over ``n`` items of the last iteration."""
        ...

    def state_dict(self) -> dict[str, float]: ...

    def load_state_dict(self, state: dict[str, float]) -> None: ...


@dataclass
class AdaptivePenalty:
    """The PPO paper's adaptive KL coefficient (Schulman et al. 2017, section 4).

    After each policy update, with ``d = E[KL(pi_old, pi)]`` of that update:
    ``d < kl_target / 1.5 -> beta /= 2``; ``d > kl_target * 1.5 -> beta *= 2``; otherwise unchanged.
    Call ``update`` once per iteration, never per minibatch; the rule does not depend on ``n``.
    """

    beta: float
    kl_target: float

    def update(self, kl: float, n: int) -> None:
        del n
        if not math.isfinite(kl):
            raise ValueError(
                f"AdaptivePenalty got a non-finite KL ({kl}); the update diverged, lower the learning rate"
            )
        if kl < self.kl_target / 1.5:
            self.beta /= 2.0
        elif kl > self.kl_target * 1.5:
            self.beta *= 2.0

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta, "kl_target": self.kl_target}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.beta = float(state["beta"])
        self.kl_target = float(state["kl_target"])


@dataclass
class FixedPenalty:
    """A constant KL coefficient (the paper's "fixed KL" ablation, or a fixed reference leash); ``update`` leaves
    beta as it is.
    """

    beta: float

    def update(self, kl: float, n: int) -> None:
        del kl, n

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.beta = float(state["beta"])


@dataclass
class ProportionalKL:
    """The adaptive reference-KL coefficient of Ziegler et al. 2019 (lm-human-preferences, classic TRL).

    ``e = clip(KL / target - 1, -0.2, 0.2)``; ``beta <- beta * (1 + e * n / horizon)``, with KL the
    mean per-sequence KL to the reference of the last batch and ``n`` its number of sequences.
    Call ``update`` once per iteration.
    """

    beta: float
    kl_target: float
    horizon: int

    def update(self, kl: float, n: int) -> None:
        if not math.isfinite(kl):
            raise ValueError(
                f"ProportionalKL got a non-finite KL ({kl}); "
                "the policy diverged from the reference, lower the learning rate"
            )
        error = min(max(kl / self.kl_target - 1.0, -0.2), 0.2)  # clip range 0.2 from Ziegler et al. 2019
        self.beta *= 1.0 + error * n / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta, "kl_target": self.kl_target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.beta, self.kl_target, self.horizon = float(state["beta"]), float(state["kl_target"]), int(state["horizon"])


def kl_k3_ratio(ref_logp: torch.Tensor, logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-token ``k3(pi || pi_ref) * pi / pi_old``: GRPO's k3 weighted by the importance ratio to the sampling
    policy, the ratio differentiable (DeepSeek-V3.2, arXiv 2512.02556; TRL 1.16's ``use_bias_correction_kl``,
    default on). Where ``pi = pi_old`` its value is k3's and its gradient, with ``rho = pi_ref / pi``, is
    ``(k3 + 1 - rho) grad log pi = (log pi - log pi_ref) grad log pi``: the score-function gradient of the KL, as
    k2's. All ``(..., T)`` alike.
    """
    return kl_k3(ref_logp, logp) * torch.exp(logp - old_logp)
