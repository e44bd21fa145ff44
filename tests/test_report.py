"""``ppo report``: final-score and normalised-score tables, curves, figures and the two pages over synthetic runs
with known numbers, sample completions, the held-out table, the random-policy baseline, bad input.
"""

import csv
import json
import re
import warnings
from dataclasses import replace
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from agents.commands.report import write_report
from agents.commands.report.figures import CURVE_FIGSIZE, FIGURE_DPI, PANEL_FIGSIZE
from agents.commands.report.scores import (
    TEXT_SMOOTHING,
    TRAINING_SECONDS,
    MixedEnvironmentsError,
    final_score,
    mean_curve,
    run_series,
    trailing_mean,
    training_seconds,
)
from agents.core.config import PPOConfig
from agents.core.objectives import GRPO, Clip, NoClip, Penalty, objective_label
from agents.runs.config import RunConfig, config_to_dict
from agents.runs.machine import describe_machine, machine_line, record_machine
from agents.runs.reader import ReportError, find_runs, load_run, objective_of
from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig
from agents.walkers.config import MujocoEnvConfig, TrainConfig
from envs.mujoco import random_policy_return
from envs.text.tasks import SentimentTaskConfig
from tests.conftest import run_ppo

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# The report over synthetic runs with known numbers


def mujoco_config(env_id: str, objective, seed: int) -> dict:
    return config_to_dict(
        TrainConfig(
            env=MujocoEnvConfig(env_id=env_id, num_steps=1000),
            objective=objective,
            ppo=PPOConfig(total_steps=10_000),
            run=RunConfig(seed=seed),
        )
    )


def text_config(objective, seed: int) -> dict:
    return config_to_dict(
        TextTrainConfig(
            text=TextEnvConfig(model="tiny", task=SentimentTaskConfig()),
            objective=objective,
            ppo=replace(TEXT_PPO_DEFAULTS, total_steps=700),
            run=RunConfig(seed=seed),
        )
    )


