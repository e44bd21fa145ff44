"""``--fsdp``: the language model's weights, gradients and Adam moments sharded over the processes with FSDP2
(``torch.distributed.fsdp.fully_shard``), as TRL, verl and OpenRLHF shard models that outgrow one device.

Each transformer block is one FSDP unit, then the LM (embeddings, final norm, head), then the actor-critic (the
value head). The update runs on shards: each block's weights are all-gathered for its forward and backward and
freed after, and gradients are reduce-scattered. Sampling gathers the whole model once per rollout instead
(``gathered_weights``): generation calls the model once per token, and processes that stop at different lengths
would otherwise call the collectives a different number of times.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from transformers import AutoModelForCausalLM

from agents.core.distributed import full_from_shards, local_shard, rank, world_size
from agents.text.actor_critic import LMActorCritic

# Our callers only read the outputs (the FSDP-vs-data-parallel tests check the gradients), never modify them in place
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(.*\) returned a view tensor")


def transformer_blocks(lm: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: the classes transformers names in ``_no_split_modules`` (``LlamaDecoderLayer``,
    ``GPT2Block``), which accelerate and TRL also wrap as FSDP units."""
    names = set(getattr(lm, "_no_split_modules", None) or ())
    blocks = [module for module in lm.modules() if type(module).__name__ in names]
    if not blocks:
        raise ValueError(f"--fsdp found no transformer blocks in {type(lm).__name__} (no _no_split_modules)")
    return blocks


def shard_policy(policy: LMActorCritic, device: torch.device) -> None:
    """Shard ``policy`` over every process, in place, one FSDP unit per block,
    then its LM, then ``policy``; afterwards its parameters are ``DTensor`` shards. Every unit frees its gathered
    weights after its forward (FSDP2 keeps the root's by default), so ``gathered_weights`` can restore that."""
    mesh = init_device_mesh(device.type, (world_size(),))
    for block in transformer_blocks(policy.lm):
        fully_shard(block, mesh=mesh)
    fully_shard(policy.lm, mesh=mesh)
    fully_shard(policy, mesh=mesh)
    # FSDP2 takes the first module to run forward as its root; sampling calls the LM (a child) first, so name it now
    policy._get_fsdp_state()._lazy_init()
    policy.set_reshard_after_forward(True)


@contextlib.contextmanager
def gathered_weights(policy: nn.Module) -> Iterator[None]:
    """Inside, every FSDP unit of ``policy`` holds its whole weights (one all-gather each on entry, none while
    sampling); on exit the shards are back. Every process must enter and leave together. A policy that is not
    sharded is left alone."""
    units = [module for module in policy.modules() if isinstance(module, FSDPModule)]
    if not units:
        yield
        return
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True, recurse=False)


def unsharded_copy(policy: LMActorCritic) -> LMActorCritic | None:
    """On the first process, a plain (unsharded) copy of a sharded actor-critic, for ``save_policy_directory``;
    None elsewhere. Every process must call it: each tensor is all-gathered in turn and only the first process
    keeps it, copied straight into the copy, so no process ever holds a second whole set of weights."""
    plain = None
    if rank() == 0:
        plain = LMActorCritic(
            AutoModelForCausalLM.from_config(policy.lm.config),
            temperature=policy.temperature,
            critic=policy.value_head is not None,
        )
    targets = plain.state_dict() if plain is not None else {}
    for name, tensor in policy.state_dict().items():
        whole = full_from_shards(local_shard(tensor), tensor)
        if plain is not None:
            targets[name].copy_(whole)
    return plain
