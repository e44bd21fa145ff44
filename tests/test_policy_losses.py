"""Round 3's policy losses (issue 28), each against hand-computed values and gradients on sequences of unequal
length, clipped regions included; GSPO's sequence ratio against a brute-force mean; k2 in the loss against the
score-function gradient of the KL on the tiny model; and a smoke run of every new objective."""

import copy
import math

import numpy as np
import pytest
import torch

from agents.commands.compare import LOSS_OBJECTIVES, PRESET_GROUPS, PRESETS, cell_config, expand_grid
from agents.core.advantages import discounted_returns, reinforce_pp_advantages
from agents.core.batch import Minibatch
from agents.core.config import ConfigError, PPOConfig
from agents.core.losses import (
    SurrogateInputs,
    aggregate,
    cispo_surrogate,
    clip_surrogate,
    dual_clip_surrogate,
    gmpo_surrogate,
    gspo_surrogate,
    gspo_token_surrogate,
    sapo_surrogate,
    sequence_log_ratio,
)
from agents.core.minibatch_step import LossSettings, minibatch_loss
from agents.core.objectives import (
    CISPO,
    GMPO,
    GRPO,
    GSPO,
    OBJECTIVES,
    SAPO,
    DualClip,
    GSPOToken,
    ReinforcePP,
    ReinforcePPBaseline,
    objective_label,
    uses_critic,
)
from agents.core.policy import Evaluation
from agents.runs.config import config_to_dict
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.runs.reader import objective_of
from agents.text.actor_critic import sample_responses, token_log_probs_and_entropy
from agents.text.config import TEXT_PPO_DEFAULTS, validate_text_config
from agents.text.train import train_text
from agents.walkers.rollout import EpisodeGroup, reinforce_pp_steps
from agents.walkers.train import train
from envs.text.models import build_tiny_model
from tests.conftest import tiny_config
from tests.test_compare import tiny_grid
from tests.test_train_text import custom_task, tiny_text_config  # noqa: F401 - custom_task is a fixture

OLD_LOGP = -1.0
"""Every token's old log-prob in the hand cases: log pi = OLD_LOGP + the log ratio given."""


def sequences(log_ratios: list[list[float]], advantages: list[list[float]]):
    """Right-padded ``(B, T)`` inputs from ragged rows; returns the leaf ``logp`` (for its gradient) and the inputs."""
    width = max(len(row) for row in log_ratios)

    def padded(rows):
        return torch.tensor([row + [0.0] * (width - len(row)) for row in rows], dtype=torch.float64)

    mask = padded([[1.0] * len(row) for row in log_ratios])
    old_logp = OLD_LOGP * mask
    logp = (old_logp + padded(log_ratios)).requires_grad_(True)
    x = SurrogateInputs(logp, old_logp, padded(advantages) * mask, torch.zeros_like(mask), mask)
    return logp, x


