"""Issue #27, training on multi-turn games: the credit-assignment forms against hand values, the environment's tokens
out of every loss term, the dialogues' batch layout, and ``ppo train text`` on a game end to end (CLI, evaluation,
resume after a failing game, one-line errors)."""

import json
from dataclasses import replace

import pytest
import torch

from agents.core.advantages import bi_level_gae, compute_gae, policy_token_gae, reinforce_pp_advantages, whiten
from agents.core.config import ConfigError
from agents.core.group_advantages import step_group_advantages
from agents.core.minibatch_step import LossSettings, autograd_gradients
from agents.core.objectives import GRPO, Clip, GiGPO
from agents.runs.checkpoint import load_checkpoint
from agents.runs.config import RunConfig
from agents.runs.logger import METRICS_FILE, SAMPLES_FILE, read_jsonl
from agents.text.actor_critic import LMActorCritic, ReferencePolicy
from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig, validate_text_config
from agents.text.dialogue import DialogueSettings, dialogue_completions, play_episodes, sample_dialogues
from agents.text.evaluate import evaluate_text_run
from agents.text.rollout import TextBatchSettings, TurnStructure, build_text_batch, gigpo_advantages, turn_states
from agents.text.train import train_text
from envs.text.games import CustomGameConfig, GameError, GuessNumberConfig
from envs.text.models import build_tiny_model
from envs.text.multi_turn import TokenRole
from envs.text.tasks import ArithmeticTaskConfig
from tests.conftest import run_ppo, without_measurements

GAME_MODULE = """
import os
from pathlib import Path

TURNS = Path(__file__).with_name("turns.txt")


class Countdown:
    \"\"\"Over after 1 + seed % 3 turns; replies of seed- and turn-dependent lengths; a turn's reward is the count of
    'e' in it, so it depends on what was sampled. Raises on the turn numbered GAME_FAILS_AT of the whole run.\"\"\"

    def __init__(self, bonus=0.0):
        self.bonus = bonus

    def reset(self, seed):
        self.seed, self.turn = seed, 0
        return "Talk to me" + " please" * (seed % 3) + "."

    def step(self, turn_text):
        played = int(TURNS.read_text()) if TURNS.exists() else 0
        TURNS.write_text(str(played + 1))
        if os.environ.get("GAME_FAILS_AT") == str(played):
            raise RuntimeError("the board broke")
        self.turn += 1
        reply = "ok" + " and" * ((self.seed + self.turn) % 3)
        return reply, turn_text.count("e") + self.bonus, self.turn >= 1 + self.seed % 3
"""


@pytest.fixture
def game_file(tmp_path):
    path = tmp_path / "game" / "countdown.py"
    path.parent.mkdir()
    path.write_text(GAME_MODULE)
    return path


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model()


def two_turn_episode():
    """Policy, policy, reply, reply, policy, policy: rewards 0.5 and 1 at the two turns' ends; the reply's values are
    nonsense that must not be read."""
    rewards = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.1, 0.2, 9.0, 9.0, 0.3, 0.4]], dtype=torch.float64)
    policy = torch.tensor([[1, 1, 0, 0, 1, 1]])
    turn_ends = torch.tensor([[0, 1, 0, 0, 0, 1]])
    return rewards, values, policy, turn_ends


def test_token_level_gae_bootstraps_across_the_reply_against_hand_values():
    rewards, values, policy, turn_ends = two_turn_episode()
    out = policy_token_gae(rewards, values, policy, turn_ends, gamma=0.9, lam=0.8, turn_gamma=0.5)
    a4 = 1.0 - 0.4
    a3 = (0.9 * 0.4 - 0.3) + 0.9 * 0.8 * a4
    a2 = (0.5 + 0.5 * 0.3 - 0.2) + 0.5 * 0.8 * a3  # turn 1's last token: turn_gamma to turn 2's first token
    a1 = (0.9 * 0.2 - 0.1) + 0.9 * 0.8 * a2
    expected = torch.tensor([[a1, a2, 0.0, 0.0, a3, a4]], dtype=torch.float64)
    assert torch.allclose(out.advantages, expected, atol=1e-12)
    assert torch.allclose(out.returns, (expected + values) * policy, atol=1e-12)


