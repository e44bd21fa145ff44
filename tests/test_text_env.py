"""The token-level text environment and the batched, KV-cached path that training uses."""

import copy

import gymnasium as gym
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import envs.text  # noqa: F401 - registers ppo/TextGen-v0
from agents.core.config import PPOConfig
from agents.core.minibatch_step import STAT_NAMES, make_minibatch_step
from agents.core.objectives import Clip
from agents.core.optimizer import AdamState
from agents.core.update import UpdateSchedule, ppo_update
from agents.text.actor_critic import (
    LMActorCritic,
    ReferencePolicy,
    continue_prompts,
    filled_columns,
    inverse_cdf_sample,
    sample_responses,
)
from agents.text.rollout import TextBatchSettings, build_text_batch, sample_completions, shaped_rewards
from envs.text.env import TextGenEnv
from envs.text.models import ModelLoadError, build_tiny_model
from envs.text.tasks import ArithmeticTask, TaskError, arithmetic_answer
from tests.conftest import passes_gymnasium_and_sb3_checkers

PROMPTS = ["the movie was", "a film", "this story is very", "one actor"]


def letter_count(prompts, completions):
    return [float(c.count("o")) for c in completions], {"length_chars": [float(len(c)) for c in completions]}


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model()


def collect(policy, reference, tokenizer, prompts, score, batch_settings, ref_kl_coef, generator):
    """What a text iteration does before its update: sample and score one completion per prompt, then build the
    batch (with the reference's KL at ``ref_kl_coef``)."""
    samples = sample_completions(policy, tokenizer, prompts, score, batch_settings, generator)
    return build_text_batch(policy, reference, tokenizer, samples, batch_settings, ref_kl_coef)


def settings(**overrides):
    base = dict(
        max_new_tokens=10,
        max_prompt_tokens=16,
        temperature=1.0,
        forward_batch=3,
        gamma=1.0,
        gae_lambda=0.95,
        eos_penalty=None,
        whiten_advantages=True,
    )
    return TextBatchSettings(**{**base, **overrides})


def test_env_passes_the_gymnasium_checker(tiny):
    _, tokenizer = tiny
    env = gym.make(
        "ppo/TextGen-v0",
        tokenizer=tokenizer,
        prompts=PROMPTS,
        score=lambda p, c: letter_count(p, c)[0],
        max_new_tokens=6,
        max_prompt_tokens=8,
    )
    check_env(env.unwrapped, skip_render_check=True)


