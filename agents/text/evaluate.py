"""``ppo eval`` for text runs: sample completions for the task's held-out prompts and report the task's score
and metrics.

``--base`` evaluates the run's starting model with the same settings, so "before" and "after" come
from one command each.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from transformers.utils.logging import disable_progress_bar

from agents.core.distributed import gather_objects, rank, world_size
from agents.runs.config import config_from_dict, read_config
from agents.text.actor_critic import POLICY_DIR, sample_responses
from agents.text.config import TextEnvConfig, TextTrainConfig
from agents.text.rollout import decode_completions, encode_prompts, format_prompts, left_pad
from envs.text.models import load_causal_lm
from envs.text.tasks import Task, checked_scores, task_from_config


class TextEvaluation(NamedTuple):
    """Scores of the evaluation completions."""

    model: str
    scores: list[float]
    metrics: dict[str, float]
    """Mean of each per-completion metric the task reports (e.g. accuracy)."""
    samples: list[tuple[str, str, float]]
    """The first few (prompt, completion, score)."""


def evaluate_text_run(run_dir: Path, prompts: int, seed: int, base: bool) -> TextEvaluation:
    """Sample one completion for each of the first ``prompts`` eval prompts of the run's task and score them."""
    saved = read_config(run_dir)
    if saved.get("kind", "mujoco") != TextTrainConfig.kind:
        raise ValueError(f"{run_dir} is a MuJoCo run; text evaluation needs a `ppo train text` run")
    config = config_from_dict(TextTrainConfig, saved)
    model_spec = config.text.model if base else str(Path(run_dir) / POLICY_DIR)
    if not base and not (Path(run_dir) / POLICY_DIR).is_dir():
        raise FileNotFoundError(
            f"{run_dir} has no {POLICY_DIR}/ yet (it is written when training finishes); "
            "pass --base to evaluate the starting model"
        )
    disable_progress_bar()
    lm, tokenizer, _ = load_causal_lm(model_spec)
    task = task_from_config(config.text.task)
    raw_prompts = task.prompts("eval")[:prompts]
    completions = heldout_completions(lm, tokenizer, raw_prompts, config.text, seed).completions
    scores = checked_scores(task, raw_prompts, completions)
    metrics = {name: float(np.mean(values)) for name, values in scores.metrics.items()}
    return TextEvaluation(model_spec, scores.rewards, metrics, list(zip(raw_prompts, completions, scores.rewards))[:3])


class HeldoutCompletions(NamedTuple):
    completions: list[str]
    lengths: list[int]
    """Generated tokens of each completion, its EOS included."""


@torch.no_grad()
def heldout_completions(
    lm, tokenizer, raw_prompts: list[str], text: TextEnvConfig, seed: int, rows: slice = slice(None)
) -> HeldoutCompletions:
    """One completion for each of ``raw_prompts[rows]``, sampled as training samples (template, token limit,
    temperature) with noise for all of ``raw_prompts`` drawn from ``seed`` alone: a prompt's completion depends
    on the model, the prompts and the seed, not on ``rows`` or the batching."""
    texts = format_prompts(tokenizer, raw_prompts, text.chat_template)[rows]
    device = next(lm.parameters()).device
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    generator = torch.Generator().manual_seed(seed)
    uniforms = torch.rand(len(raw_prompts), text.max_new_tokens, generator=generator)[rows]
    completions: list[str] = []
    lengths: list[int] = []
    for start in range(0, len(texts), text.forward_batch):
        ids, mask = left_pad(
            encode_prompts(tokenizer, texts[start : start + text.forward_batch], text.max_prompt_tokens), pad_id, device
        )
        chunk = uniforms[start : start + text.forward_batch].to(device)
        sampled = sample_responses(lm, ids, mask, chunk, text.temperature, eos_id, pad_id)
        completions += decode_completions(tokenizer, sampled.response_ids, sampled.response_mask, eos_id)
        lengths += sampled.response_mask.sum(-1).tolist()
    return HeldoutCompletions(completions, lengths)


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
    parts = gather_objects((scores.rewards, scores.metrics, sampled.lengths))
    metrics = {"eval_reward": float(np.mean([r for rewards, _, _ in parts for r in rewards]))}
    for name in scores.metrics:
        metrics[f"eval_{name}"] = float(np.mean([v for _, named, _ in parts for v in named[name]]))
    metrics["eval_response_length"] = float(np.mean([n for _, _, ns in parts for n in ns]))
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics
