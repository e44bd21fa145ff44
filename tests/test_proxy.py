"""``--reward proxy``: a learned proxy of a task's checker, fitted to checker-labelled completions of the starting
policy, trained on with the checker logged as gold; its cache, its accuracy on held-out prompts, its errors."""

import json
from dataclasses import replace

import pytest
import torch

from agents.core.config import ConfigError
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.text.config import TextEnvConfig, TextTrainConfig, validate_text_config
from agents.text.evaluate import best_of_n
from agents.text.proxy import PROXY_REPORT_FILE, proxy_reward_task
from agents.text.train import train_text
from envs.text.models import DEFAULT_MODEL, load_causal_lm
from envs.text.tasks import ArithmeticTask, ArithmeticTaskConfig, TaskError, checked_scores, make_task
from envs.text.tasks.minilm import MiniLMEncoder
from envs.text.tasks.proxy import ProxyRewardTask, fit_proxy, proxy_labels
from tests.conftest import run_ppo
from tests.test_train_text import custom_task, tiny_text_config  # noqa: F401 (custom_task: a fixture)

PROXY_TEST_COMPLETIONS = 512  # about 2.5 minutes on one thread: sampling 512 x 16 tokens from SmolLM2
PROXY_TEST_BALANCED_ACCURACY = 0.62  # measured 0.73 here (103 held-out completions, 9 of them right); chance is 0.5


class KeywordEncoder:
    """Stands in for MiniLM: embeds a text as (1 if it holds "yes" else 0, 1 if it holds "maybe" else 0)."""

    def embed(self, texts, max_tokens):
        return torch.tensor([[float("yes" in t), float("maybe" in t)] for t in texts])

    embed_many = embed


def test_labels_split_at_one_half():
    assert proxy_labels([0.0, 0.49, 0.5, 1.0, 0.01]).tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]


def test_fit_proxy_holds_out_every_fifth_prompt_and_measures_balanced_accuracy():
    prompts = [f"q{i} " for i in range(10) for _ in range(4)]  # 10 prompts, 4 completions each
    completions = ["yes", "no", "no", "maybe"] * 10
    scores = [1.0, 0.0, 0.0, 1.0] * 10  # "maybe" is right too, but the head only sees the keyword features
    head = fit_proxy(prompts, completions, scores, KeywordEncoder())
    report = head.report
    assert (report.heldout_completions, report.train_completions) == (8, 32)  # prompts q0 and q5 held out
    assert report.right_share == pytest.approx(0.5)
    assert report.balanced_accuracy == pytest.approx(1.0) and report.accuracy == pytest.approx(1.0)


def test_fit_proxy_reports_the_mistakes_it_makes_on_held_out_prompts():
    prompts = [f"q{i} " for i in range(10) for _ in range(4)]
    completions = ["yes", "no", "no", "no"] * 10
    scores = [1.0, 0.0, 0.0, 1.0] * 10  # the 4th completion is right but looks like the wrong ones
    report = fit_proxy(prompts, completions, scores, KeywordEncoder()).report
    # held out: 8 completions, 4 right (2 say "yes": caught; 2 say "no": missed), 4 wrong (all said "no": caught)
    assert report.balanced_accuracy == pytest.approx((0.5 + 1.0) / 2)
    assert report.accuracy == pytest.approx(6 / 8)


@pytest.mark.parametrize(
    "scores, prompts, message",
    [
        ([0.0] * 10, [f"q{i}" for i in range(10)], "labelled all 10 proxy completions wrong"),
        ([1.0] * 10, [f"q{i}" for i in range(10)], "labelled all 10 proxy completions right"),
        ([1.0, 0.0] * 5, ["q"] * 10, "at least 2 distinct prompts"),
        ([1.0] + [0.0] * 9, [f"q{i}" for i in range(10)], "training completions hold one class only"),
    ],
)
def test_fit_proxy_refuses_labels_it_cannot_learn_from(scores, prompts, message):
    with pytest.raises(TaskError, match=message) as error:
        fit_proxy(prompts, ["yes"] * 10, scores, KeywordEncoder())
    assert "\n" not in str(error.value)


