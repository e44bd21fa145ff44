"""Causal language model actor-critic: per-token log-probs and values from one forward pass, KV-cached sampling,
and the frozen reference policy that the KL leash is measured against.

Sequence layout, shared by sampling, the reference and training: each row is a prompt left-padded
to ``P`` tokens followed by a response of ``T`` tokens right-padded after EOS; ``position_ids``
count real tokens only, so padding never shifts positions. The logits that predict response token
``t`` sit at position ``P - 1 + t``, and so does the hidden state whose value head gives V(s_t).
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from agents.core.kl import kl_k3
from agents.core.objectives import uses_critic
from agents.core.policy import Evaluation
from agents.text.config import TextTrainConfig, reference_in_use
from envs.text.models import load_causal_lm, without_quantization

POLICY_DIR = "policy"
"""A finished text run's trained LM, as an ordinary Hugging Face folder inside the run folder."""


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``cumsum(mask) - 1`` clamped at 0: positions of real tokens as if there were no left padding; ``(B, L)``."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def filled_columns(response_mask: torch.Tensor) -> int:
    """How many leading columns of right-padded responses ``(B, T)`` hold a token of some row (at least 1).

    The columns after them are padding in every row: a causal model's earlier positions never read them, so a
    forward over the first ``filled_columns`` gives the same values there as one over all ``T`` (up to rounding)
    while sparing the padding's work (a ``--max-new-tokens 128`` rollout averaging 65 tokens: issue 26)."""
    filled = response_mask.bool().any(0).nonzero()
    return int(filled[-1]) + 1 if len(filled) else 1


def padded_to(values: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``(B, W) -> (B, num_tokens)``: zeros appended after the ``W`` computed columns (padding, masked out later)."""
    return torch.nn.functional.pad(values, (0, num_tokens - values.shape[1]))


def token_log_probs_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``log softmax(logits / temperature)`` at ``tokens`` and the entropy of that distribution;
    ``(..., V), (...) -> (...), (...)`` (``(B, T, V) -> (B, T)``, or ``(N, V) -> (N,)`` for flattened positions).

    The same temperature must be used when sampling and when training, or the ratio does not start at 1.
    The entropy is a diagnostic without gradient: its backward over the whole vocabulary would cost
    as much as the rest of the loss, and RLHF recipes use no entropy bonus (text runs reject ``--ent-coef``).
    """
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    chosen = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


class LMActorCritic(nn.Module):
    """A Hugging Face causal LM with a scalar value head on its last hidden state.

    The value head is fp32 and zero-initialised (lm-human-preferences, TRL), so the
    critic starts at V = 0 and does not disturb early advantages. With ``separate_critic`` the
    value comes from its own copy of the LM (more memory, no interference between the heads).
    With ``critic=False`` (the group-relative objectives) there is no value head at all: no parameters,
    no optimiser state, no hidden states kept for it, and ``value`` is 0.
    """

    def __init__(
        self,
        lm: nn.Module,
        temperature: float = 1.0,
        separate_critic: bool = False,
        critic: bool = True,
    ) -> None:
        super().__init__()
        self.lm = lm
        self.temperature = temperature
        self.value_head: nn.Linear | None = None
        self.critic_lm: nn.Module | None = None
        if critic:
            hidden_size = lm.config.get_text_config().hidden_size
            self.value_head = nn.Linear(hidden_size, 1, dtype=torch.float32)
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)
            self.critic_lm = copy.deepcopy(lm) if separate_critic else None

    def critic_parameter_names(self) -> frozenset[str]:
        """The value head's parameters, and the critic LM's with ``separate_critic``."""
        return frozenset(name for name, _ in self.named_parameters() if name.startswith(("value_head.", "critic_lm.")))

    def forward(self, inputs: dict[str, torch.Tensor]) -> Evaluation:
        """Evaluate whole sequences: ``inputs`` holds ``input_ids``, ``attention_mask`` ``(B, P + T)`` and
        ``response_ids``, ``old_logp`` ``(B, T)``, and for dialogues ``scored_mask`` ``(B, T)`` (the policy's own
        tokens: log-probs and entropies are computed there only, 0 at the game's replies, which are context);
        every output is ``(B, T)``. ``kl`` is the k3 estimate.

        The prompts and responses go through ``continue_prompts`` (each distinct prompt once, the responses through
        its cache, gradients flowing back through both); a separate critic LM reads the whole sequences."""
        response_ids = inputs["response_ids"]
        num_tokens = response_ids.shape[1]
        num_prompt = inputs["input_ids"].shape[1] - num_tokens
        response_mask = inputs["attention_mask"][:, num_prompt:]
        continued = continue_prompts(
            self.lm,
            inputs["input_ids"][:, :num_prompt],
            inputs["attention_mask"][:, :num_prompt],
            response_ids,
            response_mask,
            self.temperature,
            hidden=self.value_head is not None and self.critic_lm is None,
            scored_mask=inputs.get("scored_mask"),
        )
        logp, entropy = continued.logp, continued.entropy
        kl = kl_k3(logp, inputs["old_logp"])
        if self.value_head is None:
            return Evaluation(logp=logp, entropy=entropy, value=torch.zeros_like(logp), kl=kl)
        hidden = continued.hidden
        if self.critic_lm is not None:
            end = num_prompt + filled_columns(response_mask)  # as continue_prompts: no all-padding columns
            attention_mask = inputs["attention_mask"][:, :end]
            hidden = self.critic_lm(
                input_ids=inputs["input_ids"][:, :end],
                attention_mask=attention_mask,
                position_ids=position_ids_from_mask(attention_mask),
                output_hidden_states=True,
                use_cache=False,
            ).hidden_states[-1][:, num_prompt - 1 : -1]
        value = padded_to(self.value_head(hidden.float()).squeeze(-1), num_tokens)
        return Evaluation(logp=logp, entropy=entropy, value=value, kl=kl)


