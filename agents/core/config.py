"""The PPO update's settings, shared by both worlds, and the checks every config goes through.

World-specific settings (a walker's horizon and network widths, a language model's sampling) live with
their world; this dataclass holds only what the core and both training loops read. Defaults are the
PPO paper's MuJoCo settings (Schulman et al. 2017, Table 3); the text world overrides some of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agents.core.distributed import world_size
from agents.core.losses import LossAggregation


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says which and what to use instead."""


@dataclass(frozen=True)
class PPOConfig:
    """The PPO update and its schedule."""

    total_steps: int = 1_000_000
    """Environment steps to train for: MuJoCo steps summed over envs; for text, generated tokens."""
    epochs: int = 10
    """Passes over each batch (paper: 10)."""
    minibatch_size: int = 64
    """Items per gradient step, must divide the batch: MuJoCo transitions (paper: 64); text sequences."""
    reshuffle_each_epoch: bool = True
    """A fresh shuffle of the batch into minibatches every epoch (baselines, CleanRL, SB3); off: one shuffle per
    update, the same minibatches in every epoch (TRL's GRPOTrainer with num_iterations > 1)."""
    learning_rate: float = 3e-4
    """Adam step size (paper: 3e-4)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    adam_eps: float = 1e-5
    """Adam epsilon (openai/baselines uses 1e-5, torch's default is 1e-8)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    normalize_advantages: bool = True
    """Normalise advantages to mean 0, std 1 within each minibatch."""
    recompute_advantages: bool = False
    """Recompute values, advantages and value targets with the current critic before every epoch after the first
    (Andrychowicz et al. 2021, sec. 3.5; Tianshou's recompute_adv); MuJoCo runs with a critic only."""
    value_clip: float | None = 0.2
    """Clip the value update to +-this around the old value (baselines ppo2, CleanRL: 0.2); None = off."""
    vf_coef: float = 0.5
    """Weight of the value loss (separate networks: it scales the critic's gradient and its share of the clip)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (paper: none)."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm to this value."""
    target_kl: float | None = None
    """Early stopping: skip the remaining epochs once the mean k3 KL of an epoch exceeds this; None = off."""
    loss_aggregation: LossAggregation | None = None
    """Policy loss over tokens: all (DAPO), per sequence (GRPO), sum / token limit (Dr. GRPO); None = objective's."""


def check_positive_ints(values: Mapping[str, int]) -> None:
    """``ConfigError`` for the first ``--flag`` whose value is below 1."""
    for flag, value in values.items():
        if value < 1:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")


def check_positive(values: Mapping[str, float]) -> None:
    """``ConfigError`` for the first ``--flag`` whose value is not > 0 (NaN included)."""
    for flag, value in values.items():
        if not value > 0:
            raise ConfigError(f"{flag} must be > 0, got {value}")


def check_non_negative(values: Mapping[str, float]) -> None:
    """``ConfigError`` for the first ``--flag`` whose value is not >= 0 (NaN included)."""
    for flag, value in values.items():
        if not value >= 0:
            raise ConfigError(f"{flag} must be >= 0, got {value}")


def check_minibatch_split(minibatch_size: int, processes: int) -> None:
    """Each of ``processes`` takes ``minibatch_size / processes`` items per gradient step: it must divide."""
    if minibatch_size % processes:
        raise ConfigError(
            f"--minibatch-size {minibatch_size} does not split over {processes} processes; "
            f"use a multiple of {processes}"
        )


def check_batch(batch: int, batch_flags: str, ppo: PPOConfig) -> None:
    """The minibatch must fit in and divide the batch of ``batch`` items (named by ``batch_flags``), and split
    evenly over the processes of the run (each takes ``minibatch_size / processes`` of its own share)."""
    check_minibatch_split(ppo.minibatch_size, world_size())
    if ppo.minibatch_size > batch:
        raise ConfigError(
            f"--minibatch-size {ppo.minibatch_size} is larger than the batch ({batch_flags} = {batch}); lower it"
        )
    if batch % ppo.minibatch_size:
        raise ConfigError(
            f"--minibatch-size {ppo.minibatch_size} does not divide the batch of {batch}; pick a divisor of {batch}"
        )


def validate_ppo(ppo: PPOConfig) -> None:
    """``ConfigError`` for the first impossible value of ``ppo``."""
    check_positive_ints(
        {"--epochs": ppo.epochs, "--minibatch-size": ppo.minibatch_size, "--total-steps": ppo.total_steps}
    )
    positive = {"--learning-rate": ppo.learning_rate, "--adam-eps": ppo.adam_eps, "--max-grad-norm": ppo.max_grad_norm}
    if ppo.value_clip is not None:
        positive["--value-clip"] = ppo.value_clip
    if ppo.target_kl is not None:
        positive["--target-kl"] = ppo.target_kl
    check_positive(positive)
    for flag, value in {"--gamma": ppo.gamma, "--gae-lambda": ppo.gae_lambda}.items():
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{flag} must be in [0, 1], got {value}")
    check_non_negative({"--vf-coef": ppo.vf_coef, "--ent-coef": ppo.ent_coef})
