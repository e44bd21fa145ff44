"""``ppo eval`` for text runs: sample completions for the task's held-out prompts and report the task's score
and metrics.

``--base`` evaluates the run's starting model with the same settings, so "before" and "after" come
from one command each.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from transformers.utils.logging import disable_progress_bar

from agents.runs.config import config_from_dict, read_config
from agents.text.actor_critic import POLICY_DIR, sample_responses
from agents.text.config import TextTrainConfig
from agents.text.rollout import decode_completions, encode_prompts, format_prompts, left_pad
from envs.text.models import load_causal_lm
from envs.text.tasks import checked_scores, task_from_config


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
    texts = format_prompts(tokenizer, raw_prompts, config.text.chat_template)
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    generator = torch.Generator().manual_seed(seed)
    completions: list[str] = []
    chunk = config.text.forward_batch
    for start in range(0, len(texts), chunk):
        ids, mask = left_pad(
            encode_prompts(tokenizer, texts[start : start + chunk], config.text.max_prompt_tokens),
            pad_id,
            torch.device("cpu"),
        )
        uniforms = torch.rand(len(ids), config.text.max_new_tokens, generator=generator)
        sampled = sample_responses(lm, ids, mask, uniforms, config.text.temperature, eos_id, pad_id)
        completions += decode_completions(tokenizer, sampled.response_ids, sampled.response_mask, eos_id)
    scores = checked_scores(task, raw_prompts, completions)
    metrics = {name: float(np.mean(values)) for name, values in scores.metrics.items()}
    return TextEvaluation(model_spec, scores.rewards, metrics, list(zip(raw_prompts, completions, scores.rewards))[:3])