def test_registered_id_builds_from_names_and_scores_with_the_task(tiny):
    _, tokenizer = tiny
    env = gym.make("ppo/TextGen-v0", model="tiny", task="arithmetic", max_new_tokens=4, max_prompt_tokens=16)
    passes_gymnasium_and_sb3_checkers(env)
    assert env.unwrapped.prompts == ArithmeticTask().prompts("train")
    held_out = gym.make("ppo/TextGen-v0", model="tiny", task="arithmetic", split="eval").unwrapped.prompts
    assert held_out == ArithmeticTask().prompts("eval") and not set(held_out) & set(env.unwrapped.prompts)
    prompt = env.unwrapped.prompts[0]
    rewards = []
    for answer in (arithmetic_answer(prompt), arithmetic_answer(prompt) + 1):
        env.reset(seed=0, options={"prompt": prompt})
        for token in tokenizer(f" {answer}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]:
            _, reward, terminated, _, _ = env.step(token)
        assert terminated
        rewards.append(reward)
    assert rewards == [1.0, 0.0], "the right answer scores 1, a wrong one 0: the arithmetic checker is the reward"


def test_registered_id_takes_task_options_and_objects_override_names(tiny):
    _, tokenizer = tiny
    options = {"operand_max": 3, "eval_prompts": 4}
    small = gym.make("ppo/TextGen-v0", model="tiny", task="arithmetic", task_options=options).unwrapped
    assert len(small.prompts) == 2 * 4 * 4 - 4, "operands 0-3, '+' and '-', 4 questions held out"
    explicit = gym.make("ppo/TextGen-v0", tokenizer=tokenizer, task="arithmetic", prompts=PROMPTS).unwrapped
    assert explicit.prompts == PROMPTS and explicit.tokenizer is tokenizer


def test_registered_id_names_what_is_wrong_in_one_line():
    with pytest.raises(TaskError, match="unknown task 'poetry'; known tasks: sentiment, arithmetic, custom"):
        gym.make("ppo/TextGen-v0", model="tiny", task="poetry")
    with pytest.raises(TaskError, match="the arithmetic task has no option 'digits'"):
        gym.make("ppo/TextGen-v0", model="tiny", task="arithmetic", task_options={"digits": 3})
    with pytest.raises(ModelLoadError, match="model path /no/such/model does not exist"):
        gym.make("ppo/TextGen-v0", model="/no/such/model", task="arithmetic")


def test_episode_ends_at_eos_and_at_the_limit_with_reward_only_at_the_end(tiny):
    _, tokenizer = tiny
    before = (
        copy.deepcopy(tokenizer.get_vocab()),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        tokenizer.padding_side,
    )
    env = TextGenEnv(tokenizer, PROMPTS, score=lambda p, c: [len(c[0]) + 1.0], max_new_tokens=4, max_prompt_tokens=8)
    obs, info = env.reset(seed=0, options={"prompt": "the movie was"})
    prompt_length = int(obs["attention_mask"].sum())
    token = tokenizer("good", add_special_tokens=False)["input_ids"][0]
    rewards = []
    for step in range(4):
        obs, reward, terminated, truncated, info = env.step(token)
        rewards.append(reward)
        assert int(obs["attention_mask"].sum()) == prompt_length + step + 1
        assert terminated == (step == 3) and not truncated
    assert rewards[:3] == [0.0, 0.0, 0.0] and rewards[3] == len(info["completion"]) + 1.0
    assert info["ended_with_eos"] is False
    env.reset(seed=0)
    env.step(token)
    _, reward, terminated, _, info = env.step(tokenizer.eos_token_id)
    assert terminated and info["ended_with_eos"] and reward == len(info["completion"]) + 1.0
    assert (
        copy.deepcopy(tokenizer.get_vocab()),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        tokenizer.padding_side,
    ) == before


def test_env_rejects_prompts_that_do_not_fit(tiny):
    _, tokenizer = tiny
    env = TextGenEnv(
        tokenizer,
        ["the movie was great and the film was good"],
        score=lambda p, c: [0.0],
        max_new_tokens=4,
        max_prompt_tokens=3,
    )
    with pytest.raises(ValueError, match="longer than max_prompt_tokens=3"):
        env.reset(seed=0)
    with pytest.raises(ValueError, match="at least one prompt"):
        TextGenEnv(tokenizer, [], score=lambda p, c: [0.0])


def test_single_env_and_batched_path_give_the_same_episodes(tiny):
    model, tokenizer = tiny
    policy = LMActorCritic(model)
    reference = ReferencePolicy(model)
    generator = torch.Generator().manual_seed(7)
    rollout = collect(policy, reference, tokenizer, PROMPTS, letter_count, settings(), 0.0, generator)
    uniforms = torch.rand(len(PROMPTS), 10, generator=torch.Generator().manual_seed(7))
    env = TextGenEnv(
        tokenizer, PROMPTS, score=lambda p, c: letter_count(p, c)[0], max_new_tokens=10, max_prompt_tokens=16
    )
    for row, prompt in enumerate(PROMPTS):
        obs, _ = env.reset(seed=0, options={"prompt": prompt})
        tokens, reward, terminated, t = [], 0.0, False, 0
        while not terminated:
            length = int(obs["attention_mask"].sum())
            with torch.no_grad():
                logits = model(input_ids=torch.tensor(obs["input_ids"][:length]).unsqueeze(0)).logits[:, -1]
            action = int(inverse_cdf_sample(logits, uniforms[row, t : t + 1], 1.0))
            obs, reward, terminated, _, _ = env.step(action)
            tokens.append(action)
            t += 1
        n = int(rollout.response_mask[row].sum())
        assert tokens == rollout.response_ids[row, :n].tolist()
        assert reward == rollout.scores[row].item()


def test_sampling_log_probs_equal_the_training_forward(tiny):
    model, tokenizer = tiny
    policy = LMActorCritic(model, temperature=0.7)
    prompt_ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    prompt_mask = (torch.arange(4) >= torch.tensor([[2], [0]])).long()
    sampled = sample_responses(
        model,
        prompt_ids,
        prompt_mask,
        torch.rand(2, 8, generator=torch.Generator().manual_seed(0)),
        0.7,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    evaluation = policy(
        {
            "input_ids": torch.cat([prompt_ids, sampled.response_ids], 1),
            "attention_mask": torch.cat([prompt_mask, sampled.response_mask], 1),
            "response_ids": sampled.response_ids,
            "old_logp": sampled.sampled_logp,
        }
    )
    mask = sampled.response_mask.bool()
    torch.testing.assert_close(evaluation.logp[mask], sampled.sampled_logp[mask], atol=2e-5, rtol=0)


def grouped_prompts(tokenizer, group_size: int):
    """``PROMPTS`` of unequal length, each ``group_size`` times side by side, left-padded: ids and mask ``(B, P)``."""
    from agents.text.rollout import left_pad

    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS for _ in range(group_size)]
    return left_pad(encoded, tokenizer.pad_token_id, torch.device("cpu"))


class ForwardBatches:
    """Records the batch size of every forward of a module (its ``input_ids`` rows)."""

    def __init__(self, module):
        self.sizes: list[int] = []
        module.register_forward_pre_hook(
            lambda _m, _a, kw: self.sizes.append(kw["input_ids"].shape[0]), with_kwargs=True
        )


def test_a_whole_batch_samples_the_tokens_of_any_smaller_batching_and_finished_rows_leave_the_forwards(tiny):
    """Issue #26: sampling all of a batch at once (a group's prompt prefilled once, finished rows dropped) gives
    the tokens eight at a time or one at a time give, from the same uniforms."""
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    ids, mask = grouped_prompts(tokenizer, group_size=4)
    uniforms = torch.rand(len(ids), 12, generator=torch.Generator().manual_seed(3))
    pad = tokenizer.pad_token_id
    never_ending = sample_responses(model, ids, mask, uniforms, 1.0, -1, pad)
    eos = int(never_ending.response_ids[0, 2])  # a token some rows sample early: they stop there, the others go on
    forwards = ForwardBatches(model)
    whole = sample_responses(model, ids, mask, uniforms, 1.0, eos, pad)
    lengths = whole.response_mask.sum(-1)
    assert lengths.min() <= 3 < lengths.max() and whole.ended.any() and not whole.ended.all()
    assert forwards.sizes[0] == len(PROMPTS), "each distinct prompt is prefilled once"
    running = [int((lengths > t).sum()) for t in range(1, int(lengths.max()))]
    assert forwards.sizes[1:] == running, "each step runs the rows that have not finished, and only those"
    for size in (8, 1):
        parts = [
            sample_responses(model, ids[i : i + size], mask[i : i + size], uniforms[i : i + size], 1.0, eos, pad)
            for i in range(0, len(ids), size)
        ]
        assert torch.equal(torch.cat([p.response_ids for p in parts]), whole.response_ids)
        assert torch.equal(torch.cat([p.response_mask for p in parts]), whole.response_mask)
        torch.testing.assert_close(torch.cat([p.sampled_logp for p in parts]), whole.sampled_logp, atol=1e-5, rtol=0)


def whole_sequence_forward(model, ids, mask, response_ids, response_mask, value_head, temperature):
    """A plain Hugging Face forward of the concatenated sequences, no cache: log pi and V at the response positions."""
    full_mask = torch.cat([mask, response_mask], 1)
    output = model(
        input_ids=torch.cat([ids, response_ids], 1),
        attention_mask=full_mask,
        position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0),
        output_hidden_states=True,
        use_cache=False,
    )
    at_response = slice(ids.shape[1] - 1, -1)
    logp = torch.log_softmax(output.logits[:, at_response] / temperature, -1)
    logp = logp.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    value = value_head(output.hidden_states[-1][:, at_response]).squeeze(-1)
    return logp, value


