"""The policy objectives and their one registry of names.

An objective is a small frozen dataclass: its settings (which the command line turns into options),
its ``name`` (the subcommand, the run-folder part and the start of its report label), its surrogate
loss, its KL-coefficient controller and its recipe: which advantage estimator it uses (GAE with a critic,
or a group-relative one without), how it aggregates the loss over tokens and where its recipe puts the
KL to a reference model. ``OBJECTIVES`` maps names to classes; the command line, run names, ``ppo compare``
presets and ``ppo report`` labels all read it, so adding an objective means adding one class here and one
entry in ``OBJECTIVES``.

The PPO paper's four (clip, penalty, fixed-kl, no-clip) learn a critic and use GAE. The four after it (grpo,
dr-grpo, rloo, dapo) drop the critic: each sample's advantage is its outcome reward against the others of its
group (G samples from one prompt, or G episodes from one initial state), then PPO-Clip's surrogate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

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


@dataclass(frozen=True)
class Clip:
    """PPO-Clip: the clipped surrogate objective (paper eq. 7)."""

    name: ClassVar[str] = "clip"
    label_field: ClassVar[str | None] = "clip_coef"
    uses_beta: ClassVar[bool] = False
    advantage_estimator: ClassVar[AdvantageEstimator] = "gae"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"

    clip_coef: float = 0.2
    """Clipping range epsilon: ratios outside [1 - eps, 1 + eps] get no gradient (paper: 0.2)."""
    clip_coef_high: float | None = None
    """Upper range: clip to [1 - clip_coef, 1 + this] (DAPO's clip-higher: 0.28); None = clip_coef, symmetric."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return clip_surrogate(inputs, self.clip_coef, self.clip_coef_high, how)

    def kl_controller(self) -> KLController:
        return FixedPenalty(beta=0.0)

    @property
    def diagnostic_clip_coef(self) -> float:
        """The epsilon the logged clip fraction counts against."""
        return self.clip_coef

    def validate(self) -> None:
        check_positive({"--clip-coef": self.clip_coef})
        if self.clip_coef_high is not None:
            check_positive({"--clip-coef-high": self.clip_coef_high})


@dataclass(frozen=True)
class Penalty:
    """PPO-Penalty: KL-penalised surrogate with the paper's adaptive coefficient (section 4)."""

    name: ClassVar[str] = "penalty"
    label_field: ClassVar[str | None] = "kl_target"
    uses_beta: ClassVar[bool] = True
    advantage_estimator: ClassVar[AdvantageEstimator] = "gae"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"

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
class FixedKL:
    """KL-penalised surrogate with a constant coefficient (the paper's "fixed KL" ablation)."""

    name: ClassVar[str] = "fixed-kl"
    label_field: ClassVar[str | None] = "beta"
    uses_beta: ClassVar[bool] = True
    advantage_estimator: ClassVar[AdvantageEstimator] = "gae"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"

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
class NoClip:
    """Plain importance-sampled surrogate, no clipping or penalty (the paper's first ablation)."""

    name: ClassVar[str] = "no-clip"
    label_field: ClassVar[str | None] = None
    uses_beta: ClassVar[bool] = False
    advantage_estimator: ClassVar[AdvantageEstimator] = "gae"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"

    clip_fraction_reference: float = DIAGNOSTIC_CLIP
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return unclipped_surrogate(inputs, how)

    def kl_controller(self) -> KLController:
        return FixedPenalty(beta=0.0)

    @property
    def diagnostic_clip_coef(self) -> float:
        return self.clip_fraction_reference

    def validate(self) -> None:
        return None


def clipped_surrogate(
    objective: GRPO | DrGRPO | RLOO | DAPO, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation
) -> torch.Tensor:
    """The group methods' surrogate: PPO-Clip's, with their ``clip_coef`` and ``clip_coef_high``."""
    del beta
    return clip_surrogate(inputs, objective.clip_coef, objective.clip_coef_high, how)


def no_kl_coefficient(objective: GRPO | DrGRPO | RLOO | DAPO) -> KLController:
    """The group methods have no KL-to-the-old-policy coefficient (beta stays 0)."""
    del objective
    return FixedPenalty(beta=0.0)


def own_clip_coef(objective: GRPO | DrGRPO | RLOO | DAPO) -> float:
    """The epsilon the logged clip fraction counts against: the objective's own."""
    return objective.clip_coef


def check_group_objective(objective: GRPO | DrGRPO | RLOO | DAPO) -> None:
    """``ConfigError`` for a group size below 2 or a bad clip range."""
    if objective.group_size < 2:
        raise ConfigError(f"--group-size must be at least 2 (a group compares its samples), got {objective.group_size}")
    check_positive({"--clip-coef": objective.clip_coef})
    if objective.clip_coef_high is not None:
        check_positive({"--clip-coef-high": objective.clip_coef_high})


@dataclass(frozen=True)
class GRPO:
    """GRPO (Shao et al. 2024): no critic, A = (r - group mean) / group std, clipped surrogate, reference KL in loss."""

    name: ClassVar[str] = "grpo"
    label_field: ClassVar[str | None] = "group_size"
    uses_beta: ClassVar[bool] = False
    advantage_estimator: ClassVar[AdvantageEstimator] = "grpo"
    recipe_aggregation: ClassVar[LossAggregation] = "sequence-mean"  # DeepSeekMath eq. 21: 1/G sum_i 1/|o_i| sum_t
    recipe_reference_kl: ClassVar[ReferenceKL] = "loss"  # DeepSeekMath eq. 21: - beta D_KL[pi_theta || pi_ref], k3

    group_size: int = 8
    """G: completions per prompt (text) or episodes per initial state (walkers) that share a baseline."""
    clip_coef: float = 0.2
    """Clipping range epsilon of the surrogate (DeepSeekMath: 0.2)."""
    clip_coef_high: float | None = None
    """Upper range: clip to [1 - clip_coef, 1 + this]; None = clip_coef, symmetric."""

    surrogate = clipped_surrogate
    kl_controller = no_kl_coefficient
    diagnostic_clip_coef = property(own_clip_coef)
    validate = check_group_objective


@dataclass(frozen=True)
class DrGRPO:
    """Dr. GRPO (Liu et al. 2025): GRPO without the std division and with a constant-length loss, no reference KL."""

    name: ClassVar[str] = "dr-grpo"
    label_field: ClassVar[str | None] = "group_size"
    uses_beta: ClassVar[bool] = False
    advantage_estimator: ClassVar[AdvantageEstimator] = "dr-grpo"
    recipe_aggregation: ClassVar[LossAggregation] = "constant-length"  # Liu et al. 2025, eq. 3: sum / (G * max len)
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # Liu et al. 2025 train with beta = 0

    group_size: int = 8
    """G: completions per prompt (text) or episodes per initial state (walkers) that share a baseline."""
    clip_coef: float = 0.2
    """Clipping range epsilon of the surrogate."""
    clip_coef_high: float | None = None
    """Upper range: clip to [1 - clip_coef, 1 + this]; None = clip_coef, symmetric."""

    surrogate = clipped_surrogate
    kl_controller = no_kl_coefficient
    diagnostic_clip_coef = property(own_clip_coef)
    validate = check_group_objective


@dataclass(frozen=True)
class RLOO:
    """RLOO (Ahmadian et al. 2024): no critic; A = r - mean of the group's other samples; KL in the reward."""

    name: ClassVar[str] = "rloo"
    label_field: ClassVar[str | None] = "group_size"
    uses_beta: ClassVar[bool] = False
    advantage_estimator: ClassVar[AdvantageEstimator] = "rloo"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"  # Ahmadian et al. 2024: r(x, y) - beta KL, per sequence

    group_size: int = 8
    """G: completions per prompt (text) or episodes per initial state (walkers) that share a baseline."""
    clip_coef: float = 0.2
    """Clipping range epsilon of the surrogate (one epoch of on-policy data barely clips)."""
    clip_coef_high: float | None = None
    """Upper range: clip to [1 - clip_coef, 1 + this]; None = clip_coef, symmetric."""

    surrogate = clipped_surrogate
    kl_controller = no_kl_coefficient
    diagnostic_clip_coef = property(own_clip_coef)
    validate = check_group_objective


@dataclass(frozen=True)
class DAPO:
    """DAPO (Yu et al. 2025): GRPO advantages, clip-higher, token-mean loss, dynamic sampling, overlong penalty."""

    name: ClassVar[str] = "dapo"
    label_field: ClassVar[str | None] = "group_size"
    uses_beta: ClassVar[bool] = False
    advantage_estimator: ClassVar[AdvantageEstimator] = "grpo"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"  # DAPO section 3.3, token-level policy gradient loss
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # DAPO section 2.3: the KL term is removed

    group_size: int = 8
    """G: completions per prompt (text) or episodes per initial state (walkers) that share a baseline."""
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

    surrogate = clipped_surrogate
    kl_controller = no_kl_coefficient
    diagnostic_clip_coef = property(own_clip_coef)

    def validate(self) -> None:
        check_group_objective(self)
        check_positive_ints({"--max-sampling-rounds": self.max_sampling_rounds})
        check_non_negative({"--overlong-cache": self.overlong_cache})


Objective = Clip | Penalty | FixedKL | NoClip | GRPO | DrGRPO | RLOO | DAPO
"""Any objective config."""

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
