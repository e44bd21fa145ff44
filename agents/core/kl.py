"""KL estimators and the penalty-coefficient controllers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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


@dataclass
class AdaptivePenalty:
    """The PPO paper's adaptive KL coefficient (Schulman et al. 2017, section 4).

    After each policy update, with ``d = E[KL(pi_old, pi)]`` of that update:
    ``d < kl_target / 1.5 -> beta /= 2``; ``d > kl_target * 1.5 -> beta *= 2``; otherwise unchanged.
    Call ``update`` once per iteration, never per minibatch.
    """

    beta: float
    kl_target: float

    def update(self, kl: float) -> None:
        if not math.isfinite(kl):
            raise ValueError(f"AdaptivePenalty got a non-finite KL ({kl}); the update diverged, lower the learning rate")
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
    """A constant KL coefficient (the paper's "fixed KL" ablation, or a fixed reference leash); ``update`` leaves beta as it is."""

    beta: float

    def update(self, kl: float, n_steps: int = 0) -> None:
        del kl, n_steps

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.beta = float(state["beta"])


@dataclass
class ProportionalKL:
    """The adaptive reference-KL coefficient of Ziegler et al. 2019 (lm-human-preferences, classic TRL).

    ``e = clip(KL / target - 1, -0.2, 0.2)``; ``beta <- beta * (1 + e * n_steps / horizon)``, with KL the
    mean per-sequence KL to the reference of the last batch and ``n_steps`` its number of sequences.
    Call ``update`` once per iteration.
    """

    beta: float
    kl_target: float
    horizon: int

    def update(self, kl: float, n_steps: int) -> None:
        if not math.isfinite(kl):
            raise ValueError(f"ProportionalKL got a non-finite KL ({kl}); the policy diverged from the reference, lower the learning rate")
        error = min(max(kl / self.kl_target - 1.0, -0.2), 0.2)  # clip range 0.2 from Ziegler et al. 2019
        self.beta *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta, "kl_target": self.kl_target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.beta, self.kl_target, self.horizon = float(state["beta"]), float(state["kl_target"]), int(state["horizon"])
