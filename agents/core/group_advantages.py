"""Group-relative advantage estimators (GRPO, Dr. GRPO, RLOO) and DAPO's pure helpers.

Every estimator takes a flat ``(N,)`` tensor of outcome rewards, one per sampled response, with
``N = num_groups * G`` and the ``G`` responses to one prompt contiguous (``[g0_0 .. g0_{G-1}, g1_0 ..]``),
and returns ``(N,)`` per-sample advantages; ``per_token`` broadcasts them over each response's tokens.
A group whose rewards are all equal carries no gradient under any of them and gets exactly 0.
``GROUP_ESTIMATORS`` is the one registry of estimator names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

GRPO_EPS = 1e-4  # TRL GRPOTrainer (trl/trainer/grpo_trainer.py @ d2b69d76): advantages / (std_grouped_rewards + 1e-4)


def _float(rewards: torch.Tensor) -> torch.Tensor:
    """Integer or bool rewards become the default float dtype; float rewards keep theirs."""
    return rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())


def group_rewards(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Reshape flat ``(N,)`` rewards, the ``G`` members of a group contiguous, into ``(num_groups, G)``."""
    if group_size < 2:
        raise ValueError(f"group_size is {group_size}: sample at least 2 responses per prompt (G >= 2)")
    if rewards.dim() != 1:
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}: pass one flat (N,) reward per sample")
    if rewards.shape[0] % group_size != 0:
        raise ValueError(
            f"{rewards.shape[0]} rewards do not split into groups of {group_size}: pass num_groups * group_size"
        )
    return rewards.reshape(-1, group_size)


