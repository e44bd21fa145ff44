"""Several processes are one run: real gloo processes (torch.multiprocessing), never mocks.

Two processes with half the batch each must end an update with the parameters one process reaches on
the whole batch, given the same data: gradients are averaged before the clip, and early stopping and
the KL the penalty reads are taken over every process.
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from agents.core.advantages import whiten
from agents.core.batch import Minibatch
from agents.core.config import PPOConfig
from agents.core.distributed import (
    all_reduce_mean_,
    all_reduce_sum,
    full_from_shards,
    gather_objects,
    local_shard,
    rank,
    world_size,
)
from agents.core.minibatch_step import make_minibatch_step
from agents.core.objectives import Clip, Penalty
from agents.core.optimizer import AdamState
from agents.core.update import UpdateSchedule, ppo_update
from agents.text.actor_critic import LMActorCritic, ReferencePolicy
from agents.text.rollout import TextBatchSettings, build_text_batch, sample_completions
from agents.text.sharding import shard_policy
from agents.walkers.gaussian import GaussianActorCritic
from envs.text.models import build_tiny_model
from tests.test_ppo import make_batch

WORLD = 2


def gaussian_setup() -> tuple[torch.nn.Module, Minibatch, PPOConfig]:
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    cfg = PPOConfig(epochs=3, minibatch_size=128, normalize_advantages=False, learning_rate=1e-3, target_kl=None)
    return policy, make_batch(policy, n=128), cfg


def tiny_lm_setup() -> tuple[torch.nn.Module, Minibatch, PPOConfig]:
    torch.manual_seed(0)
    model, tokenizer = build_tiny_model()
    policy = LMActorCritic(copy.deepcopy(model))
    settings = TextBatchSettings(8, 16, 1.0, 4, 1.0, 0.95, None, True)
    prompts = ["the movie was", "a film", "this story is very", "one actor"]

    def length_score(prompts, completions):
        return [float(len(c)) for c in completions], {}

    generator = torch.Generator().manual_seed(0)
    samples = sample_completions(policy, tokenizer, prompts, length_score, settings, generator)
    rollout = build_text_batch(policy, ReferencePolicy(model), tokenizer, samples, settings, 0.1)
    # every token valid, so each process's token mean weighs its half exactly as the whole batch's mean does
    batch = rollout.batch._replace(mask=torch.ones_like(rollout.batch.mask))
    cfg = PPOConfig(epochs=2, minibatch_size=4, normalize_advantages=False, learning_rate=1e-3, max_grad_norm=1.0)
    return policy, batch, cfg


SETUPS = {"gaussian": gaussian_setup, "tiny-lm": tiny_lm_setup}


def update_parameters(
    setup: str,
    objective,
    part: slice | None,
    init_file: str | None = None,
    compile: bool = False,
    fsdp: bool = False,
):
    """One ``ppo_update`` of the setup's policy on ``batch[part]`` (all of it for None): its parameters and the KL.
    With ``init_file`` this process first joins a gloo group of ``WORLD`` processes, after building the data as
    one process would; with ``fsdp`` it then shards the policy (FSDP2) and returns the gathered parameters."""
    policy, batch, cfg = SETUPS[setup]()
    if part is not None:
        batch = batch.select(part)  # the minibatch size stays the global one: each process takes its share
    if init_file is not None:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=part.start // batch.size, world_size=WORLD
        )
    if fsdp:
        shard_policy(policy, ReferencePolicy(policy.lm), torch.device("cpu"))
    params = {name: p.detach() for name, p in policy.named_parameters() if p.requires_grad}
    adam = AdamState({name: local_shard(p) for name, p in params.items()})
    step = make_minibatch_step(policy, objective, cfg, compile=compile, sharded=fsdp)
    result = ppo_update(
        policy, params, adam, step, batch, cfg, UpdateSchedule(cfg.learning_rate, 1.0),
        torch.Generator().manual_seed(0), evaluation_chunk=3,
    )  # fmt: skip
    whole = {name: full_from_shards(local_shard(p), p).clone() for name, p in params.items()}
    return whole, result.kl_after_update


def rank_worker(
    process: int, init_file: str, setup: str, objective, out: str, size: int, compile: bool, fsdp: bool = False
) -> None:
    torch.set_num_threads(1)
    half = size // WORLD
    try:
        part = slice(process * half, (process + 1) * half)
        params, kl = update_parameters(setup, objective, part, init_file, compile, fsdp)
        if rank() == 0:
            torch.save({"params": params, "kl": kl, "world": world_size()}, out)
    finally:
        dist.destroy_process_group()


WHITEN_VALUES = torch.tensor([[1.0, 5.0, -2.0, 7.0], [0.5, 3.0, 9.0, -4.0]])
WHITEN_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def collective_worker(process: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=process, world_size=WORLD)
    try:
        tensors = [torch.full((3,), float(process + 1)), torch.tensor([10.0 * (process + 1)])]
        all_reduce_mean_(tensors)
        summed = all_reduce_sum(torch.tensor([1.0, float(process)]))
        values, mask = WHITEN_VALUES[process], WHITEN_MASK[process]
        whitened = whiten(values, mask, sum_over_processes=all_reduce_sum)
        gathered = gather_objects(whitened)
        if process == 1:
            torch.save({"mean": tensors, "sum": summed, "whitened": gathered}, out)
    finally:
        dist.destroy_process_group()


def test_collectives_are_the_identity_in_one_process():
    tensors = [torch.tensor([1.0, 2.0])]
    all_reduce_mean_(tensors)
    assert torch.equal(tensors[0], torch.tensor([1.0, 2.0]))
    assert torch.equal(all_reduce_sum(torch.tensor([3.0])), torch.tensor([3.0]))
    assert (world_size(), rank()) == (1, 0)


def test_collectives_average_sum_and_whiten_over_two_processes(tmp_path: Path):
    out = tmp_path / "out.pt"
    mp.spawn(collective_worker, args=(str(tmp_path / "init"), str(out)), nprocs=WORLD, join=True)
    result = torch.load(out)
    assert torch.equal(result["mean"][0], torch.full((3,), 1.5))  # (1 + 2) / 2
    assert torch.equal(result["mean"][1], torch.tensor([15.0]))  # (10 + 20) / 2
    assert torch.equal(result["sum"], torch.tensor([2.0, 1.0]))  # (1 + 1, 0 + 1)
    # whitening with sums over both processes equals whitening both halves together
    expected = whiten(WHITEN_VALUES.reshape(-1), WHITEN_MASK.reshape(-1)).reshape(2, 4)
    torch.testing.assert_close(torch.stack(result["whitened"]), expected)


@pytest.mark.parametrize(
    ("setup", "objective", "compile"),
    [
        ("gaussian", Clip(), False),
        ("gaussian", Penalty(), False),
        ("tiny-lm", Clip(), False),
        ("tiny-lm", Penalty(), False),
        ("gaussian", Clip(), True),  # two compiled graphs around the all-reduce
    ],
    ids=["gaussian-clip", "gaussian-penalty", "tiny-lm-clip", "tiny-lm-penalty", "gaussian-clip-compiled"],
)
def test_two_processes_with_half_the_batch_each_equal_one_process_on_all_of_it(tmp_path, setup, objective, compile):
    torch.set_num_threads(1)
    expected, expected_kl = update_parameters(setup, objective, None)
    out = tmp_path / "rank0.pt"
    size = SETUPS[setup]()[1].size
    arguments = (str(tmp_path / "init"), setup, objective, str(out), size, compile)
    mp.spawn(rank_worker, args=arguments, nprocs=WORLD, join=True)
    result = torch.load(out)
    assert result["world"] == WORLD
    initial = {name: p.detach() for name, p in SETUPS[setup]()[0].named_parameters() if p.requires_grad}
    assert any(not torch.equal(initial[name], expected[name]) for name in expected)  # the update moved something
    for name, tensor in expected.items():
        torch.testing.assert_close(result["params"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    assert result["kl"] == pytest.approx(expected_kl, rel=1e-4)


@pytest.mark.parametrize("objective", [Clip(), Penalty()], ids=["clip", "penalty"])
def test_fsdp2_on_two_processes_equals_plain_data_parallelism_on_two_processes(tmp_path, objective):
    size = tiny_lm_setup()[1].size
    results = {}
    for fsdp in (False, True):
        out = tmp_path / f"fsdp-{fsdp}.pt"
        arguments = (str(tmp_path / f"init-{fsdp}"), "tiny-lm", objective, str(out), size, False, fsdp)
        mp.spawn(rank_worker, args=arguments, nprocs=WORLD, join=True)
        results[fsdp] = torch.load(out)
    plain, sharded = results[False], results[True]
    initial = {name: p.detach() for name, p in tiny_lm_setup()[0].named_parameters() if p.requires_grad}
    assert set(sharded["params"]) == set(plain["params"]) == set(initial)
    assert any(not torch.equal(initial[name], sharded["params"][name]) for name in initial)  # it trained
    for name, tensor in plain["params"].items():
        torch.testing.assert_close(sharded["params"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    assert sharded["kl"] == pytest.approx(plain["kl"], rel=1e-4)


MMAP_PROBE = """
from agents.text.sharding import return_freed_buffers_to_the_system
print(return_freed_buffers_to_the_system())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_fsdp_on_the_cpu_sets_glibcs_mmap_threshold_unless_the_user_did():
    ours = subprocess.run([sys.executable, "-c", MMAP_PROBE], capture_output=True, text=True, check=True)
    assert ours.stdout.strip() == "True"
    theirs = subprocess.run(
        [sys.executable, "-c", MMAP_PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "4194304"},
    )
    assert theirs.stdout.strip() == "False"
