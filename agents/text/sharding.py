"""``--fsdp``: the language model's weights, gradients and Adam moments sharded over the processes with FSDP2
(``torch.distributed.fsdp.fully_shard``), as TRL, verl and OpenRLHF shard models that outgrow one device.

Each transformer block is one FSDP unit, then the LM (embeddings, final norm, head), then the actor-critic (the
value head); the frozen reference is sharded the same way. The update, and the forward passes that score a
rollout (old log-probs, values, reference log-probs), run on shards: each block's weights are all-gathered for its
forward and backward and freed after, and gradients are reduce-scattered. Sampling gathers the whole policy once
per rollout instead (``gathered_weights``): generation calls the model once per token, and processes that stop at
different lengths would otherwise call the collectives a different number of times.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import warnings
from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from transformers import AutoModelForCausalLM

from agents.core.distributed import full_from_shards, local_shard, rank, world_size
from agents.text.actor_critic import LMActorCritic, ReferencePolicy

# Our callers only read the outputs (the FSDP-vs-data-parallel tests check the gradients), never modify them in place
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(.*\) returned a view tensor")


M_MMAP_THRESHOLD = -3  # glibc <malloc.h>: the mallopt parameter for the mmap threshold
MMAP_THRESHOLD_BYTES = 1024**2  # measured: 2.4 GB update peak against 4.8 GB with glibc's default (docs/results.md)


def return_freed_buffers_to_the_system() -> bool:
    """On glibc (Linux), serve every allocation of 1 MiB or more with its own mmap, returned to the system when
    freed (``mallopt(M_MMAP_THRESHOLD)``). FSDP gathers and frees each block's weights and gradients at every
    forward and backward; glibc's default threshold rises with each mmapped chunk freed (up to 32 MiB) and then
    serves those buffers from the heap, which kept about 2 GB per process on the CPU. Left alone when the user set
    ``MALLOC_MMAP_THRESHOLD_``; True when the threshold was set here."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc: nothing to set
        return False


def transformer_blocks(lm: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: the classes transformers names in ``_no_split_modules`` (``LlamaDecoderLayer``,
    ``GPT2Block``), which accelerate and TRL also wrap as FSDP units."""
    names = set(getattr(lm, "_no_split_modules", None) or ())
    blocks = [module for module in lm.modules() if type(module).__name__ in names]
    if not blocks:
        raise ValueError(f"--fsdp found no transformer blocks in {type(lm).__name__} (no _no_split_modules)")
    return blocks


def shard_lm(lm: nn.Module, mesh: DeviceMesh) -> None:
    """One FSDP unit per transformer block of ``lm``, then ``lm`` itself (embeddings, final norm, head)."""
    for block in transformer_blocks(lm):
        fully_shard(block, mesh=mesh)
    fully_shard(lm, mesh=mesh)


def shard_policy(policy: LMActorCritic, reference: ReferencePolicy | None, device: torch.device) -> None:
    """Shard ``policy`` and its frozen ``reference`` (where there is one) over every process, in place: one FSDP
    unit per block, then the LM, then ``policy``; afterwards their parameters are ``DTensor`` shards. Every unit
    frees its gathered weights after its forward (FSDP2 keeps the root's by default), so ``gathered_weights`` can
    restore that. On the CPU freed buffers of 1 MiB or more go back to the system
    (``return_freed_buffers_to_the_system``)."""
    if device.type == "cpu":  # CUDA's caching allocator reuses the buffers instead
        return_freed_buffers_to_the_system()
    mesh = init_device_mesh(device.type, (world_size(),))
    shard_lm(policy.lm, mesh)
    fully_shard(policy, mesh=mesh)
    roots = [policy]
    if reference is not None:
        shard_lm(reference.lm, mesh)  # frozen: only forward passes, each block gathered in turn and freed
        roots.append(reference.lm)
    # FSDP2 takes the first module to run forward as its root; sampling calls the LM (a child) first, so name it now
    for root in roots:
        root._get_fsdp_state()._lazy_init()
        root.set_reshard_after_forward(True)


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
