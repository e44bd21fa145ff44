"""The policy objectives and their one registry of names.

An objective is a small frozen dataclass: its settings (which the command line turns into options),
its ``name`` (the subcommand, the run-folder part and the start of its report label), its surrogate
loss, its KL-coefficient controller and its recipe: which advantage estimator it uses (GAE with a critic,
or a group-relative one without), how it aggregates the loss over tokens and where its recipe puts the
KL to a reference model. ``OBJECTIVES`` maps names to classes; the command line, run names, ``ppo compare``
presets and ``ppo report`` labels all read it, so adding an objective means adding one class here and one
entry in ``OBJECTIVES``. What an objective asks of the rollout (groups, dynamic sampling, an overlong penalty)
it says through one method, ``sampling_plan``, which the loops read; no loop names an objective's own knobs.

The PPO paper's four (clip, penalty, fixed-kl, no-clip) learn a critic and use GAE; dual-clip adds a lower bound
for negative advantages. The four after it (grpo, dr-grpo, rloo, dapo) drop the critic: each sample's advantage
is its outcome reward against the others of its group (G samples from one prompt, or G episodes from one initial
state), then PPO-Clip's surrogate. Round 3 adds the policy losses that replace that surrogate on group
advantages (gspo, gspo-token, gmpo: sequence-level ratios; cispo: a clipped, detached weight; sapo: a soft gate)
and REINFORCE++ (reinforce++, reinforce++-baseline: per-token discounted returns whitened over the batch).
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
    cispo_surrogate,
    clip_surrogate,
    dual_clip_surrogate,
    gmpo_surrogate,
    gspo_surrogate,
    gspo_token_surrogate,
    kl_penalty_surrogate,
    sapo_surrogate,
    unclipped_surrogate,
)

DIAGNOSTIC_CLIP = 0.2  # the paper's epsilon; objectives without clipping count their logged clip fraction against it

AdvantageEstimator = Literal["gae", "grpo", "dr-grpo", "rloo", "reinforce++", "reinforce++-baseline", "gigpo"]
"""``gae``: a learned critic and GAE; ``grpo``, ``dr-grpo``, ``rloo``: group-relative
(``agents/core/group_advantages.py``); ``reinforce++`` (``-baseline``): per-token discounted returns, whitened over
the batch (the baseline variant centres each group's outcomes first); ``gigpo``: GRPO's episode advantage plus a
step-level one over the turns that reached the same state (multi-turn games only). Only ``gae`` learns a critic."""
ReferenceKL = Literal["reward", "loss", "none"]
"""Where the KL to a reference model goes (text): a per-token penalty in the reward (PPO-RLHF), the k3 estimate in
the loss with coefficient beta (GRPO), or nowhere (Dr. GRPO, DAPO)."""
REFERENCE_KL_COEF: dict[ReferenceKL, float] = {"reward": 0.2, "loss": 0.04, "none": 0.0}
"""beta_ref by placement when --ref-kl-coef is not given: Ziegler et al. 2019 (reward), DeepSeekMath (loss)."""


def reference_kl_coef_at(placement: ReferenceKL, given: float | None) -> float:
    """beta_ref where the KL goes: 0 where it goes nowhere, else ``given`` (--ref-kl-coef) or the placement's
    default (``REFERENCE_KL_COEF``)."""
    if placement == "none":
        return 0.0
    return given if given is not None else REFERENCE_KL_COEF[placement]


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
    sequence_level: ClassVar[bool] = False
    """Whether the surrogate reads whole sequences (a ratio per sequence): a text batch's rows are completions, and
    walkers then batch whole episodes, one row each, in minibatches of whole episodes."""

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
class DualClip(Clip):
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729): PPO-Clip, and for A < 0 the objective bounded below by
    ``c A``: ``max(min(r A, clip(r) A), c A)``, so a bad action whose ratio grew far past 1 stops pulling."""

    name: ClassVar[str] = "dual-clip"
    label_field: ClassVar[str | None] = "dual_clip"

    dual_clip: float = 3.0
    """c > 1: the lower bound c A on the objective of negative advantages (Ye et al. 2020: 3)."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return dual_clip_surrogate(inputs, self.clip_coef, self.clip_coef_high, self.dual_clip, how)

    def validate(self) -> None:
        super().validate()
        if not self.dual_clip > 1:
            raise ConfigError(f"--dual-clip must be > 1 (Ye et al. 2020 use 3), got {self.dual_clip}")


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
class GroupSampled(Objective):
    """What every critic-free objective shares: groups of G samples (G completions of one prompt, G episodes from
    one initial state) and GRPO's advantages unless it says otherwise; its surrogate is its own."""

    label_field: ClassVar[str | None] = "group_size"
    advantage_estimator: ClassVar[AdvantageEstimator] = "grpo"

    group_size: int = 8
    """G: completions per prompt (text) or episodes per initial state (walkers) that share a baseline."""

    def sampling_plan(self) -> SamplingPlan:
        return SamplingPlan(group_size=self.group_size)

    def validate(self) -> None:
        if self.group_size < 2:
            raise ConfigError(f"--group-size must be at least 2 (a group compares its samples), got {self.group_size}")


@dataclass(frozen=True)
class GroupObjective(GroupSampled):
    """The critic-free group methods with a clip range (as TorchRL's ``ClipPPOLoss(PPOLoss)``): each sample's
    advantage its outcome reward against the rest of its group of G, then PPO-Clip's surrogate with the objective's
    own clip range."""

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

    def validate(self) -> None:
        super().validate()
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


@dataclass(frozen=True)
class GSPO(GroupObjective):
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): GRPO's advantages, one importance ratio per sequence,
    ``s_i = exp((1/|y_i|) sum_t log r_i,t)``, clipped to [1 - 3e-4, 1 + 4e-4] in PPO-Clip's ``min``; each sequence
    weighs the same; no reference KL. On walkers the sequence is an episode."""

    name: ClassVar[str] = "gspo"
    recipe_aggregation: ClassVar[LossAggregation] = "sequence-mean"  # GSPO section 4.1: 1/G sum_i, a term per sequence
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # GSPO trains without a KL term (TRL's GSPO recipe: beta 0)
    sequence_level: ClassVar[bool] = True

    clip_coef: float = 3e-4
    """eps_low of the sequence ratio (GSPO paper v2, section 5.1: 3e-4)."""
    clip_coef_high: float | None = 4e-4
    """eps_high of the sequence ratio (GSPO paper v2, section 5.1: 4e-4); None = clip_coef."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return gspo_surrogate(inputs, self.clip_coef, self.clip_coef_high, how)

    @property
    def diagnostic_clip_coef(self) -> float:
        return DIAGNOSTIC_CLIP  # the logged clip fraction counts token ratios; GSPO's range bounds sequence ratios