def test_token_level_gae_without_replies_is_compute_gae_bit_for_bit():
    torch.manual_seed(0)
    rewards, values = torch.randn(5, 7), torch.randn(5, 7)
    lengths = torch.tensor([7, 3, 1, 5, 6])
    mask = (torch.arange(7) < lengths.unsqueeze(1)).float()
    rewards, values = rewards * mask, values * mask
    out = policy_token_gae(rewards, values, mask, torch.zeros_like(mask), gamma=0.99, lam=0.95, turn_gamma=0.99)
    terminated = torch.zeros_like(mask)
    terminated[torch.arange(5), lengths - 1] = 1.0
    next_values = torch.cat([values[:, 1:], torch.zeros(5, 1)], dim=1)
    reference = compute_gae(
        rewards.T, values.T, next_values.T, terminated.T, torch.zeros_like(mask).T, mask.T, 0.99, 0.95
    )
    assert torch.equal(out.advantages, reference.advantages.T) and torch.equal(out.returns, reference.returns.T)


def test_bi_level_gae_against_hand_values():
    rewards, values, policy, turn_ends = two_turn_episode()
    out = bi_level_gae(rewards, values, policy, turn_ends, gamma=0.9, lam=0.8, turn_gamma=0.5)
    turn2 = 1.0 - 0.4  # turn level: the last turn's advantage
    turn1 = (0.5 + 0.5 * 0.4 - 0.2) + 0.5 * 0.8 * turn2  # V of the next turn's last token, turn_gamma
    a3 = (0.9 * 0.4 - 0.3) + 0.9 * 0.8 * turn2  # token level, toward each turn's return
    a1 = (0.9 * 0.2 - 0.1) + 0.9 * 0.8 * turn1
    expected = torch.tensor([[a1, turn1, 0.0, 0.0, a3, turn2]], dtype=torch.float64)
    assert torch.allclose(out.advantages, expected, atol=1e-12)
    assert torch.allclose(out.returns, (expected + values) * policy, atol=1e-12)


def test_reinforce_pp_returns_skip_the_reply_with_the_turn_discount():
    rewards, _, policy, turn_ends = two_turn_episode()
    g4 = 1.0
    g3 = 0.9 * g4
    g2 = 0.5 + 0.5 * g3
    g1 = 0.9 * g2
    returns = torch.tensor([[g1, g2, 0.0, 0.0, g3, g4]], dtype=torch.float64)
    out = reinforce_pp_advantages(rewards, policy, 0.9, turn_ends=turn_ends, turn_gamma=0.5)
    assert torch.allclose(out, whiten(returns, policy), atol=1e-12)


class Countdown:
    """Over after ``1 + seed % 3`` turns; the reward of a turn is its length over 10, so it depends on the sample."""

    def reset(self, seed):
        self.seed, self.turn = seed, 0
        return "Talk to me" + " please" * (seed % 3) + "."

    def step(self, turn_text):
        self.turn += 1
        return "ok" + " and" * ((self.seed + self.turn) % 3), len(turn_text) / 10, self.turn >= 1 + self.seed % 3


SETTINGS = DialogueSettings(max_turns=3, max_turn_tokens=6, max_context_tokens=256, temperature=0.7)


def sampled_dialogues(tiny, seeds=(0, 1, 2, 4, 5, 8)):
    model, tokenizer = tiny
    uniforms = torch.rand(len(seeds), 3, 6, generator=torch.Generator().manual_seed(3))
    return sample_dialogues(model, [Countdown() for _ in seeds], tokenizer, list(seeds), uniforms, SETTINGS)


def test_dialogues_become_a_batch_whose_loss_mask_is_the_policy_tokens(tiny):
    dialogues = sampled_dialogues(tiny)
    samples = dialogue_completions(dialogues, tiny[1])
    turns = samples.turns
    for b in range(len(samples.prompts)):
        whole = dialogues.input_ids[b, dialogues.attention_mask[b].bool()].tolist()
        length = int(samples.response_mask[b].sum())
        assert samples.prompt_ids[b] + samples.response_ids[b, :length].tolist() == whole
        roles = dialogues.roles[b, len(samples.prompt_ids[b]) : len(whole)]
        assert torch.equal(turns.policy_mask[b, :length].bool(), roles == TokenRole.POLICY)
        assert not turns.policy_mask[b, length:].any()
        ends = turns.turn_ends[b].nonzero().squeeze(1)
        assert len(ends) == int(dialogues.turns[b]) and turns.policy_mask[b, ends].all()
        indices = turns.turn_index[b][turns.policy_mask[b].bool()]
        assert indices.min() == 0 and indices.max() == len(ends) - 1 and (indices.diff() >= 0).all()
    assert any(not row.all() for row in turns.policy_mask[samples.response_mask.bool()].split(1))
    assert torch.allclose(turns.token_rewards().sum(1), samples.scores)
    assert torch.allclose(samples.scores, dialogues.turn_rewards.sum(1))
    assert samples.generated_tokens == int((dialogues.roles == TokenRole.POLICY).sum())