def zero_variance_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Bool ``(num_groups,)``: True where every reward in the group is exactly equal.

    Such a group has ``r_i - mean = 0`` for every member, so it carries no gradient under GRPO, Dr. GRPO
    and RLOO (DAPO section 3.2); callers log the count. Exact equality, not a tolerance: rewards that
    differ at all are informative. (TRL logs the same thing as ``frac_reward_zero_std`` with
    ``torch.isclose(std_grouped_rewards, 0)``.)
    """
    grouped = group_rewards(rewards, group_size)
    return (grouped == grouped[:, :1]).all(dim=1)


def _centred(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """``r_i - mean(r_group)`` as ``(num_groups, G)``, exactly 0 in zero-variance groups."""
    grouped = group_rewards(_float(rewards), group_size)
    flat = zero_variance_groups(rewards, group_size)
    # mean([0.1] * 3) != 0.1 in floating point; force the exact zero a constant group deserves.
    centred = torch.where(flat[:, None], torch.zeros_like(grouped), grouped - grouped.mean(dim=1, keepdim=True))
    return centred


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = GRPO_EPS) -> torch.Tensor:
    """GRPO with outcome supervision (Shao et al. 2024, DeepSeekMath, section 4.1.2).

    ``A_i = (r_i - mean(r_group)) / (std(r_group) + eps)``, the same ``A_i`` for every token of response ``i``.

    ``std`` is the unbiased (Bessel, divide by ``G - 1``) group std and ``eps`` is added to the std, not
    inside the square root: both as in TRL's GRPOTrainer (``rewards.view(-1, num_generations).std(dim=1)``,
    torch's default unbiased std, then ``advantages / (std_grouped_rewards + 1e-4)``; the paper does not say
    which std or eps). A zero-variance group gives exactly 0.

    Shapes: ``rewards`` ``(N,)``, ``N = num_groups * G``; returns ``(N,)`` in the rewards' float dtype.
    """
    centred = _centred(rewards, group_size)
    std = centred.std(dim=1, keepdim=True)  # unbiased, as TRL: std of (r - mean) equals std of r
    return (centred / (std + eps)).reshape(-1)


def dr_grpo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective").

    ``A_i = r_i - mean(r_group)``: GRPO without the division by the group std, which the paper shows
    biases updates towards prompts that are too easy or too hard (question-level difficulty bias).

    Shapes: ``rewards`` ``(N,)``, ``N = num_groups * G``; returns ``(N,)`` in the rewards' float dtype.
    """
    centred = _centred(rewards, group_size)
    return centred.reshape(-1)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024, "Back to Basics"; Kool et al. 2019).

    ``A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean(r_group))``: the baseline for sample ``i``
    is the mean of the other ``G - 1`` samples, so it does not depend on ``r_i`` and the estimate is unbiased.
    The closed form follows from ``mean_{j != i} r_j = (G * mean - r_i) / (G - 1)``. For ``G = 2``,
    ``A_i = r_i - r_j``.

    Shapes: ``rewards`` ``(N,)``, ``N = num_groups * G``; returns ``(N,)`` in the rewards' float dtype.
    """
    centred = _centred(rewards, group_size)
    return (centred * (group_size / (group_size - 1))).reshape(-1)


GroupEstimator = Callable[[torch.Tensor, int], torch.Tensor]


def step_group_advantages(step_returns: torch.Tensor, step_groups: torch.Tensor, eps: float = GRPO_EPS) -> torch.Tensor:
    """GiGPO's step-level relative advantage (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent
    Training", arXiv 2505.10978, section 4.2): the steps that reached the same anchor state (the same ``step_groups``
    id) form a group, and ``A^S_i = (R_i - mean(R_group)) / (std(R_group) + eps)`` of their discounted returns from
    that step on, the std unbiased and ``eps`` added to it as in ``grpo_advantages``. A group of one step, or one whose
    returns are all equal, gives exactly 0.

    Shapes: ``step_returns`` ``(N,)`` float, ``step_groups`` ``(N,)`` int64 ids (any values); returns ``(N,)``.
    """
    _, group = torch.unique(step_groups, return_inverse=True)
    size = torch.bincount(group).to(step_returns.dtype)
    mean = torch.zeros_like(size).index_add_(0, group, step_returns) / size
    some_member = torch.zeros_like(size).index_copy_(0, group, step_returns)
    unequal = torch.zeros_like(size, dtype=torch.bool).index_fill_(0, group[step_returns != some_member[group]], True)
    # exact zeros where a group's returns are all equal (their mean need not round to them), as _centred gives
    centred = torch.where(unequal[group], step_returns - mean[group], torch.zeros_like(step_returns))
    variance = torch.zeros_like(size).index_add_(0, group, centred**2) / (size - 1).clamp(min=1)
    scaled = centred / (variance.sqrt()[group] + eps)
    return torch.where(unequal[group], scaled, torch.zeros_like(scaled))  # no 0 / 0 at eps = 0


GROUP_ESTIMATORS: dict[str, GroupEstimator] = {
    "grpo": grpo_advantages,
    "dr-grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
}
"""The one registry of group-relative estimator names: ``name -> f(rewards (N,), group_size) -> (N,)``."""


class GroupAdvantages(NamedTuple):
    """``advantages`` ``(N,)``; ``zero_variance`` bool ``(num_groups,)``, True for groups that carry no gradient."""

    advantages: torch.Tensor
    zero_variance: torch.Tensor


def group_advantages(rewards: torch.Tensor, group_size: int, estimator: str) -> GroupAdvantages:
    """Advantages by the estimator named in ``GROUP_ESTIMATORS``, with the zero-variance groups to log."""
    if estimator not in GROUP_ESTIMATORS:
        raise ValueError(f"unknown group estimator {estimator!r}: use one of {', '.join(GROUP_ESTIMATORS)}")
    advantages = GROUP_ESTIMATORS[estimator](rewards, group_size)
    return GroupAdvantages(advantages, zero_variance_groups(rewards, group_size))


def per_token(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``A[i, t] = advantages[i] * mask[i, t]``: every valid token of response ``i`` gets ``A_i``, padding 0.

    Shapes: ``advantages`` ``(N,)``, ``mask`` ``(N, T)`` (bool or float, 1 on the response's own tokens);
    returns ``(N, T)`` in the advantages' dtype.
    """
    if advantages.dim() != 1 or mask.dim() != 2 or mask.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} and mask {tuple(mask.shape)}: pass advantages (N,) and mask (N, T)"
        )
    return advantages[:, None] * mask.to(advantages.dtype)


def soft_overlong_penalty(lengths: torch.Tensor, max_length: int, cache_length: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, section 3.4, eq. 13).

    ``R_length(y) = 0``                                   if ``|y| <= L_max - L_cache``
    ``R_length(y) = ((L_max - L_cache) - |y|) / L_cache``  if ``L_max - L_cache < |y| <= L_max``
    ``R_length(y) = -1``                                  if ``|y| > L_max``

    Added to the outcome reward; the ramp reaches -1 at ``|y| = L_max``, so it is continuous. The paper uses
    ``L_max = 20480`` and ``L_cache = 4096`` (16384 expected tokens plus a 4096-token soft cache).

    Shapes: ``lengths`` ``(N,)`` response lengths in tokens (any shape works elementwise); returns the same
    shape in the default float dtype.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"cache_length {cache_length}, max_length {max_length}: choose 0 < cache_length <= max_length")
    lengths = lengths.to(torch.get_default_dtype())
    soft_start = max_length - cache_length
    ramp = (soft_start - lengths) / cache_length
    return torch.where(lengths <= soft_start, torch.zeros_like(lengths), ramp.clamp(min=-1.0))


