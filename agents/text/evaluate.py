"""``ppo eval`` for text runs: sample completions for the task's held-out prompts and report the task's score
and metrics.

``--base`` evaluates the run's starting model with the same settings, so "before" and "after" come
from one command each.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from transformers.utils.logging import disable_progress_bar

from agents.core.distributed import rank, world_size
from agents.runs.checkpoint import CheckpointError, checkpoint_path, load_checkpoint
from agents.runs.config import config_from_dict, read_config
from agents.text.actor_critic import POLICY_DIR, build_policy
from agents.text.config import TextEnvConfig, TextTrainConfig
from agents.text.dialogue import heldout_episodes
from agents.text.metrics import gathered_eval_metrics
from agents.text.proxy import run_task
from agents.text.rollout import heldout_completions
from envs.text.games import game_factory, is_game_config
from envs.text.models import load_causal_lm
from envs.text.tasks import Task, checked_scores


class TextEvaluation(NamedTuple):
    """Scores of the evaluation completions."""

    model: str
    scores: list[float]
    metrics: dict[str, float]
    """Mean of each per-completion metric the task reports (e.g. accuracy)."""
    samples: list[tuple[str, str, float]]
    """The first few (prompt, completion, score)."""


class LoadedEvaluation(NamedTuple):
    """What evaluating a text run needs: its config, the model to sample, its tokenizer and the task."""

    config: TextTrainConfig
    model_spec: str
    lm: torch.nn.Module
    tokenizer: object
    task: Task | None
    """None for a multi-turn game (built by ``game_factory(config.text.task)``)."""


def load_evaluation(run_dir: Path, base: bool) -> LoadedEvaluation:
    """The run's trained policy (its ``policy/`` folder; for a run that has not finished, the weights of its
    latest checkpoint), or with ``base`` the model it started from."""
    saved = read_config(run_dir)
    if saved.get("kind", "mujoco") != TextTrainConfig.kind:
        raise ValueError(f"{run_dir} is a MuJoCo run; text evaluation needs a `ppo train text` run")
    config = config_from_dict(TextTrainConfig, saved)
    disable_progress_bar()
    if base or (Path(run_dir) / POLICY_DIR).is_dir():
        model_spec = config.text.model if base else str(Path(run_dir) / POLICY_DIR)
        lm, tokenizer, _ = load_causal_lm(model_spec)
    else:
        lm, tokenizer, iteration = checkpointed_lm(Path(run_dir), config)
        model_spec = f"{checkpoint_path(Path(run_dir))} (iteration {iteration}; the run has not finished)"

    def starting_model():  # for a proxy reward that is not cached: fitted again on the model the run started from
        return (lm, tokenizer) if base else load_causal_lm(config.text.model)[:2]

    task = None if is_game_config(config.text.task) else run_task(config.text, starting_model)
    return LoadedEvaluation(config, model_spec, lm, tokenizer, task)


def checkpointed_lm(run_dir: Path, config: TextTrainConfig) -> tuple[torch.nn.Module, object, int]:
    """The policy's LM with the trainable weights of the run's latest checkpoint (built as training builds it, so
    LoRA runs get their adapters), its tokenizer and the checkpoint's iteration; one-line ``CheckpointError`` when
    there is no checkpoint or it does not fit."""
    state = load_checkpoint(run_dir)
    policy, _, tokenizer = build_policy(config, torch.device("cpu"))
    trainable = {name: p for name, p in policy.named_parameters() if p.requires_grad}
    missing = set(trainable) - set(state.get("trainable", {}))
    if missing:
        raise CheckpointError(
            f"{checkpoint_path(run_dir)} does not fit the run's model ({len(missing)} trainable tensors missing)"
        )
    with torch.no_grad():
        for name, tensor in trainable.items():
            tensor.copy_(state["trainable"][name])
    return policy.lm.eval(), tokenizer, int(state["iteration"])


def evaluate_text_run(run_dir: Path, prompts: int, seed: int, base: bool) -> TextEvaluation:
    """Sample one completion for each of the first ``prompts`` eval prompts of the run's task and score them; for a
    game, play its first ``prompts`` held-out episodes (the score is an episode's return)."""
    loaded = load_evaluation(run_dir, base)
    if loaded.task is None:
        new_game = game_factory(loaded.config.text.task)
        played = heldout_episodes(loaded.lm, loaded.tokenizer, new_game, loaded.config.text, seed, prompts)
        metrics = {name: float(np.mean(values)) for name, values in played.task_metrics.items()}
        returns = played.scores.tolist()
        return TextEvaluation(loaded.model_spec, returns, metrics, list(zip(played.prompts, played.completions,
                                                                             returns))[:3])  # fmt: skip
    raw_prompts = loaded.task.prompts("eval")[:prompts]
    completions = heldout_completions(loaded.lm, loaded.tokenizer, raw_prompts, loaded.config.text, seed).completions
    scores = checked_scores(loaded.task, raw_prompts, completions)
    metrics = {name: float(np.mean(values)) for name, values in scores.metrics.items()}
    samples = list(zip(raw_prompts, completions, scores.rewards))[:3]
    return TextEvaluation(loaded.model_spec, scores.rewards, metrics, samples)


class BestOfN(NamedTuple):
    """Best-of-n sampling on held-out prompts: the completion with the highest task reward of n samples."""

    n: int
    kl: float
    """``best_of_n_kl(n)``: the KL of best-of-n sampling to the sampled policy, in nats."""
    reward: float
    """Mean task reward of the chosen completions: the score that chose them (a learned proxy, or a checker)."""
    metrics: dict[str, float]
    """Mean of each task metric of the chosen completions (``gold_lexicon``, ``accuracy``, ...)."""


def best_of_n_kl(n: int) -> float:
    """``KL(best-of-n || pi) = log n - (n - 1) / n`` nats, the analytic figure of Stiennon et al. 2020 (an upper
    bound on the true KL, Beirami et al. 2024): 0 for n = 1."""
    return math.log(n) - (n - 1) / n


def best_of_n_sizes(largest: int) -> list[int]:
    """1, 2, 4, ... up to ``largest`` (which ends the list even when it is not a power of 2)."""
    sizes = [2**k for k in range(largest.bit_length()) if 2**k < largest]
    return [*sizes, largest]


def best_of_n(run_dir: Path, prompts: int, seed: int, base: bool, largest: int) -> list[BestOfN]:
    """Sample ``largest`` completions for each of the first ``prompts`` held-out prompts (sample k with noise
    from ``seed + k``, so sample 0 is ``evaluate_text_run``'s) and, for each n of ``best_of_n_sizes``, keep the
    first n samples' best by task reward (the first on ties): the non-RL baseline of RLHF (Stiennon et al. 2020)."""
    loaded = load_evaluation(run_dir, base)
    raw_prompts = loaded.task.prompts("eval")[:prompts]
    samples = []
    for k in range(largest):
        completions = heldout_completions(loaded.lm, loaded.tokenizer, raw_prompts, loaded.config.text, seed + k)
        samples.append(checked_scores(loaded.task, raw_prompts, completions.completions))
    rewards = np.array([scores.rewards for scores in samples])  # (largest, prompts)
    results = []
    for n in best_of_n_sizes(largest):
        chosen = rewards[:n].argmax(axis=0)  # argmax keeps the first of equal rewards
        picked = range(len(raw_prompts))
        metrics = {
            name: float(np.mean([samples[chosen[i]].metrics[name][i] for i in picked])) for name in samples[0].metrics
        }
        results.append(BestOfN(n, best_of_n_kl(n), float(np.mean(rewards[chosen, picked])), metrics))
    return results


def heldout_metrics(lm, tokenizer, task: Task, text: TextEnvConfig, seed: int) -> dict[str, float]:
    """``--eval-every``: the task's first ``--eval-prompts`` held-out prompts, split over the processes (noise for
    all of them drawn once from ``seed``, so the figures do not depend on the number of processes), scored by
    the task: ``eval_reward`` (the raw task reward), ``eval_<metric>`` for each task metric,
    ``eval_response_length`` and ``eval_seconds``."""
    started = time.perf_counter()
    prompts = task.prompts("eval")[: text.eval_prompts]
    share = slice(rank(), None, world_size())
    sampled = heldout_completions(lm, tokenizer, prompts, text, seed, share)
    scores = checked_scores(task, prompts[share], sampled.completions)
    return gathered_eval_metrics(scores.rewards, scores.metrics, sampled.lengths, started)
