"""Issue #28, the importance-sampling correction between sampler and trainer: hand values of the truncated and the
masked ratio per token and per sequence, the identity when both compute alike, and the gap logged by a text run."""

import math

import pytest
import torch

from agents.core.config import ConfigError
from agents.core.sampler_correction import sampler_weights
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.text.actor_critic import LMActorCritic, ReferencePolicy
from agents.text.config import TextEnvConfig, TextTrainConfig, validate_text_config
from agents.text.rollout import TextBatchSettings, build_text_batch, sample_completions
from envs.text.models import build_tiny_model
from tests.conftest import run_ppo

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -7.0]], dtype=torch.float64)
SAMPLED = OLD - torch.tensor([[math.log(3.0), 0.0, math.log(0.5)], [math.log(1.5), math.log(1.5), 9.0]],
                             dtype=torch.float64)  # fmt: skip
"""Token ratios rho = pi_old / mu: 3, 1, 0.5 and 1.5, 1.5 (the padding's nonsense must not count)."""


@pytest.mark.parametrize("correction", ["truncate", "mask"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_equal_log_probs_give_a_zero_gap_and_the_identity(correction, level):
    out = sampler_weights(OLD, OLD.clone(), MASK, correction, level, cap=2.0)
    assert torch.equal(out.weights, MASK.to(out.weights.dtype))
    assert out.gap_mean == 0.0 and out.gap_max == 0.0 and out.corrected_fraction == 0.0


def test_token_level_weights_against_hand_values():
    truncated = sampler_weights(OLD, SAMPLED, MASK, "truncate", "token", cap=2.0)
    expected = torch.tensor([[2.0, 1.0, 0.5], [1.5, 1.5, 0.0]], dtype=torch.float64)
    assert torch.allclose(truncated.weights, expected, atol=1e-12)
    assert truncated.corrected_fraction == pytest.approx(1 / 5)
    assert truncated.gap_mean == pytest.approx((math.log(3) + math.log(2) + 2 * math.log(1.5)) / 5)
    assert truncated.gap_max == pytest.approx(math.log(3))
    masked = sampler_weights(OLD, SAMPLED, MASK, "mask", "token", cap=2.0)
    assert torch.allclose(masked.weights, torch.tensor([[0.0, 1.0, 0.5], [1.5, 1.5, 0.0]], dtype=torch.float64))


def test_sequence_level_weights_are_the_product_of_the_token_ratios():
    truncated = sampler_weights(OLD, SAMPLED, MASK, "truncate", "sequence", cap=2.0)
    # row 0: 3 * 1 * 0.5 = 1.5; row 1: 1.5 * 1.5 = 2.25, above the cap
    assert torch.allclose(truncated.weights, torch.tensor([[1.5] * 3, [2.0, 2.0, 0.0]], dtype=torch.float64))
    masked = sampler_weights(OLD, SAMPLED, MASK, "mask", "sequence", cap=2.0)
    assert torch.allclose(masked.weights, torch.tensor([[1.5] * 3, [0.0] * 3], dtype=torch.float64))
    assert masked.corrected_fraction == pytest.approx(2 / 5)
    none = sampler_weights(OLD, SAMPLED, MASK, "none", "sequence", cap=2.0)
    assert torch.equal(none.weights, MASK.to(none.weights.dtype)) and none.gap_max == pytest.approx(math.log(3))


def test_the_batch_keeps_the_sampler_log_probs_and_corrects_only_where_they_differ():
    model, tokenizer = build_tiny_model()
    policy, reference = LMActorCritic(model, temperature=0.7), ReferencePolicy(model)
    with torch.no_grad():
        policy.value_head.weight.normal_(0, 0.1)

    def score(prompts, completions):
        return [float(c.count("e")) for c in completions], {}

    def settings(correction):
        return TextBatchSettings(
            max_new_tokens=8, max_prompt_tokens=32, temperature=0.7, forward_batch=4, gamma=1.0, gae_lambda=0.95,
            eos_penalty=None, whiten_advantages=True, sampler_correction=correction, sampler_correction_cap=1.0,
        )  # fmt: skip

    prompts = ["the movie was", "a film", "one actor", "this story is"]
    samples = sample_completions(policy, tokenizer, prompts, score, settings("none"), torch.Generator().manual_seed(0))
    plain = build_text_batch(policy, reference, tokenizer, samples, settings("none"), 0.1)
    assert plain.sampler.gap_max < 1e-5 and plain.sampler.gap_max > 0  # the cache's rounding: near, not equal
    same = samples._replace(sampled_logp=plain.batch.old_logp)  # a sampler that computes as the trainer does
    corrected = build_text_batch(policy, reference, tokenizer, same, settings("truncate"), 0.1)
    assert torch.equal(corrected.batch.advantages, plain.batch.advantages)
    shifted = samples._replace(sampled_logp=plain.batch.old_logp - 0.5 * plain.batch.mask)  # rho = e^0.5 > cap 1
    capped = build_text_batch(policy, reference, tokenizer, shifted, settings("truncate"), 0.1)
    assert torch.allclose(capped.batch.advantages, plain.batch.advantages)  # min(e^0.5, 1) = 1
    masked = build_text_batch(policy, reference, tokenizer, shifted, settings("mask"), 0.1)
    assert not masked.batch.advantages.any() and masked.sampler.corrected_fraction == 1.0


def test_a_run_logs_the_gap_and_trains_with_the_correction(tmp_path):
    result = run_ppo(
        "train", "text", "--model", "tiny", "--prompts-per-iteration", "4", "--max-new-tokens", "6",
        "--minibatch-size", "2", "--epochs", "1", "--total-steps", "24", "--no-progress", "--runs-dir", str(tmp_path),
        "--run-name", "tis", "--sampler-correction", "truncate", "--sampler-correction-level", "sequence",
        "arithmetic",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_jsonl(tmp_path / "tis" / METRICS_FILE)
    assert all(0 <= r["sampler_gap_mean"] <= r["sampler_gap_max"] < 1e-4 for r in records)


def test_an_impossible_cap_is_a_one_line_error():
    config = TextTrainConfig(text=TextEnvConfig(model="tiny", sampler_correction="mask", sampler_correction_cap=0.0))
    with pytest.raises(ConfigError, match="--sampler-correction-cap must be > 0"):
        validate_text_config(config)
