"""The policy objectives and their one registry of names.

An objective is a small frozen dataclass: its settings (which the command line turns into options),
its ``name`` (the subcommand, the run-folder part and the start of its report label), its surrogate
loss, its KL-coefficient controller and its recipe: which advantage estimator it uses (GAE with a critic,
or a group-relative one without), how it aggregates the loss over tokens and where its recipe puts the
KL to a reference model. ``OBJECTIVES`` maps names to classes; the command line, run names, ``ppo compare``
presets and ``ppo report`` labels all read it, so adding an objective means adding one class here and one
entry in ``OBJECTIVES``. What an objective asks of the rollout (groups, dynamic sampling, an overlong penalty)
it says through one method, ``sampling_plan``, which the loops read; no loop names an objective's own knobs.

The PPO paper's four (clip, penalty, fixed-kl, no-clip) learn a critic and use GAE. The four after it (grpo,
dr-grpo, rloo, dapo) drop the critic: each sample's advantage is its outcome reward against the others of its
group (G samples from one prompt, or G episodes from one initial state), then PPO-Clip's surrogate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

import torch

from agents.core.config import ConfigError, check_non_negative, check_positive, check_positive_ints
from agents.core.kl import AdaptivePenalty, FixedPenalty, KLController
from agents.core.losses import (
    LossAggregation,
    SurrogateInputs,
    clip_surrogate,
    kl_penalty_surrogate,
    unclipped_surrogate,
)

DIAGNOSTIC_CLIP = 0.2  # the paper's epsilon; objectives without clipping count their logged clip fraction against it

AdvantageEstimator = Literal["gae", "grpo", "dr-grpo", "rloo"]
"""``gae``: a learned critic and GAE; the others: group-relative (``agents/core/group_advantages.py``), no critic."""
ReferenceKL = Literal["reward", "loss", "none"]
"""Where the KL to a reference model goes (text): a per-token penalty in the reward (PPO-RLHF), the k3 estimate in
the loss with coefficient beta (GRPO), or nowhere (Dr. GRPO, DAPO)."""


class SamplingPlan(NamedTuple):
    """What an objective asks of the rollout beyond its advantage estimator; the loops read only this."""

    group_size: int = 1
    """G: samples of one prompt (text) or episodes from one initial state (walkers) that share a baseline; 1 = none."""
    drop_zero_variance: bool = False
    """Dynamic sampling (DAPO): leave groups whose rewards are all equal out of the batch and sample more."""
    max_sampling_rounds: int = 1
    """Cap on sampling rounds per iteration; past it the batch is topped up with dropped groups."""
    overlong_cache: int = 0
    """Text: DAPO's soft overlong penalty over the last this many tokens before the limit; 0 = off."""


@dataclass(frozen=True)
class Objective(ABC):
    """What every objective shares: PPO's recipe (a critic with GAE, token-mean loss, the reference KL in the
    reward), no KL-to-the-old-policy coefficient and no groups. A subclass is one objective of the registry."""

    name: ClassVar[str]
    """The subcommand, the run-folder part and the start of the report label."""
    label_field: ClassVar[str | None] = None
    """The setting whose value completes the report label (``clip-0.2``); None = the name alone."""
    uses_beta: ClassVar[bool] = False
    """Whether the surrogate reads the KL coefficient beta (the penalty objectives)."""
    advantage_estimator: ClassVar[AdvantageEstimator] = "gae"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"

    @abstractmethod
    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        """The policy loss to minimise, aggregated over the valid tokens as ``how`` says."""

    def kl_controller(self) -> KLController:
        """The coefficient beta of the KL to the old policy; none (0) unless the objective penalises it."""
        return FixedPenalty(beta=0.0)

    @property
    def diagnostic_clip_coef(self) -> float:
        """The epsilon the logged clip fraction counts against."""
        return DIAGNOSTIC_CLIP

    def sampling_plan(self) -> SamplingPlan:
        """What the objective asks of the rollout: PPO's ``num_steps`` per environment or one completion per
        prompt."""
        return SamplingPlan()

    def validate(self) -> None:
        """``ConfigError`` for the first impossible setting."""
        return None


