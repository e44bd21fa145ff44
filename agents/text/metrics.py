"""What a text iteration logs about its completions: scores and task metrics gathered from every process, the
reference KL, reward-hacking signs, the group and dynamic-sampling counts, and the samples written to
``samples.jsonl``. Each function returns the named figures of one metrics block (glossary: docs/metrics.md)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from agents.core.distributed import all_reduce_sum, gather_objects, world_size
from agents.core.objectives import ReferenceKL, SamplingPlan
from agents.text.rollout import SampledBatch, TextRollout


def text_diagnostics(response_ids: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """Reward-hacking signs: mean length, distinct-token ratio and bigram repetition rate of the completions."""
    lengths = response_mask.sum(-1)
    distinct, repeated = [], []
    for ids, n in zip(response_ids.tolist(), lengths.tolist()):
        tokens = ids[: int(n)]
        if not tokens:
            continue
        distinct.append(len(set(tokens)) / len(tokens))
        bigrams = list(zip(tokens, tokens[1:]))
        counts = Counter(bigrams)
        repeated.append(sum(c - 1 for c in counts.values()) / len(bigrams) if bigrams else 0.0)
    return {
        "response_length": float(lengths.float().mean()),
        "distinct_token_ratio": float(np.mean(distinct)) if distinct else float("nan"),
        "repetition_rate": float(np.mean(repeated)) if repeated else float("nan"),
    }


def mean_over_processes(value: torch.Tensor) -> float:
    """The mean of every process's mean of ``value`` (every process holds an equal share of the batch)."""
    return float(np.mean(gather_objects(float(value.mean()))))


def score_metrics(rollout: TextRollout) -> dict[str, float]:
    """``reward``: the mean task score of every process's completions; ``task_<name>``: each task metric's mean."""
    scores = [s for part in gather_objects(rollout.scores.tolist()) for s in part]
    task_metrics: dict[str, list[float]] = {}
    for part in gather_objects(rollout.task_metrics):
        for name, values in part.items():
            task_metrics.setdefault(name, []).extend(values)
    return {
        "reward": float(np.mean(scores)),
        **{f"task_{name}": float(np.mean(values)) for name, values in task_metrics.items()},
    }


def reference_kl_metrics(mean_ref_kl: float, ref_kl_coef: float, placement: ReferenceKL) -> dict[str, float]:
    """The summed KL to the reference per completion, its coefficient, and the part of the reward it took."""
    return {
        "ref_kl": mean_ref_kl,
        "ref_kl_coef": ref_kl_coef,
        "non_score_reward": -ref_kl_coef * mean_ref_kl if placement == "reward" else 0.0,
    }


def group_metrics(rollout: TextRollout, group_size: int) -> dict[str, float]:
    """Group-relative runs: the share of the batch's groups (over every process) whose rewards are all equal, and
    DAPO's mean overlong penalty; nothing for PPO."""
    if group_size == 1:
        return {}
    zero, groups = all_reduce_sum(torch.tensor([rollout.zero_variance_groups, len(rollout.prompts) // group_size]))
    metrics = {"zero_variance_groups": float(zero) / float(groups)}
    if rollout.overlong_penalty is not None:
        metrics["overlong_penalty"] = mean_over_processes(rollout.overlong_penalty)
    return metrics


def sampling_metrics(filled: SampledBatch, plan: SamplingPlan) -> dict[str, float]:
    """Dynamic sampling, over every process: rounds (mean), groups sampled, dropped and put back as fillers."""
    if not plan.drop_zero_variance:
        return {}
    counts = [filled.rounds, filled.groups_sampled, filled.groups_dropped, filled.filler_groups]
    rounds, sampled, dropped, fillers = all_reduce_sum(torch.tensor(counts)).tolist()
    return {
        "sampling_rounds": rounds / world_size(),
        "groups_sampled": sampled,
        "groups_dropped": dropped,
        "filler_groups": fillers,
    }


def sample_rows(raw_prompts: list[str], rollout: TextRollout, count: int) -> list[dict]:
    """The first ``count`` completions with their training prompts and scores, for ``samples.jsonl``."""
    samples = zip(raw_prompts, rollout.completions, rollout.scores.tolist())
    return [{"prompt": p, "completion": c, "score": s} for p, c, s in samples][:count]
