"""Collecting text experience: sample completions with the KV cache, score them, and build a by-sequence batch:
GAE over per-token rewards shaped with the reference KL (PPO), or one group-relative advantage per completion
(GRPO, Dr. GRPO, RLOO, DAPO: G completions of each prompt side by side, no critic). A multi-turn dialogue is a
completion whose ``TurnStructure`` says which of its tokens are the policy's: only those carry a loss and an
advantage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from agents.core.advantages import bi_level_gae, discounted_returns, policy_token_gae, reinforce_pp_advantages, whiten
from agents.core.batch import Minibatch
from agents.core.distributed import all_reduce_sum
from agents.core.group_advantages import (
    GROUP_ESTIMATORS,
    SampledGroups,
    dr_grpo_advantages,
    fill_batch,
    grpo_advantages,
    per_token,
    soft_overlong_penalty,
    step_group_advantages,
    zero_variance_groups,
)
from agents.core.objectives import REINFORCE_PP_ESTIMATORS, AdvantageEstimator, GiGPO, ReferenceKL, SamplingPlan
from agents.core.sampler_correction import SamplerCorrection, SamplerCorrectionLevel, SamplerWeights, sampler_weights
from agents.text.actor_critic import LMActorCritic, ReferencePolicy, sample_responses
from agents.text.config import MultiTurnGAE, TextEnvConfig, TextTrainConfig, reference_kl_placement
from envs.text.tokens import decode_completion, encode_prompt, pad_token_id


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
    advantage_estimator: AdvantageEstimator = "gae"
    """``gae`` (critic, per-token rewards) or a group-relative estimator's name."""
    group_size: int = 1
    """G: consecutive completions of one prompt that form a group (group-relative estimators)."""
    reference_kl: ReferenceKL = "reward"
    """Where the KL to the reference goes: the reward, the loss (the batch carries ``ref_logp``) or nowhere."""
    overlong_cache: int = 0
    """DAPO's soft overlong penalty over the last ``overlong_cache`` tokens before the limit; 0 = off."""
    sampling_batch: int = 64
    """Sequences sampled together with one KV cache."""
    turn_gamma: float = 1.0
    """Multi-turn: the discount from a turn's last token to the next turn's first."""
    multi_turn_gae: MultiTurnGAE = "token"
    """Multi-turn, with a critic: ``token`` (GAE over the policy's tokens) or ``bi-level`` (turns, then tokens)."""
    step_weight: float = 0.0
    """GiGPO: the weight of the step-level advantage."""
    sampler_correction: SamplerCorrection = "none"
    """The importance-sampling correction between sampler and trainer (``sampler_weights``)."""
    sampler_correction_level: SamplerCorrectionLevel = "token"
    sampler_correction_cap: float = 2.0

    @classmethod
    def from_config(cls, config: TextTrainConfig) -> TextBatchSettings:
        """The settings of a run: its text options, PPO's gamma and lambda, and its objective's sampling plan."""
        text, ppo, objective = config.text, config.ppo, config.objective
        plan = objective.sampling_plan()
        return cls(
            max_new_tokens=text.max_new_tokens,
            max_prompt_tokens=text.max_prompt_tokens,
            temperature=text.temperature,
            forward_batch=text.forward_batch,
            gamma=ppo.gamma,
            gae_lambda=ppo.gae_lambda,
            eos_penalty=text.eos_penalty,
            whiten_advantages=text.whiten_advantages,
            advantage_estimator=objective.advantage_estimator,
            group_size=plan.group_size,
            reference_kl=reference_kl_placement(config),
            overlong_cache=plan.overlong_cache,
            sampling_batch=text.sampling_batch,
            turn_gamma=text.turn_gamma,
            multi_turn_gae=text.multi_turn_gae,
            step_weight=objective.step_weight if isinstance(objective, GiGPO) else 0.0,
            sampler_correction=text.sampler_correction,
            sampler_correction_level=text.sampler_correction_level,
            sampler_correction_cap=text.sampler_correction_cap,
        )