def check_clip_range(objective: Clip | GroupObjective) -> None:
    """``ConfigError`` for a clip range that is not positive."""
    check_positive({"--clip-coef": objective.clip_coef})
    if objective.clip_coef_high is not None:
        check_positive({"--clip-coef-high": objective.clip_coef_high})


@dataclass(frozen=True)
class Clip(Objective):
    """PPO-Clip: the clipped surrogate objective (paper eq. 7)."""

    name: ClassVar[str] = "clip"
    label_field: ClassVar[str | None] = "clip_coef"

    clip_coef: float = 0.2
    """Clipping range epsilon: ratios outside [1 - eps, 1 + eps] get no gradient (paper: 0.2)."""
    clip_coef_high: float | None = None
    """Upper range: clip to [1 - clip_coef, 1 + this] (DAPO's clip-higher: 0.28); None = clip_coef, symmetric."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return clip_surrogate(inputs, self.clip_coef, self.clip_coef_high, how)

    @property
    def diagnostic_clip_coef(self) -> float:
        return self.clip_coef

    def validate(self) -> None:
        check_clip_range(self)


@dataclass(frozen=True)
class Penalty(Objective):
    """PPO-Penalty: KL-penalised surrogate with the paper's adaptive coefficient (section 4)."""

    name: ClassVar[str] = "penalty"
    label_field: ClassVar[str | None] = "kl_target"
    uses_beta: ClassVar[bool] = True

    kl_target: float = 0.01
    """d_targ: the KL(pi_old || pi) per update that the coefficient steers towards (paper's best: 0.01)."""
    initial_beta: float = 1.0
    """Starting penalty coefficient beta (paper: 1; it adapts within a few iterations)."""
    clip_fraction_reference: float = DIAGNOSTIC_CLIP
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        return kl_penalty_surrogate(inputs, beta, how)

    def kl_controller(self) -> KLController:
        return AdaptivePenalty(beta=self.initial_beta, kl_target=self.kl_target)

    @property
    def diagnostic_clip_coef(self) -> float:
        return self.clip_fraction_reference

    def validate(self) -> None:
        check_positive({"--kl-target": self.kl_target, "--initial-beta": self.initial_beta})


@dataclass(frozen=True)
class FixedKL(Objective):
    """KL-penalised surrogate with a constant coefficient (the paper's "fixed KL" ablation)."""

    name: ClassVar[str] = "fixed-kl"
    label_field: ClassVar[str | None] = "beta"
    uses_beta: ClassVar[bool] = True

    beta: float = 3.0
    """Constant penalty coefficient (paper's best fixed value: 3)."""
    clip_fraction_reference: float = DIAGNOSTIC_CLIP
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        return kl_penalty_surrogate(inputs, beta, how)

    def kl_controller(self) -> KLController:
        return FixedPenalty(beta=self.beta)

    @property
    def diagnostic_clip_coef(self) -> float:
        return self.clip_fraction_reference

    def validate(self) -> None:
        check_non_negative({"--beta": self.beta})


@dataclass(frozen=True)
class NoClip(Objective):
    """Plain importance-sampled surrogate, no clipping or penalty (the paper's first ablation)."""

    name: ClassVar[str] = "no-clip"

    clip_fraction_reference: float = DIAGNOSTIC_CLIP
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return unclipped_surrogate(inputs, how)

    @property
    def diagnostic_clip_coef(self) -> float:
        return self.clip_fraction_reference