def unequal_responses(model, tokenizer, lengths, seed):
    """``grouped_prompts`` (3 copies each) and responses sampled from ``model``, cut to ``lengths`` and right-padded:
    prompt ids and mask ``(B, P)``, response ids and mask ``(B, max(lengths))``."""
    ids, mask = grouped_prompts(tokenizer, group_size=3)
    width = int(lengths.max())
    uniforms = torch.rand(len(ids), width, generator=torch.Generator().manual_seed(seed))
    sampled = sample_responses(model, ids, mask, uniforms, 0.7, -1, tokenizer.pad_token_id)
    response_mask = (torch.arange(width) < lengths.unsqueeze(1)).long()
    response_ids = torch.where(response_mask.bool(), sampled.response_ids, tokenizer.pad_token_id)
    return ids, mask, response_ids, response_mask


def test_shared_prompt_forwards_equal_a_forward_of_the_whole_sequences_in_values_and_gradients(tiny):
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    lengths = torch.tensor([6, 1, 3, 4, 6, 2, 5, 6, 1, 3, 2, 6])
    ids, mask, response_ids, response_mask = unequal_responses(model, tokenizer, lengths, seed=4)
    valid = response_mask.bool()
    shared_reference = ReferencePolicy(model).log_probs(ids, mask, response_ids, response_mask, 0.7)

    policy = LMActorCritic(model, temperature=0.7)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)  # a zero head would hide the hidden states' gradient
    parameters = [p for p in policy.parameters() if p.requires_grad]

    def loss_and_gradients(logp, value):
        loss = (logp * valid).sum() + (value**2 * valid).sum()
        return torch.autograd.grad(loss, parameters)

    shared = policy(
        {
            "input_ids": torch.cat([ids, response_ids], 1),
            "attention_mask": torch.cat([mask, response_mask], 1),
            "response_ids": response_ids,
            "old_logp": torch.zeros(response_ids.shape),
        }
    )
    whole_logp, whole_value = whole_sequence_forward(
        model, ids, mask, response_ids, response_mask, policy.value_head, 0.7
    )
    torch.testing.assert_close(shared_reference[valid], whole_logp[valid].detach(), atol=2e-5, rtol=0)
    torch.testing.assert_close(shared.logp[valid], whole_logp[valid], atol=2e-5, rtol=0)
    torch.testing.assert_close(shared.value[valid], whole_value[valid], atol=2e-5, rtol=0)
    shared_gradients = loss_and_gradients(shared.logp, shared.value)
    whole_gradients = loss_and_gradients(whole_logp, whole_value)
    assert any(g.abs().sum() > 0 for g in whole_gradients)
    for shared_gradient, whole_gradient in zip(shared_gradients, whole_gradients, strict=True):
        torch.testing.assert_close(shared_gradient, whole_gradient, atol=1e-4, rtol=1e-3)


