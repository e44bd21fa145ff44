"""The critic-free group objectives on text (GRPO, Dr. GRPO, RLOO, DAPO): groups of completions of one prompt, no
value head, where the reference KL goes, and DAPO's dynamic sampling, end to end on the tiny GPT-2."""

import json

import pytest
import torch

from agents.core.config import ConfigError
from agents.core.objectives import DAPO, GRPO, RLOO, DrGRPO, SamplingPlan
from agents.runs.checkpoint import load_checkpoint
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.text.actor_critic import build_policy
from agents.text.config import validate_text_config
from agents.text.rollout import SampledCompletions, sample_batch
from agents.text.train import train_text
from tests.conftest import without_measurements
from tests.test_train_text import custom_task, tiny_text_config  # noqa: F401 - custom_task is a fixture

GROUP_OBJECTIVES = [GRPO(group_size=4), DrGRPO(group_size=4), RLOO(group_size=4), DAPO(group_size=4)]


@pytest.mark.parametrize("objective", GROUP_OBJECTIVES, ids=lambda o: o.name)
def test_each_group_objective_trains_without_a_critic(tmp_path, custom_task, objective):  # noqa: F811
    run_dir = train_text(tiny_text_config(tmp_path, objective.name, custom_task, objective=objective, samples_to_log=8))
    records = read_jsonl(run_dir / METRICS_FILE)
    assert len(records) >= 2
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["trainable"] and not any(name.startswith("value_head") for name in checkpoint["trainable"])
    assert not (run_dir / "policy" / "value_head.pt").exists() and (run_dir / "policy" / "config.json").is_file()
    for record in records:
        assert record["value_loss"] == 0.0 and 0.0 <= record["zero_variance_groups"] <= 1.0
    assert any(record["approx_kl_k3"] > 0 for record in records), "the policy moved"
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()][0]["samples"]
    prompts = [row["prompt"] for row in rows]
    assert prompts[:4] == [prompts[0]] * 4 and prompts[4:8] == [prompts[4]] * 4, "G completions of one prompt"
    if isinstance(objective, GRPO):  # the recipe puts beta * k3(pi || pi_ref) in the loss
        assert records[0]["ref_kl_coef"] == 0.04 and any(r["reference_kl_loss"] > 0 for r in records[1:])
    else:
        assert all(r["reference_kl_loss"] == 0.0 for r in records)
    if isinstance(objective, DAPO):
        assert all(r["sampling_rounds"] >= 1 and "overlong_penalty" in r for r in records)


def test_the_reference_kl_goes_where_ref_kl_in_says(tmp_path, custom_task):  # noqa: F811
    nowhere_config = tiny_text_config(tmp_path, "none", custom_task, objective=GRPO(group_size=4), ref_kl_in="none")
    assert build_policy(nowhere_config, torch.device("cpu"))[1] is None, "a KL weighing nothing needs no reference"
    nowhere_dir = train_text(nowhere_config)
    nowhere = read_jsonl(nowhere_dir / METRICS_FILE)
    assert all(r["reference_kl_loss"] == 0.0 and r["ref_kl_coef"] == 0.0 and "ref_kl" not in r for r in nowhere)
    kept_config = tiny_text_config(
        tmp_path, "kept", custom_task, objective=GRPO(group_size=4), ref_kl_in="none", keep_reference=True
    )
    kept_dir = train_text(kept_config)
    kept = read_jsonl(kept_dir / METRICS_FILE)
    assert any(r["ref_kl"] > 0 for r in kept[1:]), "--keep-reference measures and logs the KL"
    assert without_measurements(nowhere) == [
        {k: v for k, v in r.items() if k != "ref_kl"} for r in without_measurements(kept)
    ], "the reference's forwards change nothing else"
    trained, trained_kept = load_checkpoint(nowhere_dir)["trainable"], load_checkpoint(kept_dir)["trainable"]
    assert all(torch.equal(trained[name], trained_kept[name]) for name in trained)
    in_loss_config = tiny_text_config(  # PPO-Clip with GRPO's placement
        tmp_path, "loss", custom_task, ref_kl_in="loss", ref_kl_coef=0.5, ref_kl_target=None
    )
    in_loss = read_jsonl(train_text(in_loss_config) / METRICS_FILE)
    assert all(r["ref_kl_coef"] == 0.5 for r in in_loss) and any(r["reference_kl_loss"] > 0 for r in in_loss[1:])
    assert all(r["non_score_reward"] == 0.0 for r in in_loss), "no KL in the reward"


def test_group_configs_that_cannot_work_are_one_line_errors(tmp_path, custom_task):  # noqa: F811
    with pytest.raises(ConfigError, match="not a whole number of groups of --group-size 3; use a multiple of 3"):
        validate_text_config(tiny_text_config(tmp_path, "g", custom_task, objective=GRPO(group_size=3)))
    with pytest.raises(ConfigError, match="grpo learns no critic: drop --critic-warmup"):
        validate_text_config(
            tiny_text_config(tmp_path, "g", custom_task, objective=GRPO(group_size=4), critic_warmup=1)
        )
    with pytest.raises(ConfigError, match="--group-size must be at least 2"):
        validate_text_config(tiny_text_config(tmp_path, "g", custom_task, objective=RLOO(group_size=1)))
    with pytest.raises(ConfigError, match="--overlong-cache 9 is longer than --max-new-tokens 8"):
        validate_text_config(
            tiny_text_config(tmp_path, "g", custom_task, objective=DAPO(group_size=4, overlong_cache=9))
        )


def scripted_round(scores: list[float]) -> SampledCompletions:
    """A round of completions whose only meaningful field is its scores (and a prompt naming each row)."""
    n = len(scores)
    return SampledCompletions(
        prompts=[f"row {s}" for s in scores],
        prompt_ids=[[1]] * n,
        response_ids=torch.ones(n, 3, dtype=torch.long),
        response_mask=torch.ones(n, 3, dtype=torch.long),
        ended=torch.ones(n, dtype=torch.bool),
        completions=[""] * n,
        scores=torch.tensor(scores),
        task_metrics={},
        overlong_penalty=None,
    )


def test_dynamic_sampling_keeps_informative_groups_and_tops_up_at_the_cap():
    script = iter([[1, 1, 0, 1], [2, 2, 3, 4], [5, 6, 7, 7]])  # groups of 2; each round keeps one
    asked = []

    def sample_groups(k):
        asked.append(k)
        return scripted_round([float(s) for s in next(script)])

    filled = sample_batch(sample_groups, groups_wanted=3, plan=SamplingPlan(2, True, 3))
    assert asked == [3, 2, 1] and filled.rounds == 3 and filled.filler_groups == 0
    assert filled.samples.scores.tolist() == [0.0, 1.0, 3.0, 4.0, 5.0, 6.0]
    assert filled.samples.prompts == ["row 0.0", "row 1.0", "row 3.0", "row 4.0", "row 5.0", "row 6.0"]
    assert (filled.groups_sampled, filled.groups_dropped, filled.generated_tokens) == (6, 3, 3 * 4 * 3)

    script = iter([[1, 1, 0, 1], [2, 2, 4, 4]])
    capped = sample_batch(sample_groups, groups_wanted=3, plan=SamplingPlan(2, True, 2))
    assert capped.rounds == 2 and capped.filler_groups == 2 and capped.groups_dropped == 3
    assert capped.samples.scores.tolist() == [0.0, 1.0, 1.0, 1.0, 2.0, 2.0], "the kept group, then dropped ones"