class TurnStructure(NamedTuple):
    """Which tokens of multi-turn completions are whose, and what each turn earned; ``(B, T)`` like the responses,
    the per-turn fields ``(B, max_turns)``."""

    policy_mask: torch.Tensor
    """1.0 on the policy's tokens, 0.0 on the environment's replies and on padding: the loss mask."""
    turn_ends: torch.Tensor
    """True at the last token of each turn the game scored (where its reward is given)."""
    turn_index: torch.Tensor
    """int64: the turn (0 for the first) each policy token belongs to; -1 off the policy's tokens."""
    turn_rewards: torch.Tensor
    """The game's reward for each scored turn, 0 past the last."""
    turns: torch.Tensor
    """``(B,)`` turns the game scored."""
    success: torch.Tensor
    """``(B,)`` bool: the game was solved."""
    truncated: torch.Tensor
    """``(B,)`` bool: the context filled before the episode ended."""
    episode_seeds: torch.Tensor
    """``(B,)`` int64: the game seed each episode was played from."""

    def token_rewards(self) -> torch.Tensor:
        """``(B, T)``: each scored turn's reward on its last token, 0 elsewhere."""
        rewards = torch.zeros_like(self.policy_mask)
        rows, columns = self.turn_ends.nonzero(as_tuple=True)
        scored = torch.arange(self.turn_rewards.shape[1], device=rewards.device) < self.turns.unsqueeze(1)
        rewards[rows, columns] = self.turn_rewards[scored].to(rewards.dtype)  # both in row-major order
        return rewards

    def rows(self, index: torch.Tensor) -> TurnStructure:
        return TurnStructure(*(field[index] for field in self))