def test_the_vocabulary_projection_runs_on_the_response_tokens_only_and_padding_comes_back_as_zeros(tiny):
    """Issue 26: the LM head and its softmax see the prefill's last positions and the masked-in response tokens."""
    model, tokenizer = tiny
    lengths = torch.tensor([6, 1, 3, 4, 6, 2, 5, 6, 1, 3, 2, 6])
    ids, mask, response_ids, response_mask = unequal_responses(model, tokenizer, lengths, seed=6)
    projected_rows = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, inputs, output: projected_rows.append(inputs[0].reshape(-1, inputs[0].shape[-1]).shape[0])
    )
    try:
        continued = continue_prompts(model, ids, mask, response_ids, response_mask, 0.7)
    finally:
        hook.remove()
    distinct_prompts = len(PROMPTS)
    assert projected_rows == [distinct_prompts, int(response_mask[:, 1:].sum())]
    valid = response_mask.bool()
    assert torch.all(continued.logp[~valid] == 0) and torch.all(continued.entropy[~valid] == 0)
    assert torch.all(continued.entropy[valid] > 0)
    whole_logp, _ = whole_sequence_forward(
        model, ids, mask, response_ids, response_mask, torch.nn.Linear(model.config.n_embd, 1), 0.7
    )
    torch.testing.assert_close(continued.logp[valid], whole_logp[valid], atol=2e-5, rtol=0)


