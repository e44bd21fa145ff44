"""The few collective operations that make N processes (launched by torchrun) one PPO run.

Each function reduces to the identity when ``torch.distributed`` is not initialised, so a
single-process run goes through the same calls. gloo (the CPU backend) has no averaging reduction,
so means are a SUM all-reduce divided by the world size (as CleanRL's ppo_atari_multigpu.py does).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.tensor import DTensor, distribute_tensor

from agents.core.moments import combine_moments


def world_size() -> int:
    """Number of processes in the run (1 without torch.distributed)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's index in the run (0 without torch.distributed)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def all_reduce_mean_(tensors: list[torch.Tensor]) -> None:
    """Replace each tensor by its mean over processes, in place, with one flat all-reduce of all of them."""
    size = world_size()
    if size == 1 or not tensors:
        return
    flat = _flatten_dense_tensors(tensors)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat.div_(size)
    for tensor, reduced in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        tensor.copy_(reduced)


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum of ``values`` over processes (a new tensor; ``values`` itself when there is one process)."""
    if world_size() == 1:
        return values
    summed = values.clone()
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    return summed


def broadcast_(tensors: list[torch.Tensor], source: int = 0) -> None:
    """Overwrite each tensor, in place, with process ``source``'s copy (parameters at the start of a run)."""
    if world_size() == 1:
        return
    for tensor in tensors:
        dist.broadcast(tensor, src=source)


def gather_objects(value: object) -> list[object]:
    """Every process's ``value`` (picklable), in rank order, on every process; ``[value]`` in one process."""
    if world_size() == 1:
        return [value]
    gathered: list[object] = [None] * world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def merge_moments(mean: torch.Tensor, var: torch.Tensor, count: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Mean, population variance and count of the union of every process's samples, from each process's own
    (Chan et al. 1979's pairwise merge, in rank order); the inputs themselves in one process."""
    parts = gather_objects((mean.cpu(), var.cpu(), float(count)))
    if len(parts) == 1:
        return mean, var, count
    merged_mean, merged_var, merged_count = parts[0]
    for part in parts[1:]:
        merged_mean, merged_var, merged_count = combine_moments(merged_mean, merged_var, merged_count, *part)
    return merged_mean.to(mean.device), merged_var.to(var.device), merged_count


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a tensor sharded by FSDP2 (a ``DTensor``; the local tensor shares its storage, so
    in-place updates reach the parameter); a plain tensor is its own."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def full_from_shards(shard: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The whole tensor whose shards, laid out as ``like``'s (a sharded parameter), the processes hold as
    ``shard`` (an all-gather every process must join); ``shard`` itself when ``like`` is not sharded."""
    if not isinstance(like, DTensor):
        return shard
    sharded = DTensor.from_local(shard, like.device_mesh, like.placements, shape=like.shape, stride=like.stride())
    return sharded.full_tensor()


def shard_of(full: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """This process's shard of ``full``, laid out as ``like``'s (every process passes the same ``full``);
    ``full`` itself when ``like`` is not sharded."""
    if not isinstance(like, DTensor):
        return full
    return distribute_tensor(full.to(like.device), like.device_mesh, like.placements).to_local()