def turn_states(
    turns: TurnStructure, response_ids: torch.Tensor, response_mask: torch.Tensor, group_size: int
) -> torch.Tensor:
    """GiGPO's anchor states: ``(B, K)`` int64 ids (``K = max_turns``), equal for turn k of episode b and turn k' of
    episode b' exactly when both episodes are of one group (one game seed) and every environment reply before those
    turns was the same, token for token (so ``k == k'``). The shipped games echo the move they read in their reply
    (``7 is too low``, ``1 2 3: 1 right in the right place``, ``12*34 = 408``), so equal replies mean an equal game
    state however the policy worded its moves; what the policy wrote is deliberately not part of the state."""
    replies_before = turns.turn_ends.long().cumsum(1)  # replies start after a turn's end: the count of ends so far
    reply = response_mask.bool() & (turns.policy_mask == 0)
    batch, max_turns = turns.turn_rewards.shape
    ids: dict[tuple, int] = {}
    states = torch.zeros(batch, max_turns, dtype=torch.long)
    for b, (tokens, counts, is_reply) in enumerate(zip(response_ids.tolist(), replies_before.tolist(),
                                                       reply.tolist(), strict=True)):  # fmt: skip
        history: list[tuple[int, ...]] = [() for _ in range(max_turns)]
        for token, count, replying in zip(tokens, counts, is_reply, strict=True):
            if replying and count < max_turns:
                history[count] = (*history[count], token)  # reply `count` comes before turn `count` (0-based)
        seen: tuple = ()
        for k in range(max_turns):
            seen = (*seen, history[k])
            states[b, k] = ids.setdefault((b // group_size, seen), len(ids))
    return states.to(response_ids.device)


def gigpo_advantages(
    outcome: torch.Tensor,
    turns: TurnStructure,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    settings: TextBatchSettings,
) -> torch.Tensor:
    """GiGPO (Feng et al. 2025, arXiv 2505.10978, eq. 9) on a batch of dialogues: each token of turn k of episode i
    gets ``A^E_i + omega * A^S_{i,k}``: ``A^E`` GRPO's advantage of the episode's ``outcome`` in its group of G episodes
    of one game seed, ``A^S`` the step advantage (``step_group_advantages``) of the turn's discounted return from it,
    ``R_{i,k} = sum_{j >= k} turn_gamma^(j-k) r_{i,j}``, among the turns in the same state (``turn_states``).
    ``outcome (B,) -> (B, T)``, 0 off the policy's tokens."""
    episode = grpo_advantages(outcome, settings.group_size)
    max_turns = turns.turn_rewards.shape[1]
    scored = torch.arange(max_turns, device=outcome.device) < turns.turns.unsqueeze(1)
    step_returns = discounted_returns(turns.turn_rewards.to(outcome.dtype), scored, settings.turn_gamma)
    states = turn_states(turns, response_ids, response_mask, settings.group_size)
    step = step_group_advantages(step_returns.reshape(-1), states.reshape(-1)).reshape(step_returns.shape)
    index = turns.turn_index.clamp(min=0, max=max_turns - 1)
    per_turn = episode.unsqueeze(1) + settings.step_weight * step
    return per_turn.gather(1, index) * turns.policy_mask


def pad_columns(tensor: torch.Tensor, length: int, value: float) -> torch.Tensor:
    """``(B, T)`` right-padded with ``value`` to ``(B, length)``."""
    return torch.nn.functional.pad(tensor, (0, length - tensor.shape[1]), value=value)


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
    ref_kl: torch.Tensor | None
    """``(B,)`` summed per-token KL to the reference, ``sum_t (log pi - log pi_ref)``; None without a reference."""
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    ended: torch.Tensor
    tokens: int
    """Generated tokens in the batch (the env steps of this iteration)."""
    zero_variance_groups: int = 0
    """Groups of the batch whose rewards are all equal (they carry no gradient); 0 for PPO."""
    overlong_penalty: torch.Tensor | None = None
    """``(B,)`` DAPO's soft overlong penalty, already in ``scores``; None when off."""
    turns: TurnStructure | None = None
    """Multi-turn dialogues' structure (``SampledCompletions.turns``); None for single-turn completions."""
    sampler: SamplerWeights | None = None
    """The gap between the sampler's and the trainer's log-probs, and the correction's weights (None when the
    samples kept no sampler log-probs)."""


class SampledCompletions(NamedTuple):
    """Completions of a list of prompts, scored: the part of a rollout that involves no training forward pass."""

    prompts: list[str]
    prompt_ids: list[list[int]]
    """Each prompt's token ids, unpadded."""
    response_ids: torch.Tensor
    """``(B, T)`` sampled tokens, right-padded after EOS; ``T = max_new_tokens``."""
    response_mask: torch.Tensor
    ended: torch.Tensor
    completions: list[str]
    scores: torch.Tensor
    """``(B,)`` task score, after the EOS penalty and the overlong penalty."""
    task_metrics: dict[str, list[float]]
    overlong_penalty: torch.Tensor | None
    turns: TurnStructure | None = None
    """Multi-turn dialogues: whose each token is and each turn's reward (``scores`` is then the episode's return);
    None for single-turn completions, whose every response token is the policy's."""
    sampled_logp: torch.Tensor | None = None
    """``(B, T)`` the sampler's log-prob of each policy token, kept from the moment of sampling; 0 elsewhere."""

    @property
    def generated_tokens(self) -> int:
        """Tokens the policy generated: a dialogue's replies are the environment's."""
        return int((self.response_mask if self.turns is None else self.turns.policy_mask).sum())

    def rows(self, indices: list[int]) -> SampledCompletions:
        """The completions at ``indices``, in that order."""
        index = torch.tensor(indices, dtype=torch.long, device=self.scores.device)
        return SampledCompletions(
            [self.prompts[i] for i in indices],
            [self.prompt_ids[i] for i in indices],
            self.response_ids[index],
            self.response_mask[index],
            self.ended[index],
            [self.completions[i] for i in indices],
            self.scores[index],
            {name: [values[i] for i in indices] for name, values in self.task_metrics.items()},
            None if self.overlong_penalty is None else self.overlong_penalty[index],
            None if self.turns is None else self.turns.rows(index),
            None if self.sampled_logp is None else self.sampled_logp[index],
        )


def concatenate_samples(parts: list[SampledCompletions]) -> SampledCompletions:
    """Several ``SampledCompletions`` as one, in order (prompts are re-padded when the batch is built; responses of
    unequal lengths, as dialogues have, are right-padded to the longest with id 0, which attention never reads)."""
    metrics: dict[str, list[float]] = {}
    for part in parts:
        for name, values in part.task_metrics.items():
            metrics.setdefault(name, []).extend(values)
    penalties = [part.overlong_penalty for part in parts]
    length = max(part.response_ids.shape[1] for part in parts)

    def columns(tensors: list[torch.Tensor], value: float) -> torch.Tensor:
        return torch.cat([pad_columns(tensor, length, value) for tensor in tensors])

    turns = None
    if parts[0].turns is not None:
        structures = [part.turns for part in parts]
        turns = TurnStructure(
            columns([t.policy_mask for t in structures], 0.0),
            columns([t.turn_ends for t in structures], False),
            columns([t.turn_index for t in structures], -1),
            *(torch.cat(fields) for fields in list(zip(*structures))[3:]),
        )
    return SampledCompletions(
        [p for part in parts for p in part.prompts],
        [ids for part in parts for ids in part.prompt_ids],
        columns([part.response_ids for part in parts], 0),
        columns([part.response_mask for part in parts], 0),
        torch.cat([part.ended for part in parts]),
        [c for part in parts for c in part.completions],
        torch.cat([part.scores for part in parts]),
        metrics,
        None if any(p is None for p in penalties) else torch.cat(penalties),
        turns,
        None if parts[0].sampled_logp is None else columns([part.sampled_logp for part in parts], 0.0),
    )


def shaped_rewards(
    kl: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor, ref_kl_coef: float, turns: TurnStructure | None = None
) -> torch.Tensor:
    """Per-token reward ``r_t = -beta_ref * (log pi(y_t) - log pi_ref(y_t))`` on the policy's tokens (``mask``), plus
    the outcome: single-turn, the score on each sequence's last valid token (Ziegler et al. 2019); multi-turn
    (``turns``), each turn's reward on its last token, and whatever ``scores`` adds to the episode's turn rewards (0
    for the returns themselves; minus the group's mean for REINFORCE++'s baseline) on the last policy token.
    ``kl, mask (B, T), scores (B,) -> (B, T)``."""
    rewards = -ref_kl_coef * kl * mask
    if turns is None:
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        rewards[torch.arange(rewards.shape[0]), last] += scores
        return rewards
    last = mask.shape[1] - 1 - mask.flip(1).argmax(1)  # the last policy token of each row
    rewards = rewards + turns.token_rewards()
    rewards[torch.arange(rewards.shape[0]), last] += scores - turns.turn_rewards.sum(1)
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
    return [encode_prompt(tokenizer, p, max_prompt_tokens, f"--max-prompt-tokens {max_prompt_tokens}") for p in prompts]


def decode_completions(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """The text of each response, EOS and padding dropped."""
    lengths = response_mask.sum(-1).tolist()
    return [decode_completion(tokenizer, ids[: int(n)]) for ids, n in zip(response_ids.tolist(), lengths)]


@torch.no_grad()
def sample_completions(
    policy: LMActorCritic, tokenizer, prompts: list[str], score, settings: TextBatchSettings, generator: torch.Generator
) -> SampledCompletions:
    """Sample one completion per prompt (``settings.sampling_batch`` sequences at a time, with the KV cache) and
    score it with ``score(prompts, completions) -> (scores, metrics)``, then apply the EOS and overlong penalties."""
    device = next(policy.parameters()).device
    eos_id, pad_id = tokenizer.eos_token_id, pad_token_id(tokenizer)
    encoded = encode_prompts(tokenizer, prompts, settings.max_prompt_tokens)
    prompt_ids, prompt_mask = left_pad(encoded, pad_id, device)
    uniforms = torch.rand(len(prompts), settings.max_new_tokens, generator=generator).to(device)
    policy.eval()
    chunks = [
        sample_responses(
            policy.lm,
            prompt_ids[i : i + settings.sampling_batch],
            prompt_mask[i : i + settings.sampling_batch],
            uniforms[i : i + settings.sampling_batch],
            settings.temperature,
            eos_id,
            pad_id,
        )
        for i in range(0, len(prompts), settings.sampling_batch)
    ]
    response_ids = torch.cat([c.response_ids for c in chunks])
    response_mask = torch.cat([c.response_mask for c in chunks])
    ended = torch.cat([c.ended for c in chunks])
    sampled_logp = torch.cat([c.sampled_logp for c in chunks])
    completions = decode_completions(tokenizer, response_ids, response_mask)
    raw_scores, task_metrics = score(prompts, completions)
    scores = torch.tensor(raw_scores, dtype=torch.float32, device=device)
    if settings.eos_penalty is not None:
        scores = torch.where(
            ended, scores, torch.full_like(scores, settings.eos_penalty)
        )  # the "EOS trick" (lm-human-preferences)
    overlong = None
    if settings.overlong_cache > 0:  # DAPO eq. 13, with L_max the token limit
        lengths = response_mask.sum(-1)
        overlong = soft_overlong_penalty(lengths, settings.max_new_tokens, settings.overlong_cache).to(scores)
        scores = scores + overlong
    return SampledCompletions(
        prompts, encoded, response_ids, response_mask, ended, completions, scores, task_metrics, overlong,
        sampled_logp=sampled_logp,
    )  # fmt: skip


@torch.no_grad()
def build_text_batch(
    policy: LMActorCritic,
    reference: ReferencePolicy | None,
    tokenizer,
    samples: SampledCompletions,
    settings: TextBatchSettings,
    ref_kl_coef: float,
) -> TextRollout:
    """The by-sequence batch of ``samples``: old log-probs, values and reference log-probs, then advantages.
    Without a ``reference`` (its KL weighs nothing: ``reference_in_use``) its forwards are skipped and the KL is 0.

    PPO (``gae``): per-token rewards ``-ref_kl_coef * (log pi - log pi_ref)`` plus the score on the last token,
    GAE with the critic's values, advantages whitened over every process's batch.
    Group-relative: each completion's outcome reward ``score - ref_kl_coef * sum_t (log pi - log pi_ref)`` (KL in
    the reward) or ``score`` (KL in the loss, or nowhere) goes through the estimator over its group of
    ``group_size`` consecutive completions, and every token of the completion gets that advantage.
    REINFORCE++: PPO's per-token rewards (the baseline variant's score less its group's mean) without a critic, each
    token's advantage its discounted return, whitened over every process's batch.
    """
    device = samples.scores.device
    prompt_ids, prompt_mask = left_pad(samples.prompt_ids, pad_token_id(tokenizer), device)
    response_ids, response_mask, scores = samples.response_ids, samples.response_mask, samples.scores
    size = len(samples.prompts)
    inputs = {
        "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        "response_ids": response_ids,
        "old_logp": torch.zeros(response_ids.shape, device=device),
    }
    turns = samples.turns
    mask = response_mask.float() if turns is None else turns.policy_mask  # a dialogue's replies carry no loss
    if turns is not None:  # nor log-probs: the replies are context, scored nowhere
        inputs["scored_mask"] = turns.policy_mask
    policy.eval()
    old_logp, values, ref_logp = [], [], []
    for i in range(0, size, settings.forward_batch):
        part = {key: value[i : i + settings.forward_batch] for key, value in inputs.items()}
        evaluation = policy(part)
        old_logp.append(evaluation.logp)
        values.append(evaluation.value)
        if reference is not None:
            chunk = slice(i, i + settings.forward_batch)
            ref_logp.append(
                reference.log_probs(
                    prompt_ids[chunk], prompt_mask[chunk], response_ids[chunk], response_mask[chunk],
                    settings.temperature, part.get("scored_mask"),
                )
            )  # fmt: skip
    old_logp, values = torch.cat(old_logp) * mask, torch.cat(values) * mask
    inputs["old_logp"] = old_logp
    ref_logp = None if reference is None else torch.cat(ref_logp) * mask
    kl = torch.zeros_like(mask) if ref_logp is None else (old_logp - ref_logp) * mask
    in_reward = ref_kl_coef if settings.reference_kl == "reward" else 0.0
    turn_ends = torch.zeros_like(mask) if turns is None else turns.turn_ends

    zero_variance = 0
    if settings.advantage_estimator == "gae":
        rewards = shaped_rewards(kl, scores, mask, in_reward, turns)
        gae = bi_level_gae if settings.multi_turn_gae == "bi-level" else policy_token_gae
        advantages, returns = gae(
            rewards, values, mask, turn_ends, settings.gamma, settings.gae_lambda, settings.turn_gamma
        )  # the last policy token is terminal: EOS, the token limit or the game's end ends the episode
        if settings.whiten_advantages:
            advantages = whiten(advantages, mask, sum_over_processes=all_reduce_sum)  # over every process's batch
    elif settings.advantage_estimator in REINFORCE_PP_ESTIMATORS:
        baseline = settings.advantage_estimator == "reinforce++-baseline"
        outcome = dr_grpo_advantages(scores, settings.group_size) if baseline else scores  # score - group mean
        rewards = shaped_rewards(kl, outcome, mask, in_reward, turns)
        advantages = reinforce_pp_advantages(
            rewards, mask, settings.gamma, all_reduce_sum, turn_ends, settings.turn_gamma
        )
        returns = torch.zeros_like(mask)
        zero_variance = int(zero_variance_groups(scores, settings.group_size).sum())
    elif settings.advantage_estimator == "gigpo":  # multi-turn games only (validate_game_text_config)
        outcome = scores - in_reward * kl.sum(-1)
        advantages = gigpo_advantages(outcome, turns, response_ids, response_mask, settings)
        returns = torch.zeros_like(mask)
        zero_variance = int(zero_variance_groups(outcome, settings.group_size).sum())
    else:
        outcome = scores - in_reward * kl.sum(-1)  # the sequence-level KL penalty of RLOO (Ahmadian et al. 2024)
        estimator = GROUP_ESTIMATORS[settings.advantage_estimator]
        advantages = per_token(estimator(outcome, settings.group_size), mask)
        returns = torch.zeros_like(mask)
        zero_variance = int(zero_variance_groups(outcome, settings.group_size).sum())
    sampler = None
    if samples.sampled_logp is not None:  # weight each token by pi_old / mu where sampler and trainer differ
        sampler = sampler_weights(
            old_logp, samples.sampled_logp, mask, settings.sampler_correction, settings.sampler_correction_level,
            settings.sampler_correction_cap,
        )  # fmt: skip
        if settings.sampler_correction != "none":
            advantages = advantages * sampler.weights
    batch = Minibatch(
        inputs=inputs,
        old_logp=old_logp,
        advantages=advantages,
        returns=returns,
        old_values=values,
        mask=mask,
        ref_logp=ref_logp if settings.reference_kl == "loss" else None,
    )
    return TextRollout(
        batch,
        samples.prompts,
        samples.completions,
        scores,
        samples.task_metrics,
        None if ref_logp is None else kl.sum(-1),
        response_ids,
        response_mask,
        samples.ended,
        int(mask.sum()),
        zero_variance,
        samples.overlong_penalty,
        turns,
        sampler,
    )


class SampledBatch(NamedTuple):
    """The iteration's completions (whole groups) and how they were sampled."""

    samples: SampledCompletions
    rounds: int
    """Sampling rounds this iteration (at most the cap; 1 without dynamic sampling)."""
    groups_sampled: int
    groups_dropped: int
    """Groups whose scores were all equal, thrown away."""
    filler_groups: int
    """Dropped groups put back to fill the batch because the cap was hit (zero advantage: no gradient)."""
    generated_tokens: int
    """Tokens generated over every round, dropped groups included: what the iteration cost."""


def sample_batch(
    sample_groups: Callable[[int], SampledCompletions], groups_wanted: int, plan: SamplingPlan
) -> SampledBatch:
    """The iteration's completions: ``sample_groups(k)`` samples ``k`` prompts ``plan.group_size`` times side by
    side. With dynamic sampling (DAPO, Yu et al. 2025, section 3.2) the core's ``fill_batch`` drives it, as it drives
    the walkers': groups whose scores are all equal are dropped and more are sampled until ``groups_wanted`` remain
    or ``plan.max_sampling_rounds`` rounds are done; past the cap the batch is topped up with dropped groups, whose
    advantages are exactly 0, so its size (and every process's share) stays fixed. Otherwise one call fills it."""
    if not plan.drop_zero_variance:
        samples = sample_groups(groups_wanted)
        return SampledBatch(samples, 1, groups_wanted, 0, 0, samples.generated_tokens)
    group_size = plan.group_size
    rounds: list[SampledCompletions] = []

    def sample_round(missing: int) -> SampledGroups:
        rounds.append(sample_groups(missing))
        return SampledGroups(rounds[-1].scores, [1] * (len(rounds[-1].prompts) // group_size))

    filled = fill_batch(sample_round, groups_wanted, group_size, plan.max_sampling_rounds)

    def group(round_index: int, group_index: int) -> SampledCompletions:
        first = group_index * group_size
        return rounds[round_index].rows(list(range(first, first + group_size)))

    return SampledBatch(
        concatenate_samples([group(r, g) for r, g in filled.kept + filled.fillers]),
        filled.rounds,
        filled.groups_sampled,
        filled.groups_dropped,
        len(filled.fillers),
        sum(part.generated_tokens for part in rounds),
    )


@dataclass
class PromptDraws:
    """Which training prompts the next groups take: uniform draws with replacement from ``rng``, or with
    ``shuffled_passes`` each prompt once per pass, the passes in orders drawn from ``rng`` (TRL's
    ``RepeatSampler``, trl/trainer/utils.py). ``order`` and ``position`` are the current pass and how far it
    has been taken: checkpointed, so a resumed run draws what the uninterrupted one would."""

    count: int
    rng: np.random.Generator
    shuffled_passes: bool = False
    order: list[int] = field(default_factory=list)
    position: int = 0

    def __call__(self, size: int) -> np.ndarray:
        """``(size,)`` prompt indices."""
        if not self.shuffled_passes:
            return self.rng.integers(self.count, size=size)
        drawn: list[int] = []
        while len(drawn) < size:
            if self.position == len(self.order):
                self.order, self.position = self.rng.permutation(self.count).tolist(), 0
            take = min(size - len(drawn), len(self.order) - self.position)
            drawn.extend(self.order[self.position : self.position + take])
            self.position += take
        return np.array(drawn, dtype=np.int64)


@dataclass
class PromptGroups:
    """Draws training prompts (``draw_prompts``) and samples each ``settings.group_size`` times side by side
    (``generator``), scored by ``score``; remembers each formatted prompt's training prompt for the logged
    samples."""

    policy: LMActorCritic
    tokenizer: object
    train_prompts: list[str]
    chat_template: bool
    score: Callable
    """``score(prompts, completions) -> (scores, metrics)``."""
    settings: TextBatchSettings
    draw_prompts: PromptDraws
    generator: torch.Generator
    raw_prompt_of: dict[str, str] = field(default_factory=dict)

    def __call__(self, groups: int) -> SampledCompletions:
        drawn = self.draw_prompts(groups)
        raw = [self.train_prompts[i] for i in np.repeat(drawn, self.settings.group_size)]
        prompts = format_prompts(self.tokenizer, raw, self.chat_template)
        self.raw_prompt_of.update(zip(prompts, raw))
        return sample_completions(self.policy, self.tokenizer, prompts, self.score, self.settings, self.generator)

    def training_prompts(self, prompts: list[str]) -> list[str]:
        """The training prompt of each of ``prompts`` (formatted ones sampled since the last call), then forget."""
        raw = [self.raw_prompt_of.get(p, p) for p in prompts]
        self.raw_prompt_of.clear()
        return raw

    def logged_rows(self, rollout: TextRollout, count: int) -> list[dict]:
        """The first ``count`` completions with their training prompts and scores, for ``samples.jsonl``."""
        samples = zip(self.training_prompts(rollout.prompts), rollout.completions, rollout.scores.tolist())
        return [{"prompt": p, "completion": c, "score": s} for p, c, s in samples][:count]


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
    eos_id, pad_id = tokenizer.eos_token_id, pad_token_id(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    uniforms = torch.rand(len(raw_prompts), text.max_new_tokens, generator=generator)[rows]
    completions: list[str] = []
    lengths: list[int] = []
    for start in range(0, len(texts), text.sampling_batch):
        encoded = encode_prompts(tokenizer, texts[start : start + text.sampling_batch], text.max_prompt_tokens)
        ids, mask = left_pad(encoded, pad_id, device)
        chunk = uniforms[start : start + text.sampling_batch].to(device)
        sampled = sample_responses(lm, ids, mask, chunk, text.temperature, eos_id, pad_id)
        completions += decode_completions(tokenizer, sampled.response_ids, sampled.response_mask)
        lengths += sampled.response_mask.sum(-1).tolist()
    return HeldoutCompletions(completions, lengths)