class SampledResponses(NamedTuple):
    """A batch of sampled responses, right-padded after EOS; every tensor ``(B, T)`` except ``ended``."""

    response_ids: torch.Tensor
    response_mask: torch.Tensor
    """1 for generated tokens up to and including EOS."""
    sampled_logp: torch.Tensor
    """log pi(token) as computed while sampling (KV-cached), 0 on padding."""
    ended: torch.Tensor
    """``(B,)`` True where the response emitted EOS within the limit."""


def inverse_cdf_sample(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float) -> torch.Tensor:
    """Sample one token per row from ``softmax(logits / temperature)`` by inverting its CDF at ``uniforms``;
    ``(B, V), (B,) -> (B,)``.

    Drawing the uniforms up front makes a sequence's tokens depend only on its own row of random
    numbers, so a batch and a one-at-a-time loop sample the same tokens.
    """
    cdf = torch.softmax(logits.float() / temperature, dim=-1).cumsum(-1)
    tokens = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(-1)).squeeze(-1)
    return tokens.clamp(max=logits.shape[-1] - 1)


class PrefilledPrompts(NamedTuple):
    """Left-padded prompts run through the LM once, ready to be continued."""

    last_logits: torch.Tensor
    """``(B, V)`` the logits after each prompt's last token: the distribution of the first response token."""
    cache: object
    """The key/value cache of the prompts, one row per prompt, to be continued by single-token or response forwards."""
    last_hidden: torch.Tensor | None
    """``(B, H)`` the last layer's hidden state at each prompt's last token (where V(s_0) is read), if asked for."""


def prefill_prompts(
    lm: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, hidden: bool = False
) -> PrefilledPrompts:
    """One forward over the *distinct* prompts of ``(B, P)`` (a group's G copies of a prompt cost one), keeping only
    the last position's logits, then the cache copied out to every row. Copies of a prompt share their keys and
    values exactly (under autograd their gradients add up in the one distinct row); a distinct prompt's equal what a
    forward of it alone gives, up to rounding."""
    distinct, copy_of = torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True)
    ids, mask = distinct[:, : prompt_ids.shape[1]], distinct[:, prompt_ids.shape[1] :]
    output = lm(
        input_ids=ids,
        attention_mask=mask,
        position_ids=position_ids_from_mask(mask),
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=hidden,
    )
    output.cache.batch_select_indices(copy_of)
    last_hidden = output.hidden_states[-1][copy_of, -1] if hidden else None
    return PrefilledPrompts(output.logits[copy_of, -1], output.cache, last_hidden)


class ContinuedPrompts(NamedTuple):
    """What the LM gives at the ``T`` positions that predict a response's tokens."""

    logp: torch.Tensor
    """``(B, T)`` log pi(response token t | prompt, tokens before t) at the temperature; 0 where the mask is 0."""
    entropy: torch.Tensor
    """``(B, T)`` the entropy of the same distributions (no gradient); 0 where the mask is 0."""
    hidden: torch.Tensor | None
    """``(B, W, H)`` the last layer's hidden states at the first ``W = filled_columns`` of the same positions (the
    state s_t the value head reads)."""


