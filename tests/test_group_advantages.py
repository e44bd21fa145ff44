"""Group-relative estimators (GRPO, Dr. GRPO, RLOO) and DAPO's helpers against hand-computed values."""

import re

import pytest
import torch

from agents.core.group_advantages import (
    GROUP_ESTIMATORS,
    SampledGroups,
    dr_grpo_advantages,
    fill_batch,
    group_advantages,
    group_rewards,
    grpo_advantages,
    per_token,
    rloo_advantages,
    soft_overlong_penalty,
    zero_variance_groups,
)

# Three groups of G = 4: one right of four, all equal, two right of four.
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 1.0, 0.0, 0.0, 1.0], dtype=torch.float64)


def test_group_rewards_reshapes_contiguous_members():
    assert group_rewards(torch.arange(6), 3).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert group_rewards(torch.arange(6), 2).tolist() == [[0, 1], [2, 3], [4, 5]]


def test_grpo_hand_computed():
    # group 0: mean 0.25, centred [0.75, -0.25, -0.25, -0.25], unbiased var 0.75 / 3 = 0.25, std 0.5
    #   -> 0.75 / 0.5001, -0.25 / 0.5001 (a population std, sqrt(0.1875), would give 1.7317 and -0.5772)
    # group 1: all equal -> 0
    # group 2: mean 0.5, centred [0.5, -0.5, -0.5, 0.5], unbiased std sqrt(1/3) -> 0.5 / (0.57735 + 1e-4)
    expected = [1.4997000599880024, -0.4999000199960008, -0.4999000199960008, -0.4999000199960008]
    expected += [0.0, 0.0, 0.0, 0.0]
    expected += [0.8658754297607016, -0.8658754297607016, -0.8658754297607016, 0.8658754297607016]
    assert grpo_advantages(REWARDS, 4).tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_grpo_eps_is_added_to_the_std():
    # eps = 0.5 on group 0: 0.75 / (0.5 + 0.5) = 0.75
    assert grpo_advantages(REWARDS[:4], 4, eps=0.5).tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_dr_grpo_hand_computed():
    expected = [0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0, 0.5, -0.5, -0.5, 0.5]
    assert dr_grpo_advantages(REWARDS, 4).tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_rloo_hand_computed():
    # group 0: 1 - mean(0, 0, 0) = 1; 0 - mean(1, 0, 0) = -1/3
    # group 2: 1 - mean(0, 0, 1) = 2/3; 0 - mean(1, 0, 1) = -2/3
    expected = [1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0, 0.0, 2 / 3, -2 / 3, -2 / 3, 2 / 3]
    assert rloo_advantages(REWARDS, 4).tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_integer_rewards_give_float_advantages():
    advantages = dr_grpo_advantages(torch.tensor([1, 0, 0, 0]), 4)
    assert advantages.dtype == torch.get_default_dtype()
    assert advantages.tolist() == [0.75, -0.25, -0.25, -0.25]


@pytest.mark.parametrize("name", ["grpo", "dr-grpo", "rloo"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_variance_group_gives_exact_zeros(name, dtype):
    # mean([0.1, 0.1, 0.1]) is not exactly 0.1 in floating point: the zeros must still be exact.
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 1.0, 0.0, 0.0], dtype=dtype)
    advantages = GROUP_ESTIMATORS[name](rewards, 3)
    assert not advantages.isnan().any()
    assert advantages[:9].tolist() == [0.0] * 9
    assert (advantages[9:] != 0).all()
    assert zero_variance_groups(rewards, 3).tolist() == [True, True, True, False]


def test_zero_variance_groups_flags_only_all_equal_groups():
    assert zero_variance_groups(REWARDS, 4).tolist() == [False, True, False]
    assert zero_variance_groups(torch.tensor([5.0, 5.0, 5.0, 5.0 + 1e-6]), 4).tolist() == [False]