@pytest.mark.parametrize("objective", [Clip(), GRPO(group_size=2)], ids=["clip", "grpo"])
def test_a_gradient_step_does_not_depend_on_the_environment_tokens(tiny, objective):
    model, tokenizer = tiny
    samples = dialogue_completions(sampled_dialogues(tiny), tokenizer)
    critic = objective.name == "clip"
    policy, reference = LMActorCritic(model, temperature=0.7, critic=critic), ReferencePolicy(model)
    if critic:
        with torch.no_grad():
            policy.value_head.weight.normal_(0, 0.1)  # a critic with something to say
    settings = TextBatchSettings(
        max_new_tokens=6, max_prompt_tokens=64, temperature=0.7, forward_batch=4, gamma=1.0, gae_lambda=0.95,
        eos_penalty=None, whiten_advantages=True, advantage_estimator=objective.advantage_estimator,
        group_size=objective.sampling_plan().group_size, reference_kl="loss",
    )  # fmt: skip
    batch = build_text_batch(policy, reference, tokenizer, samples, settings, 0.05).batch
    env = (samples.response_mask.bool() & ~samples.turns.policy_mask.bool()).float()
    assert env.sum() > 0
    assert not (batch.advantages * env).any() and not (batch.returns * env).any()
    loss = LossSettings(objective, TEXT_PPO_DEFAULTS, reference_kl_coef=0.05)
    params = {name: p for name, p in policy.named_parameters() if p.requires_grad}
    everything = torch.arange(batch.size)

    def gradients(tampered):
        grads, stats = autograd_gradients(policy, loss, params, tampered, everything, torch.tensor(0.0))
        return grads, stats

    def tamper(where: torch.Tensor):
        noise = 100.0 * where
        return batch._replace(
            old_logp=batch.old_logp + noise, advantages=batch.advantages + noise, returns=batch.returns + noise,
            old_values=batch.old_values + noise, ref_logp=batch.ref_logp + noise,
        )  # fmt: skip

    clean, clean_stats = gradients(batch)
    at_replies, reply_stats = gradients(tamper(env))
    assert torch.equal(clean_stats, reply_stats)
    assert all(torch.equal(clean[name], at_replies[name]) for name in clean)
    first_policy_token = torch.zeros_like(env)
    first_policy_token[0, samples.turns.policy_mask[0].nonzero()[0, 0]] = 1.0
    moved, _ = gradients(tamper(first_policy_token))
    assert any(not torch.equal(clean[name], moved[name]) for name in clean), "the check above could not fail"


def test_the_game_replies_are_attended_to_but_never_scored(tiny):
    model, tokenizer = tiny
    samples = dialogue_completions(sampled_dialogues(tiny), tokenizer)
    policy = LMActorCritic(model, temperature=0.7, critic=True)
    with torch.no_grad():
        policy.value_head.weight.normal_(0, 0.1)
    settings = TextBatchSettings(
        max_new_tokens=6, max_prompt_tokens=64, temperature=0.7, forward_batch=4, gamma=1.0, gae_lambda=0.95,
        eos_penalty=None, whiten_advantages=True, advantage_estimator="gae", group_size=1, reference_kl="loss",
    )  # fmt: skip
    batch = build_text_batch(policy, ReferencePolicy(model), tokenizer, samples, settings, 0.05).batch
    replies = (samples.response_mask.bool() & ~samples.turns.policy_mask.bool()).nonzero(as_tuple=True)
    own = samples.turns.policy_mask.bool().nonzero(as_tuple=True)
    with torch.no_grad():
        scored = policy(batch.inputs)
        everywhere = policy({key: value for key, value in batch.inputs.items() if key != "scored_mask"})
    assert everywhere.logp[replies].ne(0).all(), "scored everywhere, the replies have log-probs (could fail)"
    assert not scored.logp[replies].any() and not scored.entropy[replies].any()
    torch.testing.assert_close(scored.logp[own], everywhere.logp[own], atol=1e-6, rtol=0)
    torch.testing.assert_close(scored.entropy[own], everywhere.entropy[own], atol=1e-6, rtol=0)
    assert torch.equal(scored.value, everywhere.value)  # the critic reads every position's state
    torch.testing.assert_close(batch.old_logp[own], everywhere.logp[own], atol=1e-6, rtol=0)


