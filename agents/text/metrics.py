"""What a text iteration logs about its completions: scores and task metrics gathered from every process, the
reference KL, reward-hacking signs, the group and dynamic-sampling counts, and the samples written to
``samples.jsonl``. Each function returns the named figures of one metrics block (glossary: docs/metrics.md)."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import torch

from agents.core.advantages import PolicyTokens
from agents.core.distributed import all_reduce_sum, gather_objects, world_size
from agents.core.objectives import ReferenceKL, SamplingPlan
from agents.text.rollout import SampledBatch, TextRollout


def text_diagnostics(rollout: TextRollout) -> dict[str, float]:
    """Reward-hacking signs: mean length, distinct-token ratio and bigram repetition rate of the completions (of a
    dialogue's policy tokens, its turns run together)."""
    response_ids, response_mask = rollout.response_ids, rollout.response_mask
    if rollout.turns is not None:
        tokens = PolicyTokens.of(rollout.turns.policy_mask)
        response_ids, response_mask = tokens.gather(response_ids), tokens.valid.long()
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


def turn_metrics(rollout: TextRollout, critic: bool) -> dict[str, float]:
    """Multi-turn games, over every process's episodes: ``turn_reward_k``, the mean reward of turn k (1 for the
    first) over the episodes that played it; ``turn_advantage_std_k``, the standard deviation of the advantages the
    update receives (before any minibatch whitening) over the policy tokens of turn k; and with a critic
    ``turn_explained_variance_k``, the critic's explained variance ``1 - Var(R - V) / Var(R)`` over the same tokens.
    Nothing for single-turn tasks. (Turns per episode, success and truncation are the ``task_`` metrics.)"""
    turns = rollout.turns
    if turns is None:
        return {}
    max_turns = turns.turn_rewards.shape[1]
    played = (torch.arange(max_turns, device=turns.turns.device) < turns.turns.unsqueeze(1)).float()
    batch = rollout.batch
    in_turn = (turns.turn_index == torch.arange(max_turns, device=played.device).view(-1, 1, 1)).float()  # (K, B, T)
    returns, residuals = batch.returns, batch.returns - batch.old_values
    sums = torch.stack(
        [
            (turns.turn_rewards * played).sum(0),
            played.sum(0),
            in_turn.sum((1, 2)),
            (in_turn * returns).sum((1, 2)),
            (in_turn * returns**2).sum((1, 2)),
            (in_turn * residuals).sum((1, 2)),
            (in_turn * residuals**2).sum((1, 2)),
            (in_turn * batch.advantages).sum((1, 2)),
            (in_turn * batch.advantages**2).sum((1, 2)),
        ]
    )
    reward, episodes, tokens, r, r2, e, e2, a, a2 = all_reduce_sum(sums.double().cpu())
    metrics = {}
    for k in range(max_turns):
        if episodes[k] == 0:
            continue
        metrics[f"turn_reward_{k + 1}"] = float(reward[k] / episodes[k])
        if tokens[k] > 0:
            metrics[f"turn_advantage_std_{k + 1}"] = float(
                (a2[k] / tokens[k] - (a[k] / tokens[k]) ** 2).clamp(min=0).sqrt()
            )
        if critic and tokens[k] > 1:
            variance = r2[k] / tokens[k] - (r[k] / tokens[k]) ** 2
            residual_variance = e2[k] / tokens[k] - (e[k] / tokens[k]) ** 2
            explained = 1.0 - residual_variance / variance if variance > 0 else float("nan")
            metrics[f"turn_explained_variance_{k + 1}"] = float(explained)
    return metrics


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


def reference_kl_metrics(mean_ref_kl: float | None, ref_kl_coef: float, placement: ReferenceKL) -> dict[str, float]:
    """The summed KL to the reference per completion (left out where no reference is run), its coefficient, and
    the part of the reward it took."""
    if mean_ref_kl is None:
        return {"ref_kl_coef": ref_kl_coef, "non_score_reward": 0.0}
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


def sampler_metrics(rollout: TextRollout) -> dict[str, float]:
    """The gap between the sampler's log-probs and the trainer's recomputed ones, over every process: its mean and
    largest ``|log pi_old - log mu|`` and, with a correction, the share of tokens whose ratio was above the cap."""
    if rollout.sampler is None:
        return {}
    parts = gather_objects(rollout.sampler)
    return {
        "sampler_gap_mean": float(np.mean([part.gap_mean for part in parts])),
        "sampler_gap_max": max(part.gap_max for part in parts),
        "sampler_corrected_fraction": float(np.mean([part.corrected_fraction for part in parts])),
    }


def gathered_eval_metrics(
    rewards: list[float], metrics: dict[str, list[float]], lengths: list[int], started: float
) -> dict[str, float]:
    """The held-out figures of this process's share, gathered from every process: ``eval_reward`` (the mean reward),
    ``eval_<name>`` for each metric, ``eval_response_length`` and ``eval_seconds`` since ``started``."""
    parts = gather_objects((rewards, metrics, lengths))
    eval_metrics = {"eval_reward": float(np.mean([r for part, _, _ in parts for r in part]))}
    for name in metrics:
        eval_metrics[f"eval_{name}"] = float(np.mean([v for _, named, _ in parts for v in named[name]]))
    eval_metrics["eval_response_length"] = float(np.mean([n for _, _, part in parts for n in part]))
    eval_metrics["eval_seconds"] = time.perf_counter() - started
    return eval_metrics
