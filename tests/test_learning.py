"""End to end: PPO solves InvertedPendulum-v5 within a CI budget (slow: about a minute each)."""

import pytest

from agents.core.config import PPOConfig
from agents.core.objectives import Clip, Penalty
from agents.runs.config import RunConfig
from agents.walkers.config import MujocoEnvConfig, TrainConfig
from agents.walkers.evaluate import evaluate, load_policy
from agents.walkers.train import train

BUDGET = 40_960  # 20 iterations of 2048 steps; both objectives first reach 1000 at about 25k steps (seed 1)


@pytest.mark.slow
@pytest.mark.parametrize("objective", [Clip(), Penalty()], ids=["clip", "penalty"])
def test_inverted_pendulum_reaches_900(tmp_path, objective):
    config = TrainConfig(
        env=MujocoEnvConfig(env_id="InvertedPendulum-v5"),
        objective=objective,
        ppo=PPOConfig(total_steps=BUDGET),
        run=RunConfig(runs_dir=tmp_path, run_name="pendulum", compile=False, progress=False),
    )
    policy, env_id = load_policy(train(config))
    result = evaluate(policy, env_id, episodes=10, seed=100, deterministic=True)
    assert result.mean >= 900, f"mean return {result.mean:.0f} over 10 episodes"


def test_help_lists_every_option_with_its_docstring():
    from tests.conftest import run_ppo

    result = run_ppo("train", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.replace("│", " ").split())  # undo the help box's line wrapping
    for flag, words in [
        ("--env-id", "Gymnasium id"),
        ("--num-envs", "Parallel environments stepped in each process"),
        ("--minibatch-size", "paper: 64"),
        ("--torch-threads", "set_num_threads"),
        ("--resume", "latest checkpoint"),
    ]:
        assert flag in text and words in text
    for objective in ("clip", "penalty", "fixed-kl", "no-clip"):
        assert objective in text
    assert "`ppo train text` trains a language model" in text, "the walker help shows the way to the text half"
    overview = " ".join(run_ppo("--help").stdout.replace("│", " ").split())
    assert "`ppo train text` trains a language model" in overview