def test_filled_columns_counts_up_to_the_last_column_any_row_fills():
    assert filled_columns(torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])) == 3
    assert filled_columns(torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])) == 5
    assert filled_columns(torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0]])) == 3  # a gap inside a dialogue is not the end
    assert filled_columns(torch.zeros(2, 4, dtype=torch.long)) == 1


def test_columns_of_padding_in_every_row_change_no_value_or_gradient_and_come_back_as_zeros(tiny):
    """Issue 26: forwards cover the filled columns only; a rollout padded to --max-new-tokens must train the same."""
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    lengths = torch.tensor([4, 1, 3, 4, 2, 2, 4, 1, 3, 2, 4, 1])
    ids, mask, response_ids, response_mask = unequal_responses(model, tokenizer, lengths, seed=5)
    policy = LMActorCritic(model, temperature=0.7)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    parameters = [p for p in policy.parameters() if p.requires_grad]

    def evaluate(extra_columns):
        padded_ids = torch.cat([response_ids, torch.full((len(ids), extra_columns), tokenizer.pad_token_id)], 1)
        padded_mask = torch.cat([response_mask, torch.zeros(len(ids), extra_columns, dtype=torch.long)], 1)
        reference = ReferencePolicy(model).log_probs(ids, mask, padded_ids, padded_mask, 0.7)
        evaluation = policy(
            {
                "input_ids": torch.cat([ids, padded_ids], 1),
                "attention_mask": torch.cat([mask, padded_mask], 1),
                "response_ids": padded_ids,
                "old_logp": torch.zeros(padded_ids.shape),
            }
        )
        valid = padded_mask.bool()
        loss = (evaluation.logp * valid).sum() + (evaluation.value**2 * valid).sum()
        return reference, evaluation, torch.autograd.grad(loss, parameters)

    reference, evaluation, gradients = evaluate(0)
    padded_reference, padded, padded_gradients = evaluate(3)
    assert padded.logp.shape == padded.value.shape == padded_reference.shape == (len(ids), 7)
    for tensor in (padded_reference, padded.logp, padded.entropy, padded.value, padded.kl):
        assert torch.all(tensor[:, 4:] == 0)
    torch.testing.assert_close(padded_reference[:, :4], reference, atol=2e-5, rtol=0)
    for full, cut in ((padded.logp, evaluation.logp), (padded.value, evaluation.value), (padded.kl, evaluation.kl)):
        torch.testing.assert_close(full[:, :4], cut, atol=2e-5, rtol=0)
    assert any(g.abs().sum() > 0 for g in gradients)
    for padded_gradient, gradient in zip(padded_gradients, gradients, strict=True):
        torch.testing.assert_close(padded_gradient, gradient, atol=1e-5, rtol=1e-4)


def test_first_minibatch_ratio_is_one_and_training_leaves_the_reference_alone(tiny):
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    policy = LMActorCritic(model)
    reference = ReferencePolicy(model)
    reference_before = {k: v.clone() for k, v in reference.lm.state_dict().items()}
    rollout = collect(
        policy,
        reference,
        tokenizer,
        PROMPTS,
        letter_count,
        settings(forward_batch=4),
        0.1,
        torch.Generator().manual_seed(0),
    )
    params = {k: p.detach() for k, p in policy.named_parameters() if p.requires_grad}
    cfg = PPOConfig(epochs=2, minibatch_size=4, learning_rate=1e-3, normalize_advantages=False, value_clip=0.2)
    step = make_minibatch_step(policy, Clip(), cfg, compile=False)
    stats = step(params, AdamState(params), rollout.batch, torch.arange(4), torch.tensor(1e-3), torch.tensor(0.0))
    stats = dict(zip(STAT_NAMES, stats.tolist(), strict=True))
    assert stats["approx_kl_k1"] == 0.0 and stats["approx_kl_k3"] == 0.0, (
        "k1 and k3 must be exactly 0 before the first step"
    )
    result = ppo_update(
        policy,
        params,
        AdamState(params),
        step,
        rollout.batch,
        cfg,
        UpdateSchedule(1e-3, 0.0),
        torch.Generator().manual_seed(0),
    )
    assert result.kl_after_update > 0
    assert not torch.equal(policy.lm.transformer.h[0].mlp.c_fc.weight, reference.lm.transformer.h[0].mlp.c_fc.weight)
    for name, tensor in reference.lm.state_dict().items():
        assert torch.equal(tensor, reference_before[name]), name
    assert all(not p.requires_grad for p in reference.lm.parameters())


