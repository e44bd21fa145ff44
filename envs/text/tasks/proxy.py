"""A learned proxy of a task's checker, for the over-optimisation experiment (Gao et al. 2022): a logistic head on
all-MiniLM-L6-v2 embeddings of prompt + completion, fitted to completions the checker labelled (score >= 0.5 is
right), then used as the training reward while the checker is logged as gold. Training on the checker itself is the
control.

``fit_proxy`` fits the head on labelled completions and measures it on the completions of held-out prompts;
``ProxyRewardTask`` wraps the checked task and scores with the head. Where the labelled completions come from (the
starting policy's samples) is the trainer's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from envs.text.tasks.base import Task, TaskError, TaskScores, check_split, checked_scores
from envs.text.tasks.minilm import MINILM_MAX_TOKENS, MiniLMEncoder, logistic_head, train_logistic_head

RIGHT = 0.5  # a checker score at or above this labels the completion right (reasoning-gym gives partial credit)
HELDOUT_EVERY = 5  # every 5th distinct prompt's completions are held out: 20 %, the proxy's test set


class ProxyReport(NamedTuple):
    """How well the proxy predicts the checker on completions of prompts it was not fitted on."""

    balanced_accuracy: float
    """Mean of the accuracies on right and on wrong held-out completions (of the classes present; 0.5 = chance)."""
    accuracy: float
    """Share of held-out completions labelled as the checker labels them (logit > 0 means right)."""
    heldout_completions: int
    train_completions: int
    right_share: float
    """Share of all labelled completions the checker called right."""


class ProxyHead(NamedTuple):
    """The fitted head, ``logit = weight . e(prompt + completion) + bias``."""

    weight: list[float]
    bias: float
    report: ProxyReport


def proxy_labels(scores: Sequence[float]) -> torch.Tensor:
    """1.0 where the checker's score is at least ``RIGHT``, else 0.0: (n,)."""
    return (torch.tensor(list(scores), dtype=torch.float32) >= RIGHT).float()


def fit_proxy(
    prompts: Sequence[str], completions: Sequence[str], scores: Sequence[float], encoder: MiniLMEncoder
) -> ProxyHead:
    """Fit the head on the completions of every prompt but each ``HELDOUT_EVERY``-th distinct one, with the classes
    weighted to balance (``n_wrong / n_right`` on the right ones), and measure it on the rest. A one-line
    ``TaskError`` when the labels hold one class only, or a split has no completion."""
    labels = proxy_labels(scores)
    right = int(labels.sum())
    if right in (0, len(labels)):
        kind = "right" if right else "wrong"
        raise TaskError(
            f"the checker labelled all {len(labels)} proxy completions {kind}, so a proxy cannot learn to tell them "
            "apart; sample more (--proxy-completions), change the temperature, or pick a task it sometimes solves"
        )
    distinct = list(dict.fromkeys(prompts))
    heldout_prompts = set(distinct[::HELDOUT_EVERY])
    heldout = torch.tensor([prompt in heldout_prompts for prompt in prompts])
    if heldout.all() or not heldout.any():
        raise TaskError(
            f"the proxy needs completions of at least 2 distinct prompts to hold some out, got {len(distinct)}"
        )
    train_labels = labels[~heldout]
    train_right = float(train_labels.sum())
    if train_right in (0.0, float(len(train_labels))):
        raise TaskError("the proxy's training completions hold one class only; sample more (--proxy-completions)")
    texts = [prompt + completion for prompt, completion in zip(prompts, completions)]
    embeddings = encoder.embed_many(texts, MINILM_MAX_TOKENS)  # after every check: embedding is the slow part
    head = train_logistic_head(
        embeddings[~heldout], train_labels, positive_weight=(len(train_labels) - train_right) / train_right
    )
    predicted = (head(embeddings[heldout]).squeeze(-1) > 0).float()
    truth = labels[heldout]
    per_class = [float((predicted[truth == c] == c).float().mean()) for c in (0.0, 1.0) if (truth == c).any()]
    report = ProxyReport(
        balanced_accuracy=sum(per_class) / len(per_class),
        accuracy=float((predicted == truth).float().mean()),
        heldout_completions=int(heldout.sum()),
        train_completions=int((~heldout).sum()),
        right_share=right / len(labels),
    )
    return ProxyHead(head.weight[0].tolist(), float(head.bias), report)


class ProxyRewardTask:
    """``gold`` (a task with a checker) scored by a learned proxy instead: ``rewards`` are the proxy's logits; the
    metrics are the checker's own plus ``proxy_reward`` and ``gold_reward`` (the checker's reward), so a policy
    that games the proxy (proxy up, gold flat or down) shows in the logs."""

    def __init__(self, gold: Task, head: ProxyHead, encoder: MiniLMEncoder) -> None:
        self.gold = gold
        self.name = gold.name
        self.encoder = encoder
        self.head = logistic_head(head.weight, head.bias)
        self.report = head.report

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return self.gold.prompts(split)

    @torch.no_grad()
    def proxy(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        """The proxy's logit for each completion, from one batched encoder forward."""
        if not completions:
            return []
        texts = [prompt + completion for prompt, completion in zip(prompts, completions)]
        return self.head(self.encoder.embed(texts, MINILM_MAX_TOKENS)).squeeze(-1).tolist()

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        gold = checked_scores(self.gold, prompts, completions)
        proxy = self.proxy(prompts, completions)
        return TaskScores(rewards=proxy, metrics={**gold.metrics, "proxy_reward": proxy, "gold_reward": gold.rewards})
