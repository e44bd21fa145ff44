"""Between text and token ids, the same way for the single-sequence environment and the batched rollout: the
padding id, a prompt's ids (checked against the length limit) and a completion's text (EOS dropped)."""

from __future__ import annotations

from collections.abc import Sequence


def pad_token_id(tokenizer) -> int:
    """The tokenizer's padding id, or its EOS id when it has none (GPT-2's tokenizer has no pad token)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def encode_prompt(tokenizer, prompt: str, max_prompt_tokens: int, limit_name: str) -> list[int]:
    """Token ids of ``prompt``, no special tokens added; a one-line ``ValueError`` for an empty prompt or one longer
    than ``max_prompt_tokens`` (``limit_name`` is how the caller's user sets that limit)."""
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("a prompt is empty: remove it from the prompts")
    if len(ids) > max_prompt_tokens:
        raise ValueError(
            f"prompt {prompt[:60]!r} has {len(ids)} tokens, longer than {limit_name}: shorten it or raise the limit"
        )
    return ids


def decode_completion(tokenizer, ids: Sequence[int]) -> str:
    """The text of a completion's token ids, its EOS (and any special token) dropped."""
    return tokenizer.decode([t for t in ids if t != tokenizer.eos_token_id], skip_special_tokens=True)
