"""The policy objectives and their one registry of names.

An objective is a small frozen dataclass: its settings (which the command line turns into options),
its ``name`` (the subcommand, the run-folder part and the start of its report label), its surrogate
loss and its KL-coefficient controller. ``OBJECTIVES`` maps names to classes; the command line,
run names, ``ppo compare`` presets and ``ppo report`` labels all read it, so adding an objective
means adding one class here and one entry in ``OBJECTIVES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from agents.core.config import check_non_negative, check_positive
from agents.core.kl import AdaptivePenalty, FixedPenalty, KLController
from agents.core.losses import (
    LossAggregation,
    SurrogateInputs,
    clip_surrogate,
    kl_penalty_surrogate,
    unclipped_surrogate,
)

DIAGNOSTIC_CLIP = 0.2  # the paper's epsilon; objectives without clipping count their logged clip fraction against it


@dataclass(frozen=True)
class Clip:
    """PPO-Clip: the clipped surrogate objective (paper eq. 7)."""

    name: ClassVar[str] = "clip"
    label_field: ClassVar[str | None] = "clip_coef"
    uses_beta: ClassVar[bool] = False

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


Objective = Clip | Penalty | FixedKL | NoClip
"""Any objective config."""

OBJECTIVES: dict[str, type[Objective]] = {cls.name: cls for cls in (Clip, Penalty, FixedKL, NoClip)}
"""The one registry: objective name -> config class, in the PPO paper's order (Table 1)."""


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