def game_config(tmp_path, name, game_file, objective=Clip(), total_steps=160, **text):
    return TextTrainConfig(
        text=TextEnvConfig(
            model="tiny",
            task=CustomGameConfig(env_file=f"{game_file}:Countdown", game_options='{"bonus": 0.5}'),
            prompts_per_iteration=8,
            max_new_tokens=6,
            max_context_tokens=256,
            max_turns=3,
            eval_prompts=4,
            **{"eval_every": 2, **text},
        ),
        objective=objective,
        ppo=replace(TEXT_PPO_DEFAULTS, total_steps=total_steps, minibatch_size=4, epochs=2),
        run=RunConfig(
            runs_dir=tmp_path / "runs",
            run_name=name,
            progress=False,
            torch_threads=1,
            checkpoint_every=1,
            compile=False,
        ),
    )


def test_per_turn_metrics_match_hand_computed_values():
    """Two episodes: the first plays two turns (policy token, reply token, two policy tokens), the second one turn of
    two tokens then padding. Turn 1 holds advantages 1, 3, 5, turn 2 holds 2, 4 (the reply's 9 and the padding's 7
    must not count)."""
    from agents.core.batch import Minibatch
    from agents.text.metrics import turn_metrics
    from agents.text.rollout import TextRollout

    turn_index = torch.tensor([[0, -1, 1, 1], [0, 0, -1, -1]])
    policy = (turn_index >= 0).float()
    turns = TurnStructure(
        policy_mask=policy, turn_ends=torch.tensor([[True, False, False, True], [False, True, False, False]]),
        turn_index=turn_index, turn_rewards=torch.tensor([[0.0, 1.0], [1.0, 0.0]]), turns=torch.tensor([2, 1]),
        success=torch.tensor([True, True]), truncated=torch.tensor([False, False]), episode_seeds=torch.tensor([0, 1]),
    )  # fmt: skip
    batch = Minibatch(
        inputs={}, old_logp=torch.zeros(2, 4), mask=policy,
        advantages=torch.tensor([[1.0, 9.0, 2.0, 4.0], [3.0, 5.0, 7.0, 7.0]]),
        returns=torch.tensor([[1.0, 0.0, 2.0, 3.0], [2.0, 4.0, 0.0, 0.0]]),
        old_values=torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]),
    )  # fmt: skip
    rollout = TextRollout(
        batch=batch, prompts=["a", "b"], completions=["", ""], scores=torch.ones(2), task_metrics={},
        ref_kl=torch.zeros(2), response_ids=torch.zeros(2, 4, dtype=torch.long), response_mask=policy,
        ended=torch.ones(2, dtype=torch.bool), tokens=5, turns=turns,
    )  # fmt: skip
    metrics = turn_metrics(rollout, critic=True)
    assert metrics["turn_reward_1"] == pytest.approx(0.5) and metrics["turn_reward_2"] == pytest.approx(1.0)
    assert metrics["turn_advantage_std_1"] == pytest.approx((8 / 3) ** 0.5)  # mean 3: (4 + 0 + 4) / 3
    assert metrics["turn_advantage_std_2"] == pytest.approx(1.0)
    # returns 1, 2, 4 (variance 14/9) against residuals R - V of 1, 1, 3 (variance 8/9); turn 2: 2, 3 against 1, 2
    assert metrics["turn_explained_variance_1"] == pytest.approx(3 / 7)
    assert metrics["turn_explained_variance_2"] == pytest.approx(0.0, abs=1e-12)
    assert "turn_explained_variance_1" not in turn_metrics(rollout, critic=False)


