"""The HalfCheetah basin probe (benchmarks/probes/halfcheetah_basins.py): the upside-down share against hand values,
and its played episode against ``ppo eval``'s deterministic return on the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from agents.walkers.evaluate import evaluate, load_policy
from agents.walkers.train import train
from benchmarks.probes.halfcheetah_basins import play, upside_down_share
from tests.conftest import tiny_config


def test_upside_down_share_counts_the_steps_past_a_quarter_turn():
    # cos: 1, -1, -0.416, 0.540, 1 (a full roll is upright again)
    assert upside_down_share(np.array([0.0, np.pi, -2.0, 1.0, 2 * np.pi])) == pytest.approx(2 / 5)


def test_a_played_episode_scores_what_ppo_eval_scores(tmp_path):
    run = train(tiny_config(tmp_path, "cheetah", env_id="HalfCheetah-v5", total_steps=256))
    (gait,) = play(run, episodes=1, seed=5)
    policy, env_id = load_policy(run)
    assert gait.episode_return == pytest.approx(evaluate(policy, env_id, 1, seed=5, deterministic=True).mean, rel=1e-9)
    assert 0.0 <= gait.upside_down <= 1.0 and gait.mean_abs_pitch >= 0.0