def test_group_size_two():
    # group 0: [3, 1], mean 2, centred [1, -1], unbiased std sqrt(2); group 1: [0, 0.5], centred [-0.25, 0.25],
    # unbiased std sqrt(0.125)
    rewards = torch.tensor([3.0, 1.0, 0.0, 0.5], dtype=torch.float64)
    grpo = [0.7070567847218314, -0.7070567847218314, -0.7069068377390945, 0.7069068377390945]
    assert grpo_advantages(rewards, 2).tolist() == pytest.approx(grpo, rel=1e-12)
    assert dr_grpo_advantages(rewards, 2).tolist() == pytest.approx([1.0, -1.0, -0.25, 0.25], rel=1e-12)
    # RLOO with G = 2: A_i = r_i - r_j
    assert rloo_advantages(rewards, 2).tolist() == pytest.approx([2.0, -2.0, -0.5, 0.5], rel=1e-12)


def test_rloo_matches_brute_force_leave_one_out():
    generator = torch.Generator().manual_seed(0)
    for group_size in (2, 3, 5, 8):
        rewards = torch.randn(6 * group_size, generator=generator, dtype=torch.float64)
        brute = []
        for group in rewards.reshape(-1, group_size).tolist():
            for i, r in enumerate(group):
                others = group[:i] + group[i + 1 :]
                brute.append(r - sum(others) / len(others))
        assert rloo_advantages(rewards, group_size).tolist() == pytest.approx(brute, rel=1e-10, abs=1e-12)


def test_registry_names_and_record():
    assert set(GROUP_ESTIMATORS) == {"grpo", "dr-grpo", "rloo"}
    out = group_advantages(REWARDS, 4, "rloo")
    assert out.advantages.tolist() == pytest.approx(rloo_advantages(REWARDS, 4).tolist())
    assert out.zero_variance.tolist() == [False, True, False]
    assert int(out.zero_variance.sum()) == 1