class SampledGroups(NamedTuple):
    """One round of sampled groups, as ``fill_batch`` sees it."""

    rewards: torch.Tensor
    """Flat ``(k * G,)`` outcome rewards, the ``G`` members of each of the ``k`` groups contiguous."""
    sizes: list[int]
    """``k`` entries: what each group adds to the batch, in the unit of ``wanted`` (text: 1 group; walkers: the
    group's environment steps)."""


class FilledBatch(NamedTuple):
    """What ``fill_batch`` collected; a group is named by ``(round, group_index)``, ``group_index`` indexing the
    groups ``sample_groups`` returned in that round, so the caller gathers the matching samples.

    ``kept``: the groups for the batch in the order collected. ``fillers``: zero-variance groups put back, in the
    order sampled, to fill a batch the cap left short (their advantages are 0: no gradient), so its size stays
    fixed. ``dropped``: every zero-variance group thrown away, fillers included, in the order sampled. Informative
    groups sampled past a full batch are neither kept nor dropped. ``groups_sampled``: groups returned over all
    rounds. ``rounds``: calls made to ``sample_groups``.
    """

    kept: list[tuple[int, int]]
    fillers: list[tuple[int, int]]
    dropped: list[tuple[int, int]]
    groups_sampled: int
    rounds: int

    @property
    def groups_dropped(self) -> int:
        """How many zero-variance groups were thrown away."""
        return len(self.dropped)

    @property
    def hit_cap(self) -> bool:
        """The batch needed fillers: ``max_rounds`` rounds left it short of informative groups."""
        return bool(self.fillers)


def fill_batch(
    sample_groups: Callable[[int], SampledGroups],
    wanted: int,
    group_size: int,
    max_rounds: int,
    drop_zero_variance: bool = True,
) -> FilledBatch:
    """DAPO dynamic sampling (section 3.2), the one driver of both worlds: resample until the kept groups add up to
    ``wanted`` (in the unit of ``SampledGroups.sizes``).

    Each round calls ``sample_groups(missing)``, which samples groups worth at least ``missing`` (or what it can)
    and returns their rewards and sizes; groups whose rewards are all equal are dropped (unless
    ``drop_zero_variance`` is off: then every group counts and one round fills the batch) and the others are kept,
    in order, while the batch is short. It stops when the batch is full or after ``max_rounds`` calls (verl's
    ``filter_groups.max_num_gen_batches``); a batch still short is topped up with dropped groups, in the order
    sampled, while it is short.
    """
    if wanted < 1 or max_rounds < 1:
        raise ValueError(f"wanted {wanted}, max_rounds {max_rounds}: each must be at least 1")
    if group_size < 2:
        raise ValueError(f"group_size is {group_size}: sample at least 2 responses per prompt (G >= 2)")
    kept: list[tuple[int, int]] = []
    dropped: list[tuple[int, int]] = []
    size_of: dict[tuple[int, int], int] = {}
    filled = groups_sampled = rounds = 0
    while filled < wanted and rounds < max_rounds:
        sampled = sample_groups(wanted - filled)
        flat = zero_variance_groups(group_rewards(sampled.rewards, group_size).reshape(-1), group_size)
        if len(sampled.sizes) != flat.shape[0]:
            raise ValueError(f"{flat.shape[0]} groups of rewards but {len(sampled.sizes)} sizes: pass one per group")
        for index, (size, zero_variance) in enumerate(zip(sampled.sizes, flat.tolist())):
            size_of[rounds, index] = size
            if zero_variance and drop_zero_variance:
                dropped.append((rounds, index))
            elif filled < wanted:
                kept.append((rounds, index))
                filled += size
        groups_sampled += len(sampled.sizes)
        rounds += 1
    fillers = []
    for group in dropped:
        if filled >= wanted:
            break
        fillers.append(group)
        filled += size_of[group]
    return FilledBatch(kept, fillers, dropped, groups_sampled, rounds)
