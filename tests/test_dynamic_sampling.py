"""One dynamic-sampling driver for both worlds: the same scripted group rewards, fed to the text world's
``sample_batch`` and the walkers' ``collect_mujoco_groups``, give the same kept, dropped and filler counts."""

import numpy as np
import pytest
import torch

from agents.core.objectives import SamplingPlan
from agents.text.rollout import SampledCompletions, sample_batch
from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.rollout import EpisodeGroup, collect_mujoco_groups
from envs.mujoco import make_vector_env

G = 2
GROUPS_WANTED = 3
SCRIPTS = {
    "fills on the second round": [[1, 1], [0, 1], [2, 2], [3, 4], [6, 7]],
    "one filler at the cap": [[1, 1], [0, 1], [2, 2], [3, 4], [5, 5]],
    "hits the cap and tops up": [[1, 1], [0, 1], [2, 2], [3, 3], [4, 4], [5, 5], [6, 6], [7, 7]],
    "every group informative": [[0, 1], [2, 3], [4, 5], [6, 7]],
}


def text_counts(group_rewards: list[list[float]], plan: SamplingPlan) -> tuple[int, int, int, int, int]:
    queue = iter(group_rewards)

    def sample_groups(k: int) -> SampledCompletions:
        scores = [float(r) for _ in range(k) for r in next(queue)]
        n = len(scores)
        return SampledCompletions(
            [f"p{i}" for i in range(n)], [[1]] * n, torch.ones(n, 2, dtype=torch.long),
            torch.ones(n, 2, dtype=torch.long), torch.ones(n, dtype=torch.bool), [""] * n, torch.tensor(scores), {},
            None,
        )  # fmt: skip

    filled = sample_batch(sample_groups, GROUPS_WANTED, plan)
    kept = len(filled.samples.prompts) // G - filled.filler_groups
    return kept, filled.groups_dropped, filled.filler_groups, filled.groups_sampled, filled.rounds


def walker_counts(group_rewards: list[list[float]], plan: SamplingPlan) -> tuple[int, int, int, int, int]:
    queue = iter(group_rewards)
    envs = make_vector_env("InvertedPendulum-v5", G)
    policy = GaussianActorCritic(4, 1, (8,), 0.0, normalize_observations=False, critic=False)

    def play() -> EpisodeGroup:  # G one-step episodes: a group adds G steps to the batch
        returns = np.array(next(queue), dtype=np.float64)
        return EpisodeGroup([[np.zeros(4, np.float32)]] * G, [[np.zeros(1, np.float32)]] * G, returns)

    rollout = collect_mujoco_groups(envs, policy, GROUPS_WANTED * G, "grpo", np.random.default_rng(0), plan, play)
    envs.close()
    kept = rollout.batch.size // G - rollout.filler_groups
    return kept, rollout.groups_dropped, rollout.filler_groups, rollout.groups, rollout.sampling_rounds


@pytest.mark.parametrize("script", list(SCRIPTS), ids=list(SCRIPTS))
def test_both_worlds_keep_drop_and_fill_the_same_groups(script):
    plan = SamplingPlan(group_size=G, drop_zero_variance=True, max_sampling_rounds=2)
    text, walkers = text_counts(SCRIPTS[script], plan), walker_counts(SCRIPTS[script], plan)
    assert text == walkers, f"text (kept, dropped, fillers, sampled, rounds) {text} != walkers' {walkers}"
    expected = {
        "fills on the second round": (3, 2, 0, 5, 2),  # round 1 keeps [0, 1] of 3; round 2 asks 2: [3, 4], [6, 7]
        "one filler at the cap": (2, 3, 1, 5, 2),  # round 2 keeps [3, 4] and drops [5, 5]; [1, 1] is put back
        "hits the cap and tops up": (1, 4, 2, 5, 2),  # 1 informative in 2 rounds; 2 dropped groups put back
        "every group informative": (3, 0, 0, 3, 1),
    }[script]
    assert text == expected