@dataclass(frozen=True)
class GroupObjective(Objective):
    """What the critic-free group methods share (as TorchRL's ``ClipPPOLoss(PPOLoss)``): no critic, each sample's
    advantage its outcome reward against the rest of its group of G, then PPO-Clip's surrogate with the objective's
    own clip range."""

    label_field: ClassVar[str | None] = "group_size"

    group_size: int = 8
    """G: completions per prompt (text) or episodes per initial state (walkers) that share a baseline."""
    clip_coef: float = 0.2
    """Clipping range epsilon of the surrogate (DeepSeekMath: 0.2)."""
    clip_coef_high: float | None = None
    """Upper range: clip to [1 - clip_coef, 1 + this]; None = clip_coef, symmetric."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return clip_surrogate(inputs, self.clip_coef, self.clip_coef_high, how)

    @property
    def diagnostic_clip_coef(self) -> float:
        return self.clip_coef

    def sampling_plan(self) -> SamplingPlan:
        return SamplingPlan(group_size=self.group_size)

    def validate(self) -> None:
        if self.group_size < 2:
            raise ConfigError(f"--group-size must be at least 2 (a group compares its samples), got {self.group_size}")
        check_clip_range(self)


@dataclass(frozen=True)
class GRPO(GroupObjective):
    """GRPO (Shao et al. 2024): no critic, A = (r - group mean) / group std, clipped surrogate, reference KL in loss."""

    name: ClassVar[str] = "grpo"
    advantage_estimator: ClassVar[AdvantageEstimator] = "grpo"
    recipe_aggregation: ClassVar[LossAggregation] = "sequence-mean"  # DeepSeekMath eq. 21: 1/G sum_i 1/|o_i| sum_t
    recipe_reference_kl: ClassVar[ReferenceKL] = "loss"  # DeepSeekMath eq. 21: - beta D_KL[pi_theta || pi_ref], k3


@dataclass(frozen=True)
class DrGRPO(GroupObjective):
    """Dr. GRPO (Liu et al. 2025): GRPO without the std division and with a constant-length loss, no reference KL."""

    name: ClassVar[str] = "dr-grpo"
    advantage_estimator: ClassVar[AdvantageEstimator] = "dr-grpo"
    recipe_aggregation: ClassVar[LossAggregation] = "constant-length"  # Liu et al. 2025, eq. 3: sum / (G * max len)
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # Liu et al. 2025 train with beta = 0


@dataclass(frozen=True)
class RLOO(GroupObjective):
    """RLOO (Ahmadian et al. 2024): no critic; A = r - mean of the group's other samples; KL in the reward."""

    name: ClassVar[str] = "rloo"
    advantage_estimator: ClassVar[AdvantageEstimator] = "rloo"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"  # Ahmadian et al. 2024: r(x, y) - beta KL, per sequence


@dataclass(frozen=True)
class DAPO(GroupObjective):
    """DAPO (Yu et al. 2025): GRPO advantages, clip-higher, token-mean loss, dynamic sampling, overlong penalty."""

    name: ClassVar[str] = "dapo"
    advantage_estimator: ClassVar[AdvantageEstimator] = "grpo"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"  # DAPO section 3.3, token-level policy gradient loss
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # DAPO section 2.3: the KL term is removed

    clip_coef: float = 0.2
    """eps_low: the lower clipping range (DAPO: 0.2)."""
    clip_coef_high: float | None = 0.28
    """eps_high: the decoupled upper clipping range (DAPO's clip-higher: 0.28)."""
    dynamic_sampling: bool = True
    """Drop groups whose rewards are all equal and sample more until the batch is full (DAPO section 3.2)."""
    max_sampling_rounds: int = 3
    """Cap on sampling rounds per iteration; past it the batch is topped up with dropped groups (zero advantage)."""
    overlong_cache: int = 4
    """L_cache, text only: completions longer than max-new-tokens minus this lose up to 1 (DAPO eq. 13); 0 = off."""

    def sampling_plan(self) -> SamplingPlan:
        return SamplingPlan(self.group_size, self.dynamic_sampling, self.max_sampling_rounds, self.overlong_cache)

    def validate(self) -> None:
        super().validate()
        check_positive_ints({"--max-sampling-rounds": self.max_sampling_rounds})
        check_non_negative({"--overlong-cache": self.overlong_cache})


OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (Clip, Penalty, FixedKL, NoClip, GRPO, DrGRPO, RLOO, DAPO)
}
"""The one registry: objective name -> config class; the PPO paper's four in its Table 1 order, then the four
critic-free group methods."""


def uses_critic(objective: Objective) -> bool:
    """Whether the objective learns a value function (GAE); the group-relative ones build none."""
    return objective.advantage_estimator == "gae"


def objective_label(objective: Objective) -> str:
    """The report label: the name, plus the value of its defining setting (``clip-0.2``, ``penalty-0.01``)."""
    if objective.label_field is None:
        return objective.name
    return f"{objective.name}-{getattr(objective, objective.label_field):g}"


def objective_from_dict(data: dict) -> Objective:
    """An objective from its ``{"name": ..., **settings}`` form (as in config.json); ``ValueError`` if unknown."""
    fields = dict(data)
    name = fields.pop("name", None)
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name](**fields)