def write_run(run_dir: Path, config: dict, records: list[dict], samples: list[dict] | None = None) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if samples is not None:
        (run_dir / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def mujoco_records(final_return: float, beta: float = 0.0) -> list[dict]:
    """Ten iterations of 1000 steps, the return rising linearly to ``final_return``."""
    return [
        {
            "iteration": i,
            "global_step": 1000 * i,
            "episode_return": final_return * i / 10,
            "beta": beta,
            "kl_after_update": 0.01 + 0.001 * i,
            "clip_fraction": 0.1,
        }
        for i in range(1, 11)
    ]


def text_records(rewards: list[float]) -> list[dict]:
    return [
        {
            "iteration": i + 1,
            "global_step": 100 * (i + 1),
            "reward": r,
            "ref_kl": 0.5 * i,
            "response_length": 20.0 + i,
            "task_learned_reward": r,
            "task_gold_lexicon": r / 2,
            "beta": 1.0,
            "kl_after_update": 0.01,
            "clip_fraction": 0.05,
        }
        for i, r in enumerate(rewards)
    ]


FINAL_RETURNS = {  # env -> objective -> final returns of seeds 1, 2
    "Hopper-v5": {Clip(): [100.0, 200.0], Penalty(): [150.0, 150.0], NoClip(): [10.0, 30.0]},
    "Walker2d-v5": {Clip(): [50.0, 70.0], Penalty(): [70.0, 90.0], NoClip(): [90.0, 110.0]},
}
RANDOM_RETURNS = {"Hopper-v5": 0.0, "Walker2d-v5": 10.0}
# By hand: Hopper means clip 150, penalty 150, no-clip 20 (best 150, random 0) -> 1, 1, 20/150.
# Walker2d means clip 60, penalty 80, no-clip 100 (best 100, random 10) -> 50/90, 70/90, 1.
EXPECTED_NORMALIZED = {
    ("Hopper-v5", "clip-0.2"): 1.0, ("Hopper-v5", "penalty-0.01"): 1.0, ("Hopper-v5", "no-clip"): 20 / 150,
    ("Walker2d-v5", "clip-0.2"): 50 / 90, ("Walker2d-v5", "penalty-0.01"): 70 / 90, ("Walker2d-v5", "no-clip"): 1.0,
}  # fmt: skip
EXPECTED_AVERAGE = {"clip-0.2": (1 + 50 / 90) / 2, "penalty-0.01": (1 + 70 / 90) / 2, "no-clip": (20 / 150 + 1) / 2}
TEXT_REWARDS = {Clip(): {1: [9, 9, 1, 2, 3, 4, 5], 2: [9, 9, 3, 4, 5, 6, 7]}, Penalty(): {1: [0, 0, 0, 0, 0, 1, 1]}}
# By hand: text final score = mean reward of the last 5 iterations: clip seeds 3 and 5 -> 4 ± 1; penalty 0.4 ± 0.


@pytest.fixture
def synthetic_runs(tmp_path):
    """Two MuJoCo envs x three objectives x two seeds (one named like a plain ppo train run), plus text runs
    with samples.
    """
    root = tmp_path / "runs"
    for env_id, by_objective in FINAL_RETURNS.items():
        for objective, finals in by_objective.items():
            beta = 1.0 if isinstance(objective, Penalty) else 0.0
            for seed, final in zip((1, 2), finals):
                config = mujoco_config(env_id, objective, seed)
                if seed == 1:  # named as ppo compare names a cell
                    run_dir = root / "grid" / f"{env_id}__{objective_label(objective_of(config))}__s{seed}"
                else:  # named as ppo train names a run
                    run_dir = root / f"{env_id}__{config['objective']['name']}__s{seed}__20250101-000000"
                write_run(run_dir, config, mujoco_records(final, beta))
    for objective, by_seed in TEXT_REWARDS.items():
        for seed, rewards in by_seed.items():
            prompts = ["The movie was", "I think"] if seed == 1 else ["Another prompt", "I think"]
            samples = [
                {
                    "iteration": i,
                    "global_step": 100 * i,
                    "samples": [
                        {"prompt": p, "completion": f"{objective_label(objective)} says {i}", "score": float(i)}
                        for p in prompts
                    ],
                }
                for i in (6, 7)
            ]
            write_run(
                root / "grid" / f"text-sentiment__{objective_label(objective)}__s{seed}",
                text_config(objective, seed),
                text_records(rewards),
                samples,
            )
    return root


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def png_shape(path: Path) -> tuple[int, ...]:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    return matplotlib.image.imread(path).shape


def test_report_tables_hold_hand_computed_means_stds_and_normalised_scores(synthetic_runs, tmp_path):
    out = tmp_path / "report"
    runs = find_runs([synthetic_runs])
    assert len(runs) == 2 * 3 * 2 + 3
    record_machine(runs[0])
    write_report(runs, out, random_returns=RANDOM_RETURNS)
    report = (out / "report.md").read_text()
    assert f"Made on: {machine_line(describe_machine())}." in report
    assert "14 runs predate machine.json" in report
    assert "14 runs predate machine.json" in (out / "index.html").read_text()

    rows = {(r["env"], r["objective"]): r for r in read_csv(out / "final_scores.csv")}
    assert len(rows) == 2 * 3 + 2  # the ppo-train-named runs joined their compare-named siblings
    for env_id, by_objective in FINAL_RETURNS.items():
        for objective, finals in by_objective.items():
            row = rows[(env_id, objective_label(objective))]
            assert float(row["mean"]) == pytest.approx(np.mean(finals)) and float(row["std"]) == pytest.approx(
                np.std(finals)
            )
            assert row["seeds"] == "1 2" and float(row["random_return"]) == RANDOM_RETURNS[env_id]
            assert row["finished"] == "True True"
    for (env_id, label), expected in EXPECTED_NORMALIZED.items():
        assert float(rows[(env_id, label)]["normalized_score"]) == pytest.approx(expected)
    assert float(rows[("text:sentiment", "clip-0.2")]["mean"]) == pytest.approx(4.0)
    assert float(rows[("text:sentiment", "clip-0.2")]["std"]) == pytest.approx(1.0)
    assert float(rows[("text:sentiment", "penalty-0.01")]["mean"]) == pytest.approx(0.4)
    assert rows[("text:sentiment", "clip-0.2")]["normalized_score"] == ""  # text is not normalised (documented)

    table1 = {r["objective"]: r for r in read_csv(out / "normalized_scores.csv")}
    assert list(table1) == ["clip-0.2", "penalty-0.01", "no-clip"]  # the paper's order
    for label, expected in EXPECTED_AVERAGE.items():
        assert float(table1[label]["average"]) == pytest.approx(expected)
    markdown = (out / "report.md").read_text()
    assert "| clip-0.2 | 1.00 | 0.56 | 0.78 | 0.82 |" in markdown  # the paper's average beside ours
    assert "| no-clip | 0.13 | 1.00 | 0.57 | -0.39 |" in markdown
    assert "| Hopper-v5 | clip-0.2 | 2 | 2/2 | 10,000 | 150.0 ± 50.0 | 100.0, 200.0 | 1.00 |" in markdown


def test_report_figures_are_valid_pngs_of_the_documented_size_and_the_html_links_only_existing_files(
    synthetic_runs, tmp_path
):
    out = tmp_path / "report"
    index = write_report(find_runs([synthetic_runs]), out, random_returns=RANDOM_RETURNS)
    pixels = lambda inches: (round(inches[1] * FIGURE_DPI), round(inches[0] * FIGURE_DPI))  # noqa: E731
    panel_h, panel_w = pixels(PANEL_FIGSIZE)
    assert png_shape(out / "learning_curves_Hopper-v5.png")[:2] == pixels(CURVE_FIGSIZE)
    assert png_shape(out / "learning_curves_text-sentiment.png")[:2] == pixels(CURVE_FIGSIZE)
    assert png_shape(out / "learning_curves.png")[:2] == (panel_h, 3 * panel_w)  # three environments side by side
    assert png_shape(out / "diagnostics_Walker2d-v5.png")[:2] == (panel_h, 3 * panel_w)  # beta, KL, clip fraction
    assert png_shape(out / "text_text-sentiment.png")[:2] == (panel_h, 3 * panel_w)  # frontier, length, gold vs learned

    page = index.read_text()
    links = re.findall(r"(?:src|href)='([^']+)'", page)
    assert {
        "learning_curves.png",
        "diagnostics_Hopper-v5.png",
        "text_text-sentiment.png",
        "final_scores.csv",
        "normalized_scores.csv",
    } <= set(links)
    assert all((out / link).is_file() for link in links), [link for link in links if not (out / link).is_file()]
    assert not re.search(r"(?:src|href)=['\"](?:/|https?:)", page)
    for link in re.findall(r"\]\(([^)]+)\)", (out / "report.md").read_text()):
        assert (out / link).is_file()


def test_each_figure_of_a_one_environment_report_is_shown_once_on_both_pages(tmp_path):
    for seed in (1, 2):
        write_run(tmp_path / "runs" / f"s{seed}", mujoco_config("Hopper-v5", Clip(), seed), mujoco_records(100.0))
    out = tmp_path / "report"
    page = write_report(find_runs([tmp_path / "runs"]), out, random_returns={"Hopper-v5": 0.0}).read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    linked = re.findall(r"!\[[^]]*\]\(([^)]+)\)", (out / "report.md").read_text())
    written = sorted(path.name for path in out.glob("*.png"))
    assert sorted(images) == sorted(linked) == written  # every PNG once, on both pages
    assert [name for name in images if name.startswith("learning_curves")] == ["learning_curves_Hopper-v5.png"]


def test_sample_completions_line_up_by_prompt_or_sit_side_by_side(synthetic_runs, tmp_path):
    out = tmp_path / "report"
    write_report(find_runs([synthetic_runs]), out, random_returns=RANDOM_RETURNS)
    markdown = (out / "report.md").read_text()
    assert "Lined up by prompt" in markdown  # seed 1 of each objective shares both prompts in its last iteration
    assert "| The movie was | clip-0.2 says 7 (score 7.000) | penalty-0.01 says 7 (score 7.000) |" in markdown
    for run in (synthetic_runs / "grid").glob("text-sentiment__penalty-0.01__s1"):
        samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        for line in samples:
            for row in line["samples"]:
                row["prompt"] += " (other)"
        (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    write_report(find_runs([synthetic_runs]), out, random_returns=RANDOM_RETURNS)
    markdown = (out / "report.md").read_text()
    assert "side by side" in markdown and "**The movie was** clip-0.2 says 7" in markdown


def test_mean_curve_interpolates_seeds_onto_a_common_grid(tmp_path):
    write_run(
        tmp_path / "a",
        mujoco_config("Hopper-v5", Clip(), 1),
        [
            {"iteration": i, "global_step": x, "episode_return": y}
            for i, (x, y) in enumerate([(0, 0), (10, 10), (20, 20)], 1)
        ],
    )
    write_run(
        tmp_path / "b",
        mujoco_config("Hopper-v5", Clip(), 2),
        [
            {"iteration": 1, "global_step": 0, "episode_return": 0},
            {"iteration": 2, "global_step": 20, "episode_return": 40},
        ],
    )
    write_run(
        tmp_path / "c",
        mujoco_config("Hopper-v5", Clip(), 3),
        [
            {"iteration": 1, "global_step": 0, "episode_return": None},
            {"iteration": 2, "global_step": 10, "episode_return": 30},
        ],
    )
    curve = mean_curve([load_run(tmp_path / "a"), load_run(tmp_path / "b")], "episode_return", points=3)
    assert curve.x.tolist() == [0, 10, 20] and curve.mean.tolist() == [0, 15, 30] and curve.std.tolist() == [0, 5, 10]
    shorter = mean_curve(
        [load_run(tmp_path / "a"), load_run(tmp_path / "c")], "episode_return", points=3
    )  # c: one finite point, at 10
    assert shorter.mean[1] == 20 and shorter.mean[2] == 20 and shorter.std[2] == 0  # beyond c's range, a alone


def test_trailing_mean_matches_hand_computed_values():
    values = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    assert trailing_mean(values, 2).tolist() == [1.0, 1.5, 2.5, 3.5, 7.0]
    assert trailing_mean(values, 3).tolist() == [1.0, 1.5, 2.0, 3.0, pytest.approx(17 / 3)]
    assert trailing_mean(values, 1).tolist() == values.tolist()


def test_smoothed_text_curve_ends_at_the_final_score(tmp_path):
    rewards = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    write_run(
        tmp_path / "t",
        text_config(Clip(), 1),
        [{"iteration": i, "global_step": 100 * i, "reward": r} for i, r in enumerate(rewards, 1)],
    )
    run = load_run(tmp_path / "t")
    curve = mean_curve([run], "reward", points=len(rewards), smoothing=TEXT_SMOOTHING)
    assert curve.mean[-1] == pytest.approx(final_score(run)) == pytest.approx(np.mean(rewards[-TEXT_SMOOTHING:]))
    assert curve.mean[0] == 0.0 and curve.mean[1] == pytest.approx(0.5)


def test_finished_runs_that_stop_a_few_tokens_apart_both_count_to_the_end(tmp_path):
    # text budget 700 tokens: "early" finishes at 700, "late" at 800; an unfinished run stops at 300
    write_run(
        tmp_path / "early",
        text_config(Clip(), 1),
        [{"iteration": i, "global_step": 100 * i, "reward": 1.0} for i in range(1, 8)],
    )
    write_run(
        tmp_path / "late",
        text_config(Clip(), 2),
        [{"iteration": i, "global_step": 100 * i, "reward": 3.0} for i in range(1, 9)],
    )
    write_run(
        tmp_path / "cut",
        text_config(Clip(), 3),
        [{"iteration": i, "global_step": 100 * i, "reward": 8.0} for i in range(1, 4)],
    )
    curve = mean_curve([load_run(tmp_path / name) for name in ("early", "late", "cut")], "reward", points=8)
    assert curve.x.tolist() == [100, 200, 300, 400, 500, 600, 700, 800]
    assert curve.mean.tolist() == [
        4.0,
        4.0,
        4.0,
        2.0,
        2.0,
        2.0,
        2.0,
        2.0,
    ]  # "early" holds 1.0 at 800; "cut" drops out after 300
    write_report([tmp_path / name for name in ("early", "late", "cut")], tmp_path / "report")
    (row,) = read_csv(tmp_path / "report" / "final_scores.csv")
    assert (row["seeds"], row["finished"]) == ("1 2 3", "True True False")


def test_random_baseline_is_measured_cached_and_reused(tmp_path):
    write_run(tmp_path / "runs" / "a", mujoco_config("InvertedPendulum-v5", Clip(), 1), mujoco_records(50.0))
    out = tmp_path / "report"
    write_report(find_runs([tmp_path / "runs"]), out, random_episodes=3)
    cache = json.loads((out / "random_baselines.json").read_text())
    measured = random_policy_return("InvertedPendulum-v5", episodes=3)
    assert (
        cache["InvertedPendulum-v5"]["mean_return"] == pytest.approx(measured)
        and cache["InvertedPendulum-v5"]["episodes"] == 3
    )
    assert 0 < measured < 50
    cache["InvertedPendulum-v5"]["mean_return"] = 40.0  # a cached value is reused, not measured again
    (out / "random_baselines.json").write_text(json.dumps(cache))
    write_report(find_runs([tmp_path / "runs"]), out, random_episodes=3)
    assert float(read_csv(out / "final_scores.csv")[0]["random_return"]) == 40.0


def evaluated_text_records(heldout: list[float], seconds: float) -> list[dict]:
    """An evaluation before training (iteration 0), then 4 iterations of 100 tokens, ``seconds`` each (1/4 rollout,
    3/4 update), evaluated after iterations 2 and 4: ``heldout`` holds the 3 evaluations."""
    records = [{"iteration": 0, "global_step": 0, "eval_reward": heldout[0], "eval_seconds": 9.0}]
    for i in range(1, 5):
        record = {"iteration": i, "global_step": 100 * i, "reward": 0.1 * i, "ref_kl": 0.0, "response_length": 8.0}
        record |= {"rollout_seconds": seconds / 4, "update_seconds": 3 * seconds / 4, "zero_variance_groups": 0.5}
        if i % 2 == 0:
            record |= {"eval_reward": heldout[i // 2], "eval_seconds": 9.0}
        records.append(record)
    return records


def test_heldout_evaluations_give_curves_against_tokens_and_seconds_and_a_start_end_table(tmp_path):
    for seed, heldout, seconds in ((1, [0.1, 0.3, 0.5], 2.0), (2, [0.3, 0.5, 0.9], 4.0)):
        write_run(tmp_path / f"s{seed}", text_config(GRPO(), seed), evaluated_text_records(heldout, seconds))
    runs = [load_run(tmp_path / name) for name in ("s1", "s2")]
    by_tokens = mean_curve(runs, "eval_reward", points=3)
    assert by_tokens.x.tolist() == [0, 200, 400] and by_tokens.mean.tolist() == pytest.approx([0.2, 0.4, 0.7])
    assert training_seconds(runs[1]) == [0.0, 4.0, 8.0, 12.0, 16.0]  # evaluation time is not training time
    x, y = run_series(runs[1], "eval_reward", against=TRAINING_SECONDS)
    assert x.tolist() == [0.0, 8.0, 16.0] and y.tolist() == [0.3, 0.5, 0.9]

    out = tmp_path / "report"
    write_report([tmp_path / "s1", tmp_path / "s2"], out)
    markdown = (out / "report.md").read_text()
    # start 0.2 ± 0.1, end 0.7 ± 0.2; 400 tokens; (4 x 2 + 4 x 4) / 8 iterations = 3 s each; (8 + 16) / 2 = 12 s
    assert "| text:sentiment | grpo-8 | 2 | 0.200 ± 0.100 | 0.700 ± 0.200 | 0.500, 0.900 | 400 | 3.0 | 12.000 |" in (
        markdown
    )
    panel_h, panel_w = round(PANEL_FIGSIZE[1] * FIGURE_DPI), round(PANEL_FIGSIZE[0] * FIGURE_DPI)
    # frontier, length, held-out vs tokens, held-out vs seconds, equal-reward groups: 5 panels, 3 per row
    assert png_shape(out / "text_text-sentiment.png")[:2] == (2 * panel_h, 3 * panel_w)


def test_a_game_run_gets_a_turns_per_episode_panel(tmp_path):
    records = [
        {"iteration": i, "global_step": 100 * i, "reward": 0.1 * i, "ref_kl": 0.0, "response_length": 8.0}
        for i in range(1, 4)
    ]
    write_run(tmp_path / "plain", text_config(Clip(), 1), records)
    write_run(
        tmp_path / "game", text_config(Clip(), 2), [r | {"task_turns": 3.0 - 0.5 * i} for i, r in enumerate(records)]
    )
    panel_h, panel_w = round(PANEL_FIGSIZE[1] * FIGURE_DPI), round(PANEL_FIGSIZE[0] * FIGURE_DPI)
    for name, panels in (("plain", 2), ("game", 3)):  # frontier and length, then turns per episode
        write_report([tmp_path / name], tmp_path / f"report-{name}")
        assert png_shape(tmp_path / f"report-{name}" / "text_text-sentiment.png")[:2] == (panel_h, panels * panel_w)


# ---------------------------------------------------------------------------------------------
# Bad input: one clear line


def test_report_over_a_folder_without_runs_is_a_one_line_error(tmp_path):
    (tmp_path / "empty" / "not-a-run").mkdir(parents=True)
    result = run_ppo("report", str(tmp_path / "empty"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: no runs under {tmp_path / 'empty'} (a run folder holds config.json and metrics.jsonl)"
    ]


def test_runs_of_different_environments_are_refused_in_one_curve(synthetic_runs):
    runs = [load_run(path) for path in find_runs([synthetic_runs / "grid"])]
    hopper, walker = next(r for r in runs if r.env == "Hopper-v5"), next(r for r in runs if r.env == "Walker2d-v5")
    with pytest.raises(MixedEnvironmentsError) as error:
        mean_curve([hopper, walker], "episode_return")
    assert (
        str(error.value) == "refusing to put runs of different environments in one curve: Hopper-v5, Walker2d-v5; "
        "group them by environment"
    )
    assert isinstance(error.value, ReportError) and isinstance(error.value, ValueError)


def test_a_text_report_whose_runs_log_no_reference_kl_draws_every_panel_without_a_warning(tmp_path):
    records = [{k: v for k, v in r.items() if k != "ref_kl"} for r in text_records([0.1, 0.2, 0.3])]
    for seed in (1, 2):  # SAPO, DAPO and Dr. GRPO run no reference model, so they log no ref_kl
        write_run(tmp_path / "runs" / f"s{seed}", text_config(GRPO(), seed), records)
    with warnings.catch_warnings():
        # matplotlib's "No artists with labels" (an empty legend), "identical low and high ylims" (a log axis of a
        # constant series: text_records' KL) and any other warning it gives
        warnings.filterwarnings("error", category=UserWarning)
        write_report(find_runs([tmp_path / "runs"]), tmp_path / "report", random_returns={})
    assert png_shape(tmp_path / "report" / "text_text-sentiment.png")[:2] == (
        round(PANEL_FIGSIZE[1] * FIGURE_DPI),
        round(3 * PANEL_FIGSIZE[0] * FIGURE_DPI),
    )