def test_a_game_trains_logs_dialogues_and_per_turn_metrics_and_evaluates(tmp_path, game_file):
    run_dir = train_text(game_config(tmp_path, "clip", game_file))
    records = read_jsonl(run_dir / METRICS_FILE)
    assert records[0]["iteration"] == 0 and "eval_success" in records[0]
    trained = [r for r in records if r["iteration"] > 0]
    assert trained[-1]["global_step"] >= 160
    assert all(1 <= r["task_turns"] <= 3 and "turn_reward_1" in r for r in trained)
    assert any("turn_explained_variance_1" in r for r in trained)
    assert all(r["reward"] > 0 for r in trained)  # the bonus alone makes every return positive
    rows = read_jsonl(run_dir / SAMPLES_FILE)[0]["samples"]
    assert all({"prompt", "completion", "score", "game_seed", "turns", "turn_rewards"} <= set(row) for row in rows)
    assert all(row["prompt"].startswith("Talk to me") for row in rows)
    assert all(row["completion"].count("ok") == row["turns"] - 1 for row in rows)  # a reply between two turns
    assert all(row["score"] == pytest.approx(sum(row["turn_rewards"])) for row in rows)
    evaluation = evaluate_text_run(run_dir, prompts=4, seed=1, base=True)  # the run's seed: its first evaluation
    assert {"success", "turns"} <= set(evaluation.metrics) and len(evaluation.scores) == 4
    assert sum(evaluation.scores) / 4 == pytest.approx(records[0]["eval_reward"])
    assert evaluation.metrics["turns"] == pytest.approx(records[0]["eval_turns"])


@pytest.mark.parametrize(
    "objective,text",
    [
        (GRPO(group_size=2), {}),
        (Clip(), {"multi_turn_gae": "bi-level", "turn_gamma": 0.9}),
        (GiGPO(group_size=2), {"turn_gamma": 0.9}),
    ],
    ids=["grpo-episode-groups", "clip-bi-level", "gigpo"],
)
def test_group_and_bi_level_credit_train_on_a_game(tmp_path, game_file, objective, text):
    run_dir = train_text(game_config(tmp_path, "run", game_file, objective=objective, total_steps=96, **text))
    records = [r for r in read_jsonl(run_dir / METRICS_FILE) if r["iteration"] > 0]
    assert records and records[-1]["global_step"] >= 96
    assert all(r["policy_loss"] == r["policy_loss"] for r in records)  # finite, not NaN
    seeds = [row["game_seed"] for row in read_jsonl(run_dir / SAMPLES_FILE)[0]["samples"]]
    if objective.name != "clip":  # G episodes of one game seed side by side
        assert seeds[0] == seeds[1] and seeds[2] == seeds[3]


def test_a_failing_game_keeps_the_checkpoint_and_the_resumed_run_matches(tmp_path, game_file, monkeypatch):
    whole = train_text(game_config(tmp_path, "whole", game_file, total_steps=400, eval_every=0))
    (game_file.parent / "turns.txt").unlink()
    turns_before_failure = sum(r["task_turns"] * 8 for r in read_jsonl(whole / METRICS_FILE)[:2])
    monkeypatch.setenv("GAME_FAILS_AT", str(round(turns_before_failure) + 3))  # in the third iteration
    with pytest.raises(GameError, match=r"game Countdown \(episode seed \d+, turn \d\) raised RuntimeError") as error:
        train_text(game_config(tmp_path, "broken", game_file, total_steps=400, eval_every=0))
    assert "\n" not in str(error.value)
    broken = tmp_path / "runs" / "broken"
    assert load_checkpoint(broken)["iteration"] == 2
    monkeypatch.delenv("GAME_FAILS_AT")
    resume = RunConfig(resume=broken, progress=False, compile=False)
    train_text(replace(game_config(tmp_path, "ignored", game_file, total_steps=400, eval_every=0), run=resume))
    assert without_measurements(read_jsonl(whole / METRICS_FILE)) == without_measurements(
        read_jsonl(broken / METRICS_FILE)
    )


def test_the_cli_trains_a_shipped_game_and_a_file_game(tmp_path, game_file):
    common = [
        "train", "text", "--model", "tiny", "--prompts-per-iteration", "4", "--max-new-tokens", "4",
        "--max-context-tokens", "200", "--minibatch-size", "2", "--epochs", "1", "--total-steps", "16",
        "--no-progress", "--runs-dir", str(tmp_path), "--torch-threads", "1",
    ]  # fmt: skip
    shipped = run_ppo(*common, "--run-name", "guess", "--max-turns", "2", "guess-number", "--high", "8")
    assert shipped.returncode == 0, shipped.stderr[-3000:]
    config = json.loads((tmp_path / "guess" / "config.json").read_text())
    assert config["text"]["task"] == {"name": "guess-number", "high": 8} and config["text"]["max_turns"] == 2
    from_file = run_ppo(
        *common, "--run-name", "file", "custom-game", "--env-file", f"{game_file}:Countdown", "--game-options",
        '{"bonus": 1}', "grpo", "--group-size", "2",
    )  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr[-3000:]
    assert all(r["reward"] >= 1 for r in read_jsonl(tmp_path / "file" / METRICS_FILE))