def test_kl_shaping_sums_to_score_minus_beta_kl():
    kl = torch.tensor([[0.5, -0.2, 0.3, 9.0], [0.1, 0.1, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    scores = torch.tensor([2.0, -1.0])
    rewards = shaped_rewards(kl, scores, mask, ref_kl_coef=0.5)
    assert rewards.tolist()[0] == pytest.approx([-0.25, 0.1, -0.15 + 2.0, 0.0])
    assert rewards.tolist()[1] == pytest.approx([-0.05, -0.05 - 1.0, 0.0, 0.0])
    assert rewards.sum(-1).tolist() == pytest.approx([2.0 - 0.5 * 0.6, -1.0 - 0.5 * 0.2])


def test_batched_rollout_masks_after_eos_and_applies_the_eos_penalty(tiny):
    model, tokenizer = tiny
    biased = copy.deepcopy(model)
    with torch.no_grad():  # raise the EOS logit by 4 so that some rows end early and others do not
        eos_direction = biased.lm_head.weight[tokenizer.eos_token_id]
        biased.transformer.ln_f.bias += 4.0 * eos_direction / eos_direction.norm() ** 2
    policy = LMActorCritic(biased)
    rollout = collect(
        policy,
        ReferencePolicy(biased),
        tokenizer,
        PROMPTS * 4,
        letter_count,
        settings(max_new_tokens=12, eos_penalty=-5.0),
        0.0,
        torch.Generator().manual_seed(1),
    )
    lengths = rollout.response_mask.sum(-1)
    for row in range(len(lengths)):
        n = int(lengths[row])
        assert rollout.response_mask[row, :n].all() and not rollout.response_mask[row, n:].any()
        if rollout.ended[row]:
            assert rollout.response_ids[row, n - 1].item() == tokenizer.eos_token_id
        else:
            assert rollout.scores[row].item() == -5.0
    assert rollout.ended.any() and not rollout.ended.all()
    assert rollout.batch.advantages[rollout.response_mask == 0].abs().max().item() == 0.0
    assert rollout.tokens == int(lengths.sum())


def test_the_loss_aggregation_reaches_the_update_of_unequal_completions(tiny):
    model, tokenizer = tiny
    policy = LMActorCritic(copy.deepcopy(model))
    generator = torch.Generator().manual_seed(0)
    rollout = collect(policy, ReferencePolicy(model), tokenizer, PROMPTS, letter_count, settings(), 0.1, generator)
    lengths = torch.tensor([10, 7, 3, 1])  # completions of unequal length, as EOS makes them
    mask = (torch.arange(10) < lengths[:, None]).float()
    batch = rollout.batch._replace(mask=mask, advantages=rollout.batch.advantages + torch.arange(10.0))
    params = {k: p.detach() for k, p in policy.named_parameters() if p.requires_grad}
    losses = {}
    for how in ("token-mean", "sequence-mean", "constant-length"):
        cfg = PPOConfig(minibatch_size=4, normalize_advantages=False, loss_aggregation=how)
        step = make_minibatch_step(policy, Clip(), cfg, compile=False)
        stats = step(params, AdamState(params), batch, torch.arange(4), torch.tensor(0.0), torch.tensor(0.0))
        stats = dict(zip(STAT_NAMES, stats.tolist(), strict=True))
        losses[how] = stats["policy_loss"]  # the ratio is 1 before any step: the loss is minus the aggregated advantage
    advantages = batch.advantages * mask
    assert losses["token-mean"] == pytest.approx(-(advantages.sum() / mask.sum()).item(), rel=1e-5)
    per_sequence = advantages.sum(-1) / lengths
    assert losses["sequence-mean"] == pytest.approx(-per_sequence.mean().item(), rel=1e-5)
    assert losses["constant-length"] == pytest.approx(-(advantages.sum() / 40).item(), rel=1e-5)