def continue_prompts(
    lm: nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float,
    hidden: bool = False,
    scored_mask: torch.Tensor | None = None,
) -> ContinuedPrompts:
    """The log-probs and entropies of right-padded responses ``(B, T)`` after left-padded prompts ``(B, P)`` (and
    the hidden states that predict them): the distinct prompts prefilled once (``prefill_prompts``), then every
    response but its last token in one forward through their cache. Equal to a forward of the whole sequences up to
    rounding, at the cost of ``distinct prompts x P + B x T`` tokens instead of ``B x (P + T)``; differentiable.

    The vocabulary projection and its softmax run only where ``scored_mask`` is 1 (default: ``response_mask``; a
    dialogue's policy tokens, so not at the game's replies, which are attended to but never scored; the first
    position's, read off the prefill, for every row): Hugging Face's boolean ``logits_to_keep`` flattens the kept
    positions to ``(N, V)``, and the results are scattered back with zeros elsewhere, so a padded position (or a
    reply) costs the layers only; columns that are padding in every row (after ``filled_columns``) are not forwarded
    at all (issue 26)."""
    num_tokens, width = response_ids.shape[1], filled_columns(response_mask)
    response_ids, response_mask = response_ids[:, :width], response_mask[:, :width]
    scored_mask = response_mask if scored_mask is None else scored_mask[:, :width]
    prefilled = prefill_prompts(lm, prompt_ids, prompt_mask, hidden)
    first_logp, first_entropy = token_log_probs_and_entropy(prefilled.last_logits, response_ids[:, 0], temperature)
    first_kept = scored_mask[:, :1].bool()
    logp = torch.where(first_kept, first_logp.unsqueeze(1), 0.0)
    entropy = torch.where(first_kept, first_entropy.unsqueeze(1), 0.0)
    states = prefilled.last_hidden.unsqueeze(1) if hidden else None
    if response_ids.shape[1] > 1:
        mask = torch.cat([prompt_mask, response_mask], dim=1)[:, :-1]
        kept = scored_mask[:, 1:].bool()  # the forward's position t predicts response token t + 1
        output = lm(
            input_ids=response_ids[:, :-1],
            attention_mask=mask,
            position_ids=position_ids_from_mask(mask)[:, prompt_ids.shape[1] :],
            cache=prefilled.cache,
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=kept,
        )
        where = kept.nonzero(as_tuple=True)
        kept_logp, kept_entropy = token_log_probs_and_entropy(output.logits, response_ids[:, 1:][kept], temperature)
        logp = torch.cat([logp, kept_logp.new_zeros(kept.shape).index_put(where, kept_logp)], dim=1)
        entropy = torch.cat([entropy, kept_entropy.new_zeros(kept.shape).index_put(where, kept_entropy)], dim=1)
        if hidden:
            states = torch.cat([states, output.hidden_states[-1]], dim=1)
    return ContinuedPrompts(padded_to(logp, num_tokens), padded_to(entropy, num_tokens), states)