@pytest.mark.parametrize(
    "task,text,message",
    [
        (ArithmeticTaskConfig(), {"max_turns": 3}, "--max-turns, --multi-turn-gae and --turn-gamma are for"),
        (GuessNumberConfig(), {"turn_gamma": 1.5}, "--turn-gamma must be in"),
        (GuessNumberConfig(), {"eos_penalty": -1.0}, "--eos-penalty shape a single completion's score"),
        (GuessNumberConfig(), {"max_turns": 0}, "--max-turns and --max-context-tokens must be >= 1"),
        (GuessNumberConfig(), {"prompts_without_replacement": True}, "a game draws fresh episode seeds"),
    ],
)
def test_impossible_game_settings_are_one_line_errors(task, text, message):
    config = TextTrainConfig(text=TextEnvConfig(model="tiny", task=task, **text))
    with pytest.raises(ConfigError, match=message) as error:
        validate_text_config(config)
    assert "\n" not in str(error.value)


def test_a_game_file_that_does_not_work_is_a_one_line_error_before_training(tmp_path, game_file):
    with pytest.raises(GameError, match="custom-game needs --env-file"):
        CustomGameConfig(env_file="countdown.py")
    with pytest.raises(GameError, match="is not JSON"):
        CustomGameConfig(env_file=f"{game_file}:Countdown", game_options="{bonus: 1}")
    result = run_ppo(
        "train", "text", "--model", "tiny", "--no-progress", "--runs-dir", str(tmp_path), "--max-context-tokens",
        "200", "custom-game", "--env-file", f"{game_file}:Nothing",
    )  # fmt: skip
    assert result.returncode != 0 and "Nothing" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "text-custom-game").exists() or not list(tmp_path.glob("*/checkpoints/*"))


def test_held_out_episodes_do_not_depend_on_the_batching(tiny):
    model, tokenizer = tiny
    seeds = [3, 7, 8, 10]
    uniforms = torch.rand(4, 3, 6, generator=torch.Generator().manual_seed(1))
    together = play_episodes(model, tokenizer, Countdown, seeds, uniforms, SETTINGS, sampling_batch=4)
    apart = play_episodes(model, tokenizer, Countdown, seeds, uniforms, SETTINGS, sampling_batch=1)
    assert together.completions == apart.completions
    assert torch.equal(together.turns.policy_mask, apart.turns.policy_mask)
    assert torch.equal(together.scores, apart.scores)


def test_step_group_advantages_normalise_within_each_state_against_hand_values():
    returns = torch.tensor([1.0, 0.0, 0.5, 2.0, 0.3, 0.3], dtype=torch.float64)
    groups = torch.tensor([7, 7, 7, 3, 9, 9])
    out = step_group_advantages(returns, groups, eps=0.0)
    mean, std = 0.5, 0.5  # of 1, 0, 0.5: unbiased std sqrt((0.25 + 0.25 + 0) / 2)
    expected = torch.tensor([(1 - mean) / std, (0 - mean) / std, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert torch.allclose(out, expected, atol=1e-12)  # a lone step and a tie give exactly 0
    assert out[3] == 0 and out[4] == 0 and out[5] == 0


def scripted_turns():
    """Two groups of two episodes (two turns at most, T = 7): ``P P E E P P .``; episodes 0 and 1 got the same reply
    (token 5) after turn 1, episode 2 another (token 6), episode 3 stopped after one turn."""
    policy = torch.tensor([[1, 1, 0, 0, 1, 1, 0]] * 3 + [[1, 1, 0, 0, 0, 0, 0]], dtype=torch.float32)
    response_ids = torch.tensor([[1, 2, 5, 5, 3, 4, 0], [1, 9, 5, 5, 3, 3, 0], [1, 2, 6, 6, 3, 4, 0], [8, 8] + [0] * 5])
    response_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]] * 3 + [[1, 1, 0, 0, 0, 0, 0]])
    turn_ends = torch.zeros(4, 7, dtype=torch.bool)
    turn_ends[:3, 1] = turn_ends[:3, 5] = True
    turn_ends[3, 1] = True
    turn_index = torch.tensor([[0, 0, -1, -1, 1, 1, -1]] * 3 + [[0, 0, -1, -1, -1, -1, -1]])
    turns = TurnStructure(
        policy, turn_ends, turn_index, torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.5, 1.0], [1.0, 0.0]]),
        torch.tensor([2, 2, 2, 1]), torch.tensor([True, False, True, True]), torch.zeros(4, dtype=torch.bool),
        torch.tensor([11, 11, 12, 12]),
    )  # fmt: skip
    return turns, response_ids, response_mask