def test_proxy_task_scores_with_the_head_and_logs_the_checker_as_gold():
    checker = ArithmeticTask(ArithmeticTaskConfig(operand_max=9, operations="+", eval_prompts=40))
    prompts = checker.prompts("train")[:10]
    completions = ["yes 7", "maybe 8"] * 5
    head = fit_proxy(
        [f"p{i}" for i in range(10)], ["yes", "no"] * 5, [1.0, 0.0] * 5, KeywordEncoder()
    )  # right = says yes
    task = ProxyRewardTask(checker, head, KeywordEncoder())
    scores = checked_scores(task, prompts, completions)
    expected = [float(head.weight[0] * 1.0 + head.bias), float(head.weight[1] * 1.0 + head.bias)] * 5
    assert scores.rewards == pytest.approx(expected)
    gold = checker.score(prompts, completions)
    assert scores.metrics["gold_reward"] == gold.rewards
    assert scores.metrics["accuracy"] == gold.metrics["accuracy"]
    assert scores.metrics["proxy_reward"] == scores.rewards
    assert task.prompts("eval") == checker.prompts("eval")


def test_a_proxy_run_trains_on_the_proxy_logs_the_checker_and_reuses_the_cache(tmp_path, custom_task, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PPO_CACHE_DIR", str(tmp_path / "cache"))
    config = tiny_text_config(
        tmp_path, "proxy", custom_task, total_steps=8 * 8 * 2, reward="proxy", proxy_completions=40
    )
    run = train_text(config)
    report = json.loads((run / PROXY_REPORT_FILE).read_text())
    assert report["heldout_completions"] + report["train_completions"] == 40
    assert 0 < report["right_share"] < 1 and 0 <= report["balanced_accuracy"] <= 1
    records = read_jsonl(run / METRICS_FILE)
    assert all({"task_proxy_reward", "task_gold_reward"} <= set(r) for r in records)
    assert records[0]["reward"] == pytest.approx(records[0]["task_proxy_reward"])
    assert records[0]["task_gold_reward"] != pytest.approx(records[0]["task_proxy_reward"])
    caches = list((tmp_path / "cache").glob("proxy_reward_*.json"))
    assert len(caches) == 1

    def no_sampling():
        raise AssertionError("the cached proxy should have been reused")

    text = config.text
    again = proxy_reward_task(make_task("custom", **vars(custom_task)), text, no_sampling)
    assert again.report._asdict() == report
    other_seed = replace(text, proxy_seed=1)
    with pytest.raises(AssertionError, match="reused"):
        proxy_reward_task(make_task("custom", **vars(custom_task)), other_seed, no_sampling)
    reward_file = custom_task.reward.rpartition(":")[0]
    with open(reward_file, "a") as edited:
        edited.write("# an edited checker is another checker\n")
    with pytest.raises(AssertionError, match="reused"):
        proxy_reward_task(make_task("custom", **vars(custom_task)), text, no_sampling)
    # best-of-n chooses by the proxy and reports the checker's reward of what it chose
    results = best_of_n(run, prompts=4, seed=0, base=True, largest=2)
    assert {"proxy_reward", "gold_reward"} <= set(results[0].metrics)
    assert results[1].reward >= results[0].reward
    assert results[0].reward == pytest.approx(results[0].metrics["proxy_reward"])


def test_a_proxy_the_tiny_model_cannot_label_is_a_one_line_error_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PPO_CACHE_DIR", str(tmp_path / "cache"))
    result = run_ppo(
        "train", "text", "--model", "tiny", "--reward", "proxy", "--proxy-completions", "16", "--max-new-tokens", "4",
        "--runs-dir", str(tmp_path / "runs"), "--run-name", "never", "arithmetic",
    )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "labelled all 16 proxy completions wrong" in last and "--proxy-completions" in last
    assert not (tmp_path / "runs" / "never").exists()


def test_sentiment_with_a_proxy_reward_is_a_config_error():
    with pytest.raises(ConfigError, match="--reward-model"):
        validate_text_config(TextTrainConfig(text=TextEnvConfig(reward="proxy")))


@pytest.mark.slow
def test_a_proxy_of_smollm2_arithmetic_predicts_the_checker_on_held_out_prompts(tmp_path, monkeypatch):
    """The real thing: SmolLM2-135M-Instruct's completions of one-digit sums, labelled by the checker."""
    monkeypatch.setenv("PPO_CACHE_DIR", str(tmp_path))
    text = TextEnvConfig(
        task=ArithmeticTaskConfig(operand_max=9, operations="+", eval_prompts=40),
        chat_template=True,
        max_new_tokens=16,
        proxy_completions=PROXY_TEST_COMPLETIONS,
        reward="proxy",
    )
    lm, tokenizer, _ = load_causal_lm(DEFAULT_MODEL)
    task = proxy_reward_task(
        make_task("arithmetic", operand_max=9, operations="+", eval_prompts=40), text, lambda: (lm, tokenizer)
    )
    assert task.report.balanced_accuracy >= PROXY_TEST_BALANCED_ACCURACY
    assert isinstance(task.encoder, MiniLMEncoder)