@torch.no_grad()
def sample_responses(
    lm: nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    uniforms: torch.Tensor,
    temperature: float,
    eos_id: int,
    pad_id: int,
) -> SampledResponses:
    """Sample ``T = uniforms.shape[1]`` tokens for each left-padded prompt ``(B, P)`` with the key/value
    cache: one forward of the distinct prompts, then one single-token forward per step over the rows still
    running, so each token costs the same whatever the length, and a finished row (EOS) costs nothing more.
    Later tokens of a finished row are ``pad_id``, masked out. Row ``b``'s tokens depend on its prompt and
    ``uniforms[b]`` only, so any batching of the rows samples the same tokens (up to the rounding of the logits)."""
    batch, num_tokens = uniforms.shape
    device = prompt_ids.device
    prefilled = prefill_prompts(lm, prompt_ids, prompt_mask)
    logits, cache = prefilled.last_logits, prefilled.cache
    attention_mask = prompt_mask.clone()
    next_position = attention_mask.sum(-1, keepdim=True)
    response_ids = torch.full((batch, num_tokens), pad_id, dtype=torch.long, device=device)
    response_mask = torch.zeros(batch, num_tokens, dtype=torch.long, device=device)
    sampled_logp = torch.zeros(batch, num_tokens, device=device)
    running = torch.arange(batch, device=device)  # the rows still sampling, in the order of the cache's rows
    for t in range(num_tokens):
        tokens = inverse_cdf_sample(logits, uniforms[running, t], temperature)
        logp, _ = token_log_probs_and_entropy(logits.unsqueeze(1), tokens.unsqueeze(1), temperature)
        response_ids[running, t] = tokens
        response_mask[running, t] = 1
        sampled_logp[running, t] = logp.squeeze(1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        going_on = tokens != eos_id
        if t == num_tokens - 1 or not going_on.any():
            break
        if not going_on.all():  # drop the finished rows from the cache and from every later forward
            keep = going_on.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            running, tokens = running[keep], tokens[keep]
            attention_mask, next_position = attention_mask[keep], next_position[keep]
        logits = lm(
            input_ids=tokens.unsqueeze(1),
            attention_mask=attention_mask,
            position_ids=next_position,
            cache=cache,
            use_cache=True,
        ).logits[:, -1]
        next_position = next_position + 1
    ended = ((response_ids == eos_id) & response_mask.bool()).any(-1)
    return SampledResponses(response_ids, response_mask, sampled_logp, ended)


@torch.no_grad()
def response_log_probs(
    lm: nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float,
    scored_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """log pi(response token t | prompt, tokens before t) ``(B, T)`` for left-padded prompts ``(B, P)`` and
    right-padded responses ``(B, T)``, by ``continue_prompts`` (0 where ``scored_mask``, default the mask, is 0)."""
    return continue_prompts(
        lm, prompt_ids, prompt_mask, response_ids, response_mask, temperature, scored_mask=scored_mask
    ).logp


class ReferencePolicy:
    """The frozen starting policy the KL leash pulls towards.

    Either an independent deep copy (eval mode, no gradients, never shares storage with the trained
    weights), or, for LoRA, the trained model itself with its adapters disabled, so one copy of the
    base weights serves both.
    """

    def __init__(self, policy_lm: nn.Module, share_base_with_lora: bool = False) -> None:
        self.share_base_with_lora = share_base_with_lora
        if share_base_with_lora:
            self.lm = policy_lm
        else:
            self.lm = copy.deepcopy(policy_lm).eval()
            for parameter in self.lm.parameters():
                parameter.requires_grad_(False)

    def adapters_off(self):
        return self.lm.disable_adapter() if self.share_base_with_lora else contextlib.nullcontext()

    def log_probs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        response_ids: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float,
        scored_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log pi_ref of each response token ``(B, T)``, by ``response_log_probs``."""
        with self.adapters_off():
            return response_log_probs(
                self.lm, prompt_ids, prompt_mask, response_ids, response_mask, temperature, scored_mask
            )


def save_policy_directory(policy: LMActorCritic, tokenizer, directory: Path) -> None:
    """Write the trained LM as an ordinary Hugging Face folder (``AutoModelForCausalLM.from_pretrained`` loads it),
    with LoRA merged, plus ``value_head.pt`` when the policy has a critic."""
    lm = policy.lm
    if hasattr(lm, "merge_and_unload"):
        lm = copy.deepcopy(lm).merge_and_unload()
    if getattr(lm.config, "quantization_config", None) is not None:
        lm = without_quantization(lm)
    directory.mkdir(parents=True, exist_ok=True)
    lm.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if policy.value_head is not None:
        torch.save(policy.value_head.state_dict(), directory / "value_head.pt")


def build_policy(config: TextTrainConfig, device: torch.device) -> tuple[LMActorCritic, ReferencePolicy | None, object]:
    """The trained actor-critic, its frozen reference (None where no KL to it is weighted or logged:
    ``reference_in_use``), and the tokenizer."""
    lm, tokenizer, _ = load_causal_lm(config.text.model)
    if config.text.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(
            lm,
            LoraConfig(
                r=config.text.lora_rank,
                lora_alpha=config.text.lora_alpha,
                lora_dropout=0.0,
                target_modules="all-linear",
            ),
        )
    policy = LMActorCritic(
        lm,
        temperature=config.text.temperature,
        separate_critic=config.text.separate_critic,
        critic=uses_critic(config.objective),
    ).to(device)
    reference = None
    if reference_in_use(config):
        reference = ReferencePolicy(policy.lm, share_base_with_lora=config.text.lora_rank > 0)
    return policy, reference, tokenizer