def test_turns_share_a_state_when_their_group_got_the_same_replies_before_them():
    turns, response_ids, response_mask = scripted_turns()
    states = turn_states(turns, response_ids, response_mask, group_size=2)
    assert states[0, 0] == states[1, 0] != states[2, 0] == states[3, 0]  # turn 1: one state per group
    assert states[0, 1] == states[1, 1]  # the same reply, however the turns were worded (token 2 against 9)
    assert states[2, 1] != states[3, 1] and len({int(s) for s in states[:, 1]}) == 3


def test_gigpo_adds_the_episode_and_the_step_advantage_against_hand_values():
    turns, response_ids, response_mask = scripted_turns()
    settings = TextBatchSettings(
        max_new_tokens=2, max_prompt_tokens=8, temperature=1.0, forward_batch=4, gamma=1.0, gae_lambda=1.0,
        eos_penalty=None, whiten_advantages=False, advantage_estimator="gigpo", group_size=2, turn_gamma=0.5,
        step_weight=2.0,
    )  # fmt: skip
    outcome = turns.turn_rewards.sum(1)  # 1, 0 | 1.5, 1
    advantages = gigpo_advantages(outcome, turns, response_ids, response_mask, settings)
    eps = 1e-4  # GRPO's, added to the std
    spread = torch.tensor([1.0, 1.0, 0.5, 0.5])  # each group: +-d/2 over the std d/sqrt(2)
    episode = torch.tensor([1.0, -1.0, 1.0, -1.0]) * spread / 2 / (spread * 2**-0.5 + eps)
    # step returns with turn_gamma 0.5: turn 1: 0.5, 0 | 1.0, 1.0 (a tie); turn 2: 1, 0 (one state) | 1 alone
    step1 = torch.tensor([1.0, -1.0, 0.0, 0.0]) * 0.25 / (0.5**0.5 * 0.5 + eps)
    step2 = torch.tensor([1.0, -1.0, 0.0, 0.0]) * 0.5 / (2**-0.5 + eps)
    expected = torch.zeros(4, 7)
    expected[:, :2] = (episode + 2.0 * step1).unsqueeze(1)
    expected[:3, 4:6] = (episode + 2.0 * step2)[:3].unsqueeze(1)
    assert torch.allclose(advantages, expected, atol=1e-5)


@pytest.mark.parametrize("world", ["walkers", "arithmetic"])
def test_gigpo_outside_a_game_is_a_one_line_error(tmp_path, world):
    arguments = ["train", "--env-id", "Hopper-v5"] if world == "walkers" else ["train", "text", "--model", "tiny"]
    task = [] if world == "walkers" else ["arithmetic"]
    result = run_ppo(*arguments, "--runs-dir", str(tmp_path), "--no-progress", *task, "gigpo")
    assert result.returncode != 0 and "gigpo groups the turns" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_compare_grid_takes_a_shipped_game_and_refuses_gigpo_elsewhere(tmp_path):
    from agents.commands.compare import CompareConfig, GridError, cell_config, expand_grid

    grid = CompareConfig(
        envs=("text:guess-number", "InvertedPendulum-v5"), objectives=("gigpo",), seeds=(1,), model="tiny",
        prompts_per_iteration=8, task_options=("high=8",), runs_dir=tmp_path,
    )  # fmt: skip
    game_cell, walker_cell = expand_grid(grid)
    parsed = cell_config(game_cell, grid, tmp_path / "grid")
    assert parsed.text.task == GuessNumberConfig(high=8) and parsed.objective == GiGPO()
    with pytest.raises((ConfigError, GridError), match="gigpo groups the turns"):
        cell_config(walker_cell, grid, tmp_path / "grid")
