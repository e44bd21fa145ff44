"""Rollout storage: time-major ``(T, B)`` tensors with a validity mask, flattened for the update."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch


class Minibatch(NamedTuple):
    """One gradient step's data. ``inputs`` is what the policy's forward reads; the other fields
    share the mask's shape: ``(N,)`` for transitions, ``(B, T)`` for whole sequences."""

    inputs: dict[str, torch.Tensor]
    old_logp: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor
    mask: torch.Tensor
    ref_logp: torch.Tensor | None = None
    """log pi_ref of the stored actions, where the KL to a reference model is in the loss; else None."""

    def select(self, index: torch.Tensor) -> Minibatch:
        """Rows ``index`` of every tensor along the first dimension."""
        return Minibatch(
            inputs={key: value[index] for key, value in self.inputs.items()},
            old_logp=self.old_logp[index],
            advantages=self.advantages[index],
            returns=self.returns[index],
            old_values=self.old_values[index],
            mask=self.mask[index],
            ref_logp=None if self.ref_logp is None else self.ref_logp[index],
        )

    def of_any_size(self) -> Minibatch:
        """The same minibatch, its first dimension marked dynamic for ``torch.compile``: a step compiled for one
        batch size then serves batches of every size (group rollouts vary from iteration to iteration) instead of
        compiling again for each new size."""
        tensors = [*self.inputs.values(), self.old_logp, self.advantages, self.returns, self.old_values, self.mask]
        for tensor in tensors + ([self.ref_logp] if self.ref_logp is not None else []):
            torch._dynamo.mark_dynamic(tensor, 0)
        return self

    @property
    def size(self) -> int:
        """Number of items along the first dimension (transitions or sequences)."""
        return self.mask.shape[0]


def flatten_time_major(
    inputs: dict[str, torch.Tensor],
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    mask: torch.Tensor,
) -> Minibatch:
    """Merge ``(T, B, ...)`` rollout tensors into a batch of ``T * B`` transitions (by-transition minibatching).

    The valid transitions only are kept, so every row of the result counts.
    """
    valid = mask.reshape(-1).bool()
    return Minibatch(
        inputs={key: value.reshape(-1, *value.shape[2:])[valid] for key, value in inputs.items()},
        old_logp=old_logp.reshape(-1)[valid],
        advantages=advantages.reshape(-1)[valid],
        returns=returns.reshape(-1)[valid],
        old_values=old_values.reshape(-1)[valid],
        mask=torch.ones(int(valid.sum()), dtype=old_logp.dtype, device=old_logp.device),
    )


def minibatch_indices(num_items: int, minibatch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch: a fresh permutation of ``range(num_items)`` cut into ``num_items // minibatch_size`` index tensors.

    Items are transitions or whole sequences, whichever the batch's first dimension holds; the
    caller guarantees ``minibatch_size`` divides ``num_items`` (checked when the config is built).
    """
    permutation = torch.randperm(num_items, generator=generator)
    for start in range(0, num_items - minibatch_size + 1, minibatch_size):
        yield permutation[start : start + minibatch_size]