@dataclass(frozen=True)
class GSPOToken(GSPO):
    """GSPO-token (Zheng et al. 2025, section 4.3): GSPO's clipped sequence ratio as the value of every token's
    ratio, ``s_i,t = sg[s_i] pi(y_t) / sg[pi(y_t)]``, so per-token advantages can differ; with one advantage per
    sequence (every group objective here) it equals GSPO in value and gradient."""

    name: ClassVar[str] = "gspo-token"

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return gspo_token_surrogate(inputs, self.clip_coef, self.clip_coef_high, how)


@dataclass(frozen=True)
class GMPO(GroupObjective):
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): GRPO's advantages times the geometric mean of the token ratios,
    each clipped pessimistically in log space to [-0.4, 0.4] (ratios in [e^-0.4, e^0.4]); no reference KL. On
    walkers the sequence is an episode."""

    name: ClassVar[str] = "gmpo"
    recipe_aggregation: ClassVar[LossAggregation] = "sequence-mean"  # GMPO: 1/G sum_i A_i (prod_t r_i,t)^(1/|o_i|)
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # callsys/GMPO scripts/qwen2.5-math-7b-gmpo.sh: --beta 0
    sequence_level: ClassVar[bool] = True

    clip_coef: float = 0.4
    """eps_low in log space: log-ratios below -eps_low are clipped (callsys/GMPO's --cliprange 0.4)."""
    clip_coef_high: float | None = None
    """eps_high in log space; None = clip_coef, symmetric (GMPO: e^0.4)."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return gmpo_surrogate(inputs, self.clip_coef, self.clip_coef_high, how)

    @property
    def diagnostic_clip_coef(self) -> float:
        return DIAGNOSTIC_CLIP  # the logged fraction counts ratios off [0.8, 1.2]; GMPO's range is in log space


@dataclass(frozen=True)
class CISPO(GroupSampled):
    """CISPO (MiniMax 2025, MiniMax-M1, arXiv 2506.13585): GRPO's advantages in ``-sg(min(r, max_weight)) A log pi``:
    the importance weight is clipped and detached, so no token loses its gradient; token-mean loss, no reference KL
    (MiniMax-M1 builds on DAPO's recipe)."""

    name: ClassVar[str] = "cispo"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"  # MiniMax-M1 section 3.1: 1 / sum_i |o_i|, all tokens
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # MiniMax-M1 follows DAPO: no KL term

    max_weight: float = 5.0
    """Upper bound of the detached weight, sg(min(r, max_weight)); no lower bound, as MiniMax-M1 (5: ScaleRL, arXiv
    2510.13786, TRL's recommended epsilon_high for cispo)."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return cispo_surrogate(inputs, self.max_weight, how)

    def validate(self) -> None:
        super().validate()
        if not self.max_weight > 1:
            raise ConfigError(f"--max-weight must be > 1 (an on-policy ratio of 1 must pass), got {self.max_weight}")


@dataclass(frozen=True)
class SAPO(GroupSampled):
    """SAPO (soft adaptive policy optimization, arXiv 2511.20347; TRL 1.16 ``loss_type="sapo"``): GRPO's advantages
    with the soft gate ``sigmoid(tau (r - 1)) 4 / tau`` in place of the clipped ratio, tau_pos for A > 0 and tau_neg
    otherwise; sequence-mean loss, no reference KL (TRL's default beta 0)."""

    name: ClassVar[str] = "sapo"
    recipe_aggregation: ClassVar[LossAggregation] = "sequence-mean"  # TRL aggregates sapo as grpo: per sequence
    recipe_reference_kl: ClassVar[ReferenceKL] = "none"  # TRL GRPOConfig: beta 0.0 by default

    temperature_pos: float = 1.0
    """tau_pos: temperature of the gate where A > 0 (TRL sapo_temperature_pos: 1.0)."""
    temperature_neg: float = 1.05
    """tau_neg: temperature where A <= 0, larger so negative updates fade sooner (TRL sapo_temperature_neg: 1.05)."""

    def surrogate(self, inputs: SurrogateInputs, beta: torch.Tensor, how: LossAggregation) -> torch.Tensor:
        del beta
        return sapo_surrogate(inputs, self.temperature_pos, self.temperature_neg, how)

    def validate(self) -> None:
        super().validate()
        check_positive({"--temperature-pos": self.temperature_pos, "--temperature-neg": self.temperature_neg})


REINFORCE_PP_ESTIMATORS = ("reinforce++", "reinforce++-baseline")
"""The advantage estimators of REINFORCE++: per-token discounted returns whitened over the batch."""


@dataclass(frozen=True)
class ReinforcePP(GroupObjective):
    """REINFORCE++ (Hu et al. 2025, arXiv 2501.03262): no critic; each token's advantage is its discounted return
    of per-token rewards (the outcome on the last token, the k1 reference KL on every token), whitened over the
    global batch; PPO-Clip's surrogate, token-mean. It samples groups of G like the group methods, for equal
    sampling in comparisons, but its advantage reads no group."""

    name: ClassVar[str] = "reinforce++"
    advantage_estimator: ClassVar[AdvantageEstimator] = "reinforce++"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"  # REINFORCE++ (OpenRLHF): token-level PPO loss
    recipe_reference_kl: ClassVar[ReferenceKL] = "reward"  # REINFORCE++ section 3: the k1 KL in each token's reward


@dataclass(frozen=True)
class ReinforcePPBaseline(ReinforcePP):
    """REINFORCE++-baseline (Hu et al. 2025): REINFORCE++ with each group's mean outcome reward subtracted before
    the returns are taken (walkers: each step's reward less the group's mean reward at that step), then whitened
    over the global batch."""

    name: ClassVar[str] = "reinforce++-baseline"
    advantage_estimator: ClassVar[AdvantageEstimator] = "reinforce++-baseline"


@dataclass(frozen=True)
class GiGPO(GroupObjective):
    """GiGPO (Feng et al. 2025, arXiv 2505.10978), multi-turn games only: the G episodes of one game seed are GRPO's
    episode group, the turns of those episodes that reached the same state form step groups, and every token of a
    turn gets ``A^E + step_weight * A^S`` (episode and step advantages, each group-normalised); clipped surrogate."""

    name: ClassVar[str] = "gigpo"
    advantage_estimator: ClassVar[AdvantageEstimator] = "gigpo"
    recipe_aggregation: ClassVar[LossAggregation] = "token-mean"  # verl-agent's GiGPO recipe: loss_agg_mode token-mean
    recipe_reference_kl: ClassVar[ReferenceKL] = "loss"  # verl-agent's GiGPO recipe: use_kl_loss, k3 (low_var_kl)

    step_weight: float = 1.0
    """omega: the weight of the step-level advantage (GiGPO, eq. 9: 1)."""

    def validate(self) -> None:
        super().validate()
        if not self.step_weight >= 0:
            raise ConfigError(f"--step-weight must be >= 0, got {self.step_weight}")


OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls
    for cls in (Clip, Penalty, FixedKL, NoClip, DualClip, GRPO, DrGRPO, RLOO, DAPO)
    + (GSPO, GSPOToken, GMPO, CISPO, SAPO, ReinforcePP, ReinforcePPBaseline, GiGPO)
}
"""The one registry: objective name -> config class; the PPO paper's four in its Table 1 order and dual-clip, then
the critic-free methods: the four group methods of round 2, then round 3's policy losses and REINFORCE++, then
GiGPO's step groups for multi-turn games."""


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