def test_per_token_broadcasts_over_unequal_lengths():
    advantages = torch.tensor([1.5, -0.5, 2.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)  # lengths 3, 1, 2
    expected = [[1.5, 1.5, 1.5, 0.0], [-0.5, 0.0, 0.0, 0.0], [2.0, 2.0, 0.0, 0.0]]
    assert per_token(advantages, mask).tolist() == expected
    assert (advantages[:, None] * mask).tolist() == expected


@pytest.mark.parametrize(
    ("call", "fix"),
    [
        (lambda: group_rewards(torch.zeros(7), 4), "num_groups * group_size"),
        (lambda: grpo_advantages(torch.zeros(6), 4), "num_groups * group_size"),
        (lambda: rloo_advantages(torch.zeros(4), 1), "G >= 2"),
        (lambda: dr_grpo_advantages(torch.zeros(4), 0), "G >= 2"),
        (lambda: zero_variance_groups(torch.zeros(2, 4), 4), "flat (N,)"),
        (lambda: per_token(torch.zeros(3), torch.ones(2, 5)), "mask (N, T)"),
        (lambda: per_token(torch.zeros(3, 1), torch.ones(3, 5)), "advantages (N,)"),
        (lambda: group_advantages(REWARDS, 4, "ppo"), "grpo, dr-grpo, rloo"),
        (lambda: soft_overlong_penalty(torch.zeros(2), 10, 0), "0 < cache_length <= max_length"),
        (lambda: soft_overlong_penalty(torch.zeros(2), 10, 11), "0 < cache_length <= max_length"),
        (lambda: fill_batch(lambda k: groups_of(torch.zeros(2 * k), 2), 0, 2, 3), "at least 1"),
        (lambda: fill_batch(lambda k: groups_of(torch.zeros(2 * k), 2), 2, 2, 0), "at least 1"),
        (lambda: fill_batch(lambda k: groups_of(torch.zeros(2 * k), 2), 2, 1, 3), "G >= 2"),
        (lambda: fill_batch(lambda k: SampledGroups(torch.zeros(3), [1]), 2, 2, 3), "num_groups * group_size"),
        (lambda: fill_batch(lambda k: SampledGroups(torch.zeros(4), [1]), 2, 2, 3), "pass one per group"),
    ],
)
def test_bad_shapes_and_sizes_name_the_fix(call, fix):
    with pytest.raises(ValueError, match=re.escape(fix)):
        call()


def test_soft_overlong_penalty_boundaries():
    # L_max = 20, L_cache = 4: the ramp starts after 16 tokens and reaches -1 at 20
    lengths = torch.tensor([0, 15, 16, 17, 18, 19, 20, 21, 100])
    expected = [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]
    assert soft_overlong_penalty(lengths, 20, 4).tolist() == expected
    # the paper's setting: 16384 expected tokens plus a 4096-token cache
    paper = soft_overlong_penalty(torch.tensor([16384, 16385, 18432, 20480, 20481]), 20480, 4096)
    assert paper.tolist() == pytest.approx([0.0, -1 / 4096, -0.5, -1.0, -1.0])


def test_soft_overlong_penalty_whole_budget_as_cache():
    assert soft_overlong_penalty(torch.tensor([0, 1, 4, 5]), 4, 4).tolist() == [0.0, -0.25, -1.0, -1.0]


def groups_of(rewards: torch.Tensor, group_size: int) -> SampledGroups:
    """Flat rewards as a round of groups that count one each (the text world's unit)."""
    return SampledGroups(rewards, [1] * (rewards.shape[0] // group_size))


def scripted(rounds_of_rewards, group_size=2):
    """A ``sample_groups`` that returns the given rewards round after round and records what it was asked for."""
    asked = []

    def sample_groups(k):
        asked.append(k)
        return groups_of(torch.tensor(rounds_of_rewards[len(asked) - 1]), group_size)

    return sample_groups, asked


def test_fill_batch_resamples_until_full():
    sample_groups, asked = scripted(
        [
            [1.0, 1.0, 0.0, 0.0, 5.0, 5.0],  # 3 groups, none informative
            [1.0, 1.0, 0.0, 1.0, 2.0, 2.0],  # group 1 informative
            [0.0, 1.0, 3.0, 3.0, 1.0, 0.0, 7.0, 8.0],  # groups 0, 2, 3 informative; only 2 still missing
        ]
    )
    out = fill_batch(sample_groups, wanted=3, group_size=2, max_rounds=10)
    assert asked == [3, 3, 2]  # it asks for the groups still missing
    assert out.kept == [(1, 1), (2, 0), (2, 2)]
    assert out.fillers == []
    assert out.groups_sampled == 10
    assert out.groups_dropped == 6
    assert out.rounds == 3
    assert not out.hit_cap


def test_fill_batch_tops_up_with_dropped_groups_at_max_rounds():
    calls = []

    def always_flat(k):
        calls.append(k)
        return groups_of(torch.ones(3 * k), 3)

    out = fill_batch(always_flat, wanted=2, group_size=3, max_rounds=4)
    assert calls == [2, 2, 2, 2]
    assert out.kept == []
    assert out.fillers == [(0, 0), (0, 1)], "the first dropped groups, in the order sampled"
    assert out.groups_sampled == 8
    assert out.groups_dropped == 8
    assert out.rounds == 4
    assert out.hit_cap


def test_fill_batch_full_on_the_last_allowed_round_is_not_capped():
    sample_groups, asked = scripted([[1.0, 0.0, 0.0, 1.0]])
    out = fill_batch(sample_groups, wanted=2, group_size=2, max_rounds=1)
    assert out.kept == [(0, 0), (0, 1)]
    assert out.rounds == 1
    assert not out.hit_cap


def test_fill_batch_counts_group_sizes_and_keeps_the_group_that_crosses_the_line():
    # the walkers' unit: each group adds its environment steps; the batch is full once they reach `wanted`
    rounds = iter([SampledGroups(torch.tensor([1.0, 1.0, 0.0, 2.0, 3.0, 4.0]), [40, 30, 50])])
    out = fill_batch(lambda missing: next(rounds), wanted=60, group_size=2, max_rounds=1)
    assert out.kept == [(0, 1), (0, 2)], "30 + 50 steps: the second crosses 60 and is kept whole"
    assert out.dropped == [(0, 0)] and out.fillers == []


def test_fill_batch_without_dropping_keeps_flat_groups():
    sample_groups, asked = scripted([[1.0, 1.0, 0.0, 1.0]])
    out = fill_batch(sample_groups, wanted=2, group_size=2, max_rounds=1, drop_zero_variance=False)
    assert out.kept == [(0, 0), (0, 1)] and out.dropped == [] and out.fillers == []