def gradient(loss: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    return torch.autograd.grad(loss, logp)[0]


def test_gspos_sequence_ratio_is_the_brute_force_mean_of_each_rows_valid_log_ratios():
    generator = torch.Generator().manual_seed(0)
    logp, old_logp = torch.randn(5, 7, generator=generator), torch.randn(5, 7, generator=generator)
    lengths = [7, 1, 4, 0, 3]
    mask = torch.tensor([[1.0] * n + [0.0] * (7 - n) for n in lengths])
    expected = [sum(float(logp[i, t] - old_logp[i, t]) for t in range(n)) / max(n, 1) for i, n in enumerate(lengths)]
    assert torch.allclose(sequence_log_ratio(logp, old_logp, mask), torch.tensor(expected), atol=1e-6)


def test_gspo_clips_whole_sequences_and_gives_unclipped_tokens_a_s_over_length():
    # row 0: mean log ratio 1e-4, inside [1 - 3e-4, 1 + 4e-4]; row 1: 1e-3 with A > 0, above; row 2: -1e-3 with
    # A < 0, below: the two clipped rows give none of their tokens a gradient
    logp, x = sequences([[1e-4, -1e-4, 3e-4], [1e-3, 1e-3], [-1e-3]], [[1.0] * 3, [2.0] * 2, [-1.0]])
    loss = gspo_surrogate(x, 3e-4, 4e-4, "sequence-mean")
    s0 = math.exp(1e-4)
    assert loss.item() == pytest.approx(-(s0 * 1.0 + (1 + 4e-4) * 2.0 + (1 - 3e-4) * -1.0) / 3, abs=1e-12)
    expected = torch.zeros(3, 3, dtype=torch.float64)
    expected[0] = -(1 / 3) * 1.0 * s0 / 3
    grads = gradient(loss, logp)
    assert torch.equal(grads[1:], expected[1:]), "clipped sequences: exactly zero"
    assert torch.allclose(grads, expected, atol=1e-15)


def test_gspo_token_equals_gspo_with_one_advantage_per_sequence_and_weighs_each_tokens_own_otherwise():
    rows, advantages = [[1e-4, -1e-4, 3e-4], [1e-3, 1e-3], [2e-4]], [[1.0] * 3, [2.0] * 2, [-1.0]]
    logp, x = sequences(rows, advantages)
    logp_token, x_token = sequences(rows, advantages)
    gspo, token = gspo_surrogate(x, 3e-4, 4e-4), gspo_token_surrogate(x_token, 3e-4, 4e-4)
    assert token.item() == pytest.approx(gspo.item(), abs=1e-15)
    assert torch.allclose(gradient(gspo, logp), gradient(token, logp_token), atol=1e-15)
    logp, x = sequences([[1e-4, -1e-4, 3e-4], [1e-3, 1e-3]], [[1.0, 2.0, 3.0], [2.0, 2.0]])
    loss = gspo_token_surrogate(x, 3e-4, 4e-4)
    s0 = math.exp(1e-4)
    assert loss.item() == pytest.approx(-(s0 * (1 + 2 + 3) / 3 + (1 + 4e-4) * 2.0) / 2, abs=1e-12)
    expected = torch.tensor([[-0.5 * a * s0 / 3 for a in (1.0, 2.0, 3.0)], [0.0, 0.0, 0.0]], dtype=torch.float64)
    grads = gradient(loss, logp)
    assert torch.allclose(grads, expected, atol=1e-15) and torch.equal(grads[1], expected[1]), "row 1 is clipped"


def test_gmpo_clips_each_token_in_log_space_on_the_side_its_advantage_pushes():
    # A > 0: only log r > 0.4 is clipped (0.5); A < 0: only log r < -0.4 (-0.6); -0.6 under A > 0 stays
    logp, x = sequences([[0.1, 0.5, -0.6], [0.5, -0.6]], [[1.0] * 3, [-2.0] * 2])
    loss = gmpo_surrogate(x, 0.4, None, "sequence-mean")
    g0, g1 = math.exp((0.1 + 0.4 - 0.6) / 3), math.exp((0.5 - 0.4) / 2)
    assert loss.item() == pytest.approx(-(1.0 * g0 - 2.0 * g1) / 2, abs=1e-12)
    expected = torch.tensor(
        [[-0.5 * g0 / 3, 0.0, -0.5 * g0 / 3], [-0.5 * -2.0 * g1 / 2, 0.0, 0.0]], dtype=torch.float64
    )
    grads = gradient(loss, logp)
    assert torch.allclose(grads, expected, atol=1e-15)
    assert grads[0, 1] == 0 and grads[1, 1] == 0 and grads[1, 2] == 0, "clipped tokens and padding: exactly zero"


def test_cispo_keeps_the_gradient_of_tokens_that_clip_zeroes():
    # token (0, 1) has r = e^2 > 5 = max weight; under PPO-Clip (A > 0, r > 1.2) its gradient is exactly zero
    logp, x = sequences([[0.1, 2.0, -0.3], [0.0, 1.0]], [[1.0] * 3, [-2.0] * 2])
    loss = cispo_surrogate(x, 5.0, "token-mean")
    weights = [[math.exp(0.1), 5.0, math.exp(-0.3)], [1.0, math.e]]
    advantages = [[1.0] * 3, [-2.0] * 2]
    logps = [[OLD_LOGP + 0.1, OLD_LOGP + 2.0, OLD_LOGP - 0.3], [OLD_LOGP, OLD_LOGP + 1.0]]
    value = -sum(w * a * lp for ws, aa, lps in zip(weights, advantages, logps) for w, a, lp in zip(ws, aa, lps)) / 5
    assert loss.item() == pytest.approx(value, abs=1e-12)
    expected = torch.tensor([[-w * a / 5 for w, a in zip(ws, aa)] + [0.0] * (3 - len(ws)) for ws, aa in
                             zip(weights, advantages)], dtype=torch.float64)  # fmt: skip
    grads = gradient(loss, logp)
    assert torch.allclose(grads, expected, atol=1e-15) and grads[0, 1].item() == pytest.approx(-1.0)
    clip_logp, clip_x = sequences([[0.1, 2.0, -0.3], [0.0, 1.0]], [[1.0] * 3, [-2.0] * 2])
    assert gradient(clip_surrogate(clip_x, 0.2), clip_logp)[0, 1] == 0, "where PPO-Clip gives none"


def test_sapos_soft_gate_has_the_plain_gradient_on_policy_and_fades_with_its_temperature():
    logp, x = sequences([[0.0, 0.5, -0.5], [0.0, 2.0]], [[1.0] * 3, [-1.0] * 2])
    loss = sapo_surrogate(x, 1.0, 1.05, "sequence-mean")

    def sigmoid(z):
        return 1 / (1 + math.exp(-z))

    rows = [([0.0, 0.5, -0.5], 1.0, 1.0), ([0.0, 2.0], -1.0, 1.05)]
    value = -sum(sum(sigmoid(tau * (math.exp(u) - 1)) * 4 / tau * a for u in us) / len(us) for us, a, tau in rows) / 2
    assert loss.item() == pytest.approx(value, abs=1e-12)
    expected = torch.zeros(2, 3, dtype=torch.float64)
    for i, (us, a, tau) in enumerate(rows):
        for t, u in enumerate(us):  # d/du of sigmoid(tau (e^u - 1)) 4 / tau = sigmoid'(.) 4 e^u
            z = tau * (math.exp(u) - 1)
            expected[i, t] = -0.5 / len(us) * a * sigmoid(z) * (1 - sigmoid(z)) * 4 * math.exp(u)
    grads = gradient(loss, logp)
    assert torch.allclose(grads, expected, atol=1e-15)
    assert grads[0, 0].item() == pytest.approx(-0.5 / 3) and grads[1, 0].item() == pytest.approx(0.5 / 2), "r = 1"
    assert 0 < abs(grads[1, 1].item()) < abs(grads[1, 0].item()), "far off policy: soft, not zero"


def test_dual_clip_bounds_negative_advantages_below_by_c_a():
    # (r, A): (5, -1) c A binds; (2, -1) r A; (0.5, -1) clipped low; (1.5, 1) clipped high; (1.1, 1) r A
    logp, x = sequences([[math.log(5.0), math.log(2.0), math.log(0.5)], [math.log(1.5), math.log(1.1)]],
                        [[-1.0, -1.0, -1.0], [1.0, 1.0]])  # fmt: skip
    loss = dual_clip_surrogate(x, 0.2, None, 3.0, "token-mean")
    assert loss.item() == pytest.approx(-(-3.0 - 2.0 - 0.8 + 1.2 + 1.1) / 5, abs=1e-12)
    expected = torch.tensor([[0.0, 2.0 / 5, 0.0], [0.0, -1.1 / 5, 0.0]], dtype=torch.float64)
    grads = gradient(loss, logp)
    assert torch.allclose(grads, expected, atol=1e-15) and grads[0, 0] == 0 and grads[0, 2] == 0
    clip_logp, clip_x = sequences([[math.log(5.0)]], [[-1.0]])
    assert gradient(clip_surrogate(clip_x, 0.2), clip_logp)[0, 0].item() == pytest.approx(5.0), "plain clip pulls"


def test_discounted_returns_and_reinforce_pp_whitening_against_hand_values():
    rewards = torch.tensor([[0.0, -0.1, 2.0], [0.5, 1.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    returns = discounted_returns(rewards, mask, 0.5)
    hand = torch.tensor([[-0.05 + 0.5, -0.1 + 1.0, 2.0], [0.5 + 0.5, 1.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(returns, hand, atol=1e-15), "G_t = r_t + gamma G_t+1, padding 0 and not summed"
    valid = [0.45, 0.9, 2.0, 1.0, 1.0]
    mean = sum(valid) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in valid) / 4)
    expected = torch.tensor([[(v - mean) / (std + 1e-8) for v in valid[:3]], [(v - mean) / (std + 1e-8) for v in
                             valid[3:]] + [0.0]], dtype=torch.float64)  # fmt: skip
    assert torch.allclose(reinforce_pp_advantages(rewards, mask, 0.5), expected, atol=1e-12)


def test_reinforce_pp_whitens_over_every_process_through_the_sum_it_is_given():
    # each process's half, its three local sums replaced by those over both halves (what all_reduce_sum returns),
    # is whitened as the whole batch is in one process
    rewards = torch.tensor([[1.0, 2.0], [0.0, 4.0], [3.0, -1.0], [2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    whole = reinforce_pp_advantages(rewards, mask, 1.0)
    returns = discounted_returns(rewards, mask, 1.0)
    count, total = mask.sum(), (returns * mask).sum()
    squares = (((returns - total / count) * mask) ** 2).sum()
    for half in (slice(0, 2), slice(2, 4)):
        over_both = iter([count, total, squares])  # whiten's sums, in its order: count, sum, squared deviations
        part = reinforce_pp_advantages(
            rewards[half], mask[half], 1.0, sum_over_processes=lambda _, s=over_both: next(s)
        )
        assert torch.allclose(part, whole[half], atol=1e-12) and not torch.allclose(
            part, reinforce_pp_advantages(rewards[half], mask[half], 1.0)
        ), "another batch's statistics"


def test_reinforce_pp_baseline_on_a_walker_group_subtracts_the_groups_mean_reward_at_each_step():
    rewards = [[1.0, 1.0, 1.0], [1.0], [1.0, 1.0]]
    steps = [[np.zeros(1)] * len(r) for r in rewards]
    group = EpisodeGroup(steps, steps, np.array([3.0, 1.0, 2.0]), rewards)
    plain = reinforce_pp_steps(0.9, "reinforce++", group)
    assert torch.allclose(plain, torch.tensor([[1 + 0.9 + 0.81, 1.9, 1.0], [1.0, 0, 0], [1.9, 1.0, 0]]), atol=1e-6)
    centred = reinforce_pp_steps(0.9, "reinforce++-baseline", group)
    # mean rewards per step over the 3 episodes (0 once over): 1, 2/3, 1/3
    r = [[0.0, 1 / 3, 2 / 3], [0.0], [0.0, 1 / 3]]
    hand = [[r[0][0] + 0.9 * r[0][1] + 0.81 * r[0][2], r[0][1] + 0.9 * r[0][2], r[0][2]], [0.0, 0, 0],
            [r[2][0] + 0.9 * r[2][1], r[2][1], 0]]  # fmt: skip
    assert torch.allclose(centred, torch.tensor(hand), atol=1e-6)


def on_policy_tokens(model, generator):
    """Completions sampled from ``model`` itself, of unequal lengths: ids ``(B, P + T)``, mask, response mask."""
    prompt_ids = torch.randint(1, 300, (4, 3), generator=generator)
    prompt_mask = torch.ones_like(prompt_ids)
    uniforms = torch.rand(4, 6, generator=generator)
    with torch.no_grad():
        sampled = sample_responses(model, prompt_ids, prompt_mask, uniforms, 1.0, eos_id=0, pad_id=0)
    response_mask = sampled.response_mask.float()
    response_mask[1, 4:] = 0  # rows of unequal length
    response_mask[3, 2:] = 0
    ids = torch.cat([prompt_ids, sampled.response_ids], 1)
    return ids, torch.cat([prompt_mask, response_mask.long()], 1), sampled.response_ids, response_mask


def response_logp(model, ids, attention_mask, response_ids):
    logits = model(input_ids=ids, attention_mask=attention_mask).logits[
        :, ids.shape[1] - response_ids.shape[1] - 1 : -1
    ]
    return token_log_probs_and_entropy(logits, response_ids, 1.0)[0]


def test_k2_in_the_loss_has_the_score_function_gradient_of_the_kl_on_policy_and_k3_does_not():
    """arXiv 2510.01555, on-policy and per token: grad of k2 = (log pi - log pi_ref)^2 / 2 in the loss equals
    E[(log pi - log pi_ref) grad log pi], the score-function gradient of KL(pi || pi_ref) (k1 in the reward), and
    so does k3 * pi / pi_old (DeepSeek-V3.2's correction, TRL's default); the gradient of k3 in the loss,
    (1 - pi_ref / pi) grad log pi, does not. Through the core's own loss."""
    torch.manual_seed(0)
    model, _ = build_tiny_model()
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    ids, attention_mask, response_ids, mask = on_policy_tokens(model, torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref_logp = response_logp(reference, ids, attention_mask, response_ids)
    parameters = [p for p in model.parameters() if p.requires_grad]

    def gradient_of(estimator):
        logp = response_logp(model, ids, attention_mask, response_ids)
        zero = torch.zeros_like(mask)
        batch = Minibatch({}, logp.detach(), zero, zero, zero, mask, ref_logp)
        settings = LossSettings(GRPO(), TEXT_PPO_DEFAULTS, 1.0, estimator)
        loss, _ = minibatch_loss(Evaluation(logp, zero, zero, zero), batch, torch.tensor(0.0), settings)
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, parameters)])

    logp = response_logp(model, ids, attention_mask, response_ids)
    score_function = aggregate((logp - ref_logp).detach() * logp, mask, "sequence-mean")  # GRPO's aggregation
    expected = torch.cat([g.flatten() for g in torch.autograd.grad(score_function, parameters)])
    k2, k3, k3_ratio = gradient_of("k2"), gradient_of("k3"), gradient_of("k3-ratio")
    assert expected.norm() > 0 and torch.allclose(k2, expected, rtol=1e-5, atol=1e-8)
    # the same gradient up to float32 rounding: (k3 + 1 - rho) cancels where k2's (log pi - log pi_ref) does not
    assert (k3_ratio - expected).norm() < 1e-5 * expected.norm(), "k3 * pi / pi_old: the same gradient"
    assert (k3 - expected).norm() > 0.1 * expected.norm(), "k3's gradient is another one"


def test_k2_is_refused_where_the_kl_is_not_in_the_loss(tmp_path, custom_task):  # noqa: F811
    with pytest.raises(ConfigError, match="--ref-kl-estimator k2 estimates the KL in the loss, but clip puts it in"):
        validate_text_config(tiny_text_config(tmp_path, "k2", custom_task, ref_kl_estimator="k2"))


TEXT_OBJECTIVES = [DualClip(), GSPO(group_size=4), GSPOToken(group_size=4), GMPO(group_size=4),
                   CISPO(group_size=4), SAPO(group_size=4), ReinforcePP(group_size=4),
                   ReinforcePPBaseline(group_size=4)]  # fmt: skip


@pytest.mark.parametrize("objective", TEXT_OBJECTIVES, ids=lambda o: o.name)
def test_every_new_objective_trains_the_tiny_text_model(tmp_path, custom_task, objective):  # noqa: F811
    config = tiny_text_config(tmp_path, objective.name, custom_task, total_steps=8 * 8 * 2, objective=objective)
    records = read_jsonl(train_text(config) / METRICS_FILE)
    assert len(records) == 2 and all(math.isfinite(r["policy_loss"]) for r in records)
    assert any(r["approx_kl_k3"] > 0 for r in records), "the policy moved"
    if not uses_critic(objective):
        assert all(r["value_loss"] == 0.0 for r in records), "no critic"


@pytest.mark.parametrize("estimator", ["k2", "k3-ratio"])
def test_the_other_estimators_in_the_loss_train_the_tiny_text_model(tmp_path, custom_task, estimator):  # noqa: F811
    config = tiny_text_config(tmp_path, estimator, custom_task, total_steps=8 * 8 * 2, objective=GRPO(group_size=4),
                              ref_kl_estimator=estimator)  # fmt: skip
    records = read_jsonl(train_text(config) / METRICS_FILE)
    assert records[0]["ref_kl_coef"] == 0.04 and records[1]["reference_kl_loss"] > 0


WALKER_OBJECTIVES = [DualClip(), CISPO(group_size=4), SAPO(group_size=4), ReinforcePP(group_size=4),
                     ReinforcePPBaseline(group_size=4)]  # fmt: skip


@pytest.mark.parametrize("objective", WALKER_OBJECTIVES, ids=lambda o: o.name)
def test_every_new_objective_defined_on_walkers_trains_inverted_pendulum(tmp_path, objective):
    config = tiny_config(tmp_path, objective.name, objective=objective, env_id="InvertedPendulum-v5", total_steps=2048)
    records = read_jsonl(train(config) / METRICS_FILE)
    assert records[-1]["global_step"] >= 2048 and all(math.isfinite(r["policy_loss"]) for r in records)
    assert all((r["value_loss"] == 0.0) == (not uses_critic(objective)) for r in records[1:])


@pytest.mark.parametrize(
    "objective", [GSPO(group_size=4), GSPOToken(group_size=4), GMPO(group_size=4)], ids=lambda o: o.name
)
def test_sequence_level_objectives_train_inverted_pendulum_on_whole_episodes(tmp_path, objective):
    """A walker episode is the sequence: the batch holds one masked row per episode, and the update takes whole
    episodes, about as many minibatches as transitions would give."""
    config = tiny_config(tmp_path, objective.name, objective=objective, env_id="InvertedPendulum-v5", total_steps=1024)
    records = read_jsonl(train(config) / METRICS_FILE)
    assert records[-1]["global_step"] >= 1024 and all(math.isfinite(r["policy_loss"]) for r in records)
    assert any(r["approx_kl_k3"] > 0 for r in records), "the policy moved"


def test_an_episode_batch_holds_one_masked_row_per_episode_and_minibatches_of_whole_episodes():
    from agents.core.batch import Minibatch
    from agents.walkers.rollout import episode_batch
    from agents.walkers.train import episode_minibatches

    steps = torch.arange(6.0)
    transitions = Minibatch({"obs": torch.stack([steps, -steps], 1)}, steps, steps, steps, steps, torch.ones(6))
    rows = episode_batch(transitions, [2, 3, 1])
    assert rows.mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert rows.old_logp.tolist() == [[0, 1, 0], [2, 3, 4], [5, 0, 0]]
    assert rows.inputs["obs"].shape == (3, 3, 2) and rows.inputs["obs"][1, 2].tolist() == [4, -4]
    # 3 episodes of 6 steps, minibatches of 2 transitions would be 3 gradient steps: one episode each
    assert episode_minibatches(PPOConfig(minibatch_size=2), rows).minibatch_size == 1
    assert episode_minibatches(PPOConfig(minibatch_size=4), rows).minibatch_size == 2


def test_round_3_presets_follow_the_group_methods_and_make_cells_where_their_loss_is_defined(tmp_path):
    losses = [objective_label(o) for o in LOSS_OBJECTIVES]
    assert list(PRESETS)[15 : 15 + len(losses)] == losses == list(PRESET_GROUPS["losses"])
    for objective in LOSS_OBJECTIVES:
        name = objective_label(objective)
        text = tiny_grid(tmp_path, envs=("text:arithmetic",), objectives=(name,), model="tiny", prompts_per_iteration=8)
        parsed = cell_config(expand_grid(text)[0], text, tmp_path / "runs" / "grid")
        assert parsed.objective == PRESETS[name].objective == OBJECTIVES[objective.name]()
        assert objective_label(objective_of(config_to_dict(parsed))) == name  # ppo report groups it by its name
        walker = tiny_grid(tmp_path, envs=("InvertedPendulum-v5",), objectives=(name,))
        assert cell_config(expand_grid(walker)[0], walker, tmp_path / "runs" / "grid").objective == objective
