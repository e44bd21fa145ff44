"""Collecting text experience: sample completions with the KV cache, score them, shape per-token rewards
with the reference KL, and build a by-sequence PPO batch."""

from __future__ import annotations

from typing import NamedTuple

import torch

from agents.core.advantages import compute_gae, whiten
from agents.core.batch import Minibatch
from agents.core.distributed import all_reduce_sum
from agents.text.actor_critic import LMActorCritic, ReferencePolicy, sample_responses


class TextBatchSettings(NamedTuple):
    """The parts of the text config the rollout reads."""

    max_new_tokens: int
    max_prompt_tokens: int
    temperature: float
    forward_batch: int
    gamma: float
    gae_lambda: float
    eos_penalty: float | None
    whiten_advantages: bool


class TextRollout(NamedTuple):
    """One iteration's completions and the PPO batch built from them."""

    batch: Minibatch
    """By-sequence batch: ``inputs`` hold ``input_ids``/``attention_mask`` ``(B, P + T)``,
    ``response_ids``/``old_logp`` ``(B, T)``."""
    prompts: list[str]
    completions: list[str]
    scores: torch.Tensor
    """``(B,)`` task score per completion, after the EOS penalty: what the last token is rewarded."""
    task_metrics: dict[str, list[float]]
    ref_kl: torch.Tensor
    """``(B,)`` summed per-token KL to the reference, ``sum_t (log pi - log pi_ref)``."""
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    ended: torch.Tensor
    tokens: int
    """Generated tokens in the batch (the env steps of this iteration)."""


def shaped_rewards(kl: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor, ref_kl_coef: float) -> torch.Tensor:
    """Per-token reward ``r_t = -beta_ref * (log pi(y_t) - log pi_ref(y_t))``, plus the score on each
    sequence's last valid token (Ziegler et al. 2019); ``kl, mask (B, T), scores (B,) -> (B, T)``."""
    rewards = -ref_kl_coef * kl * mask
    last = (mask.sum(-1).long() - 1).clamp(min=0)
    rewards[torch.arange(rewards.shape[0]), last] += scores
    return rewards


def left_pad(sequences: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists to one length: ids and attention mask, both ``(B, P)``."""
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, length - len(sequence) :] = torch.tensor(sequence, dtype=torch.long)
        mask[row, length - len(sequence) :] = 1
    return ids.to(device), mask.to(device)


def format_prompts(tokenizer, prompts: list[str], chat_template: bool) -> list[str]:
    """Optionally wrap each prompt as a user turn of the tokenizer's chat template, ready for the assistant's answer."""
    if not chat_template:
        return prompts
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]


def encode_prompts(tokenizer, prompts: list[str], max_prompt_tokens: int) -> list[list[int]]:
    """Token ids of each prompt; a one-line error for an empty prompt or one longer than the limit."""
    encoded = []
    for index, prompt in enumerate(prompts):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"prompt {index} is empty; remove it from the prompts")
        if len(ids) > max_prompt_tokens:
            raise ValueError(
                f"prompt {index} has {len(ids)} tokens, more than --max-prompt-tokens {max_prompt_tokens}: "
                f"{prompt[:60]!r}..."
            )
        encoded.append(ids)
    return encoded


def decode_completions(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor, eos_id: int) -> list[str]:
    """The text of each response, EOS and padding dropped."""
    return [
        tokenizer.decode([t for t in ids[: int(n)] if t != eos_id], skip_special_tokens=True)
        for ids, n in zip(response_ids.tolist(), response_mask.sum(-1).tolist())
    ]


@torch.no_grad()
def collect_text(
    policy: LMActorCritic,
    reference: ReferencePolicy,
    tokenizer,
    prompts: list[str],
    score,
    settings: TextBatchSettings,
    ref_kl_coef: float,
    generator: torch.Generator,
) -> TextRollout:
    """Sample one completion per prompt, score it with ``score(prompts, completions) -> (scores, metrics)``,
    and build the by-sequence batch (GAE over response tokens, advantages whitened with the mask).

    Sampling, the policy's and the reference's forward passes all run ``settings.forward_batch``
    sequences at a time, so memory is bounded whatever the batch size.
    """
    device = policy.value_head.weight.device
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    prompt_ids, prompt_mask = left_pad(encode_prompts(tokenizer, prompts, settings.max_prompt_tokens), pad_id, device)
    uniforms = torch.rand(len(prompts), settings.max_new_tokens, generator=generator).to(device)
    policy.eval()
    chunks = [
        sample_responses(
            policy.lm,
            prompt_ids[i : i + settings.forward_batch],
            prompt_mask[i : i + settings.forward_batch],
            uniforms[i : i + settings.forward_batch],
            settings.temperature,
            eos_id,
            pad_id,
        )
        for i in range(0, len(prompts), settings.forward_batch)
    ]
    response_ids = torch.cat([c.response_ids for c in chunks])
    response_mask = torch.cat([c.response_mask for c in chunks])
    ended = torch.cat([c.ended for c in chunks])
    completions = decode_completions(tokenizer, response_ids, response_mask, eos_id)
    raw_scores, task_metrics = score(prompts, completions)
    scores = torch.tensor(raw_scores, dtype=torch.float32, device=device)
    if settings.eos_penalty is not None:
        scores = torch.where(
            ended, scores, torch.full_like(scores, settings.eos_penalty)
        )  # the "EOS trick" (lm-human-preferences)

    inputs = {
        "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        "response_ids": response_ids,
        "old_logp": torch.zeros(response_ids.shape, device=device),
    }
    mask = response_mask.float()
    old_logp, values, ref_logp = [], [], []
    for i in range(0, len(prompts), settings.forward_batch):
        part = {key: value[i : i + settings.forward_batch] for key, value in inputs.items()}
        evaluation = policy(part)
        old_logp.append(evaluation.logp)
        values.append(evaluation.value)
        ref_logp.append(
            reference.log_probs(part["input_ids"], part["attention_mask"], part["response_ids"], settings.temperature)
        )
    old_logp, values, ref_logp = torch.cat(old_logp) * mask, torch.cat(values) * mask, torch.cat(ref_logp) * mask
    inputs["old_logp"] = old_logp
    kl = (old_logp - ref_logp) * mask
    rewards = shaped_rewards(kl, scores, mask, ref_kl_coef)

    last = (mask.sum(-1).long() - 1).clamp(min=0)
    terminated = torch.zeros_like(mask)
    terminated[torch.arange(len(prompts)), last] = 1.0  # EOS or the token limit ends the episode with its score
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    advantages, returns = compute_gae(
        rewards.T,
        values.T,
        next_values.T,
        terminated.T,
        torch.zeros_like(mask).T,
        mask.T,
        settings.gamma,
        settings.gae_lambda,
    )
    advantages, returns = advantages.T.contiguous(), returns.T.contiguous()
    if settings.whiten_advantages:
        advantages = whiten(advantages, mask, sum_over_processes=all_reduce_sum)  # over every process's batch
    batch = Minibatch(
        inputs=inputs, old_logp=old_logp, advantages=advantages, returns=returns, old_values=values, mask=mask
    )
    return TextRollout(
        batch,
        prompts,
        completions,
        scores,
        task_metrics,
        kl.sum(-1),
        response_ids,
        response_mask,
        ended,
        int(mask.sum()),
    )
