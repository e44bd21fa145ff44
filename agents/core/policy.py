"""The contract between the PPO core and a policy: ``ppo_update`` only ever calls ``policy(inputs)``.

``ActorCritic`` is the annotation of the policy at the core's call sites (``ppo_update``, and
``make_minibatch_step`` in ``agents/core/minibatch_step.py``); ``GaussianActorCritic`` (walkers) and
``LMActorCritic`` (text) implement it.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch


class Evaluation(NamedTuple):
    """A policy's view of a minibatch; every field has the shape of the minibatch's mask."""

    logp: torch.Tensor
    """log pi(a|s) of the stored actions under the current parameters."""
    entropy: torch.Tensor
    """Entropy of pi(.|s)."""
    value: torch.Tensor
    """V(s)."""
    kl: torch.Tensor
    """KL(pi_old(.|s) || pi(.|s)): exact where the policy can compute it, else the k3 estimate."""


class ActorCritic(Protocol):
    """What the PPO core needs: an ``nn.Module`` whose forward evaluates a minibatch's policy inputs.

    ``torch.func.functional_call(policy, params, (inputs,))`` must work, so the forward pass may
    read buffers but must not change them.
    """

    def __call__(self, inputs: dict[str, torch.Tensor]) -> Evaluation: ...

    def named_parameters(self): ...

    def critic_parameter_names(self) -> frozenset[str]:
        """Names (as in ``named_parameters``) of the parameters that only the value estimate depends on."""
        ...
