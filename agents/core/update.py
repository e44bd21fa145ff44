"""The PPO update, shared by every policy: epochs x shuffled minibatches of one gradient step
(``agents/core/minibatch_step.py``), early stopping, and what is measured once after it.

The policy is only ever called as ``policy(minibatch.inputs) -> Evaluation``: the ``ActorCritic``
annotation below is the whole contract between the core and a policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from agents.core.batch import Minibatch, minibatch_indices
from agents.core.config import PPOConfig
from agents.core.distributed import all_reduce_mean_, all_reduce_sum, world_size
from agents.core.minibatch_step import STAT_NAMES, MinibatchStep
from agents.core.optimizer import AdamState
from agents.core.policy import ActorCritic


class NonFiniteLossError(RuntimeError):
    """A PPO step produced a NaN or infinite loss; the run stops without touching its last checkpoint."""


class UpdateResult(NamedTuple):
    """Means over the update's minibatches, plus what was measured once after it."""

    stats: dict[str, float]
    """Every name in ``STAT_NAMES`` averaged over minibatches, plus ``epochs_run``, ``kl_after_update`` and
    ``explained_variance``."""
    kl_after_update: float
    """Mean exact (or k3) KL(pi_old || pi) over the whole batch after the last epoch: the ``d`` the adaptive
    penalty reads."""


@dataclass(frozen=True)
class UpdateSchedule:
    """This iteration's learning rate and KL coefficient."""

    learning_rate: float
    beta: float


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var[R - V] / Var[R]`` over valid entries (1 = perfect value function, 0 = no better than a constant)."""
    mask = mask.to(values.dtype)
    count = mask.sum().clamp(min=1.0)
    mean_r = (returns * mask).sum() / count
    var_r = (((returns - mean_r) * mask) ** 2).sum() / count
    residual = (returns - values) * mask
    var_residual = (((residual - residual.sum() / count) * mask) ** 2).sum() / count
    return float("nan") if var_r.item() == 0.0 else float(1.0 - var_residual / var_r)


def ppo_update(
    policy: ActorCritic,
    params: dict[str, torch.Tensor],
    adam: AdamState,
    step: MinibatchStep,
    batch: Minibatch,
    cfg: PPOConfig,
    schedule: UpdateSchedule,
    generator: torch.Generator,
    evaluation_chunk: int = 8192,
    refresh: Callable[[Minibatch], Minibatch] | None = None,
) -> UpdateResult:
    """``cfg.epochs`` passes of shuffled minibatches of ``cfg.minibatch_size`` items through ``step``, shuffled
    again for every epoch unless ``cfg.reshuffle_each_epoch`` is off (then every epoch takes the first's).

    ``batch`` is this process's share; with several processes each takes ``minibatch_size / processes`` items
    of its own share per step, and the averaged gradient is that of a ``minibatch_size`` minibatch.

    ``refresh``, where given, returns the batch with advantages, value targets and old values recomputed by the
    critic as it is now; it runs before every epoch after the first (``--recompute-advantages``).

    Stops early after an epoch whose mean k3 KL exceeds ``cfg.target_kl``. Raises
    ``NonFiniteLossError`` after an epoch whose mean statistics are not finite.
    """
    device = next(iter(params.values())).device
    lr = torch.tensor(schedule.learning_rate, device=device)
    beta = torch.tensor(schedule.beta, device=device)
    per_step: list[torch.Tensor] = []
    epochs_run = 0
    minibatches: list[torch.Tensor] = []
    collected = batch  # explained variance is the rollout critic's, whatever refresh does
    for epoch in range(cfg.epochs):
        if epoch > 0 and refresh is not None:
            batch = refresh(batch)
        if epoch == 0 or cfg.reshuffle_each_epoch:
            minibatches = list(minibatch_indices(batch.size, cfg.minibatch_size // world_size(), generator))
        epoch_stats = [step(params, adam, batch, index, lr, beta) for index in minibatches]
        per_step.extend(epoch_stats)
        epochs_run += 1
        epoch_mean = torch.stack(epoch_stats).mean(0)
        all_reduce_mean_([epoch_mean])  # every process takes the same early-stopping and non-finite decisions
        if not torch.isfinite(epoch_mean).all():
            bad = [name for name, value in zip(STAT_NAMES, epoch_mean.tolist()) if not math.isfinite(value)]
            raise NonFiniteLossError(
                f"non-finite {', '.join(bad)} in the PPO update; lower --learning-rate or check the rewards"
            )
        if cfg.target_kl is not None and epoch_mean[STAT_NAMES.index("approx_kl_k3")].item() > cfg.target_kl:
            break
    means = dict(zip(STAT_NAMES, torch.stack(per_step).mean(0).tolist()))
    kl_after = kl_over_batch(policy, batch, evaluation_chunk)
    means.update(
        epochs_run=float(epochs_run),
        kl_after_update=kl_after,
        explained_variance=explained_variance(collected.old_values, collected.returns, collected.mask),
    )
    return UpdateResult(means, kl_after)


@torch.no_grad()
def kl_over_batch(policy: ActorCritic, batch: Minibatch, chunk: int) -> float:
    """Mean KL(pi_old || pi) over every valid item of ``batch`` (of every process), ``chunk`` items at a time."""
    total, count = 0.0, 0.0
    for start in range(0, batch.size, chunk):
        part = batch.select(slice(start, start + chunk))
        kl = policy(part.inputs).kl
        total += float((kl * part.mask).sum())
        count += float(part.mask.sum())
    total, count = all_reduce_sum(torch.tensor([total, count], dtype=torch.float64)).tolist()
    return total / max(count, 1.0)
