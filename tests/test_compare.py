"""``ppo compare``: grid expansion, presets, train options, resume, failures, bad input, end to end (the report
it writes is tested in test_report.py).
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agents.commands import cli
from agents.commands.compare import (
    PRESETS,
    CompareConfig,
    GridError,
    cell_config,
    compare_cli,
    expand_grid,
    plan_cell,
    resolve_presets,
    run_grid,
)
from agents.core.config import ConfigError, PPOConfig
from agents.core.objectives import DAPO, GRPO, RLOO, Clip, FixedKL, NoClip, Penalty, objective_label
from agents.runs.config import config_to_dict
from agents.runs.reader import load_run, objective_of
from agents.text.config import TEXT_PPO_DEFAULTS, TextTrainConfig
from agents.walkers.config import MujocoEnvConfig, TrainConfig
from agents.walkers.train import train
from envs.text.tasks import ArithmeticTaskConfig
from tests.conftest import run_ppo
from tests.test_report import mujoco_records, read_csv, text_config, text_records, write_run

TINY_MUJOCO = dict(total_steps=256, num_steps=128, minibatch_size=32, epochs=1, compile=False)


def tiny_grid(tmp_path: Path, **overrides) -> CompareConfig:
    """A grid of tiny InvertedPendulum cells under tmp_path/runs/grid, no report."""
    settings = dict(
        envs=("InvertedPendulum-v5",),
        objectives=("clip",),
        seeds=(1,),
        runs_dir=tmp_path / "runs",
        name="grid",
        report=False,
        **TINY_MUJOCO,
    )
    return CompareConfig(**{**settings, **overrides})


class RecordingRunner:
    """Stands in for the subprocess: records each command and the state of the run folder it found, returns
    a fixed status.
    """

    def __init__(self, status_of=lambda command: 0):
        self.commands, self.status_of = [], status_of

    def __call__(self, command, log_path):
        self.commands.append(tuple(command))
        return self.status_of(command)


# ---------------------------------------------------------------------------------------------
# Presets and grid expansion


def test_presets_are_the_papers_eleven_settings_then_the_group_methods_and_map_to_train_options():
    assert list(PRESETS)[11:15] == ["grpo-8", "dr-grpo-8", "rloo-8", "dapo-8"]  # then round 3's (test_policy_losses)
    assert list(PRESETS)[:11] == [
        "clip-0.1",
        "clip-0.2",
        "clip-0.3",
        "penalty-0.003",
        "penalty-0.01",
        "penalty-0.03",
        "fixed-kl-0.3",
        "fixed-kl-1",
        "fixed-kl-3",
        "fixed-kl-10",
        "no-clip",
    ]
    assert PRESETS["clip-0.1"].objective_args == ("clip", "--clip-coef", "0.1")
    assert PRESETS["penalty-0.003"].objective_args == ("penalty", "--kl-target", "0.003")
    assert PRESETS["fixed-kl-0.3"].objective_args == ("fixed-kl", "--beta", "0.3")
    assert PRESETS["fixed-kl-10"].objective_args == ("fixed-kl", "--beta", "10")
    assert PRESETS["no-clip"].objective_args == ("no-clip",)
    assert [p.name for p in resolve_presets(["clip", "clip-0.2", "penalty", "fixed-kl"])] == [
        "clip-0.2",
        "penalty-0.01",
        "fixed-kl-3",
    ]
    assert [p.name for p in resolve_presets(["paper"])] == list(PRESETS)[:11]
    assert [p.name for p in resolve_presets(["group"])] == list(PRESETS)[11:15]
    assert [p.name for p in resolve_presets(["grpo", "dr-grpo", "rloo", "dapo"])] == list(PRESETS)[11:15]
    assert PRESETS["dapo-8"].objective_args == ("dapo", "--group-size", "8")


def test_grid_expands_objectives_x_environments_x_seeds_in_order(tmp_path):
    config = tiny_grid(
        tmp_path, envs=("InvertedPendulum-v5", "text:arithmetic"), objectives=("clip", "no-clip"), seeds=(1, 2)
    )
    names = [cell.name for cell in expand_grid(config)]
    assert names == [
        "InvertedPendulum-v5__clip-0.2__s1", "InvertedPendulum-v5__clip-0.2__s2",
        "text-arithmetic__clip-0.2__s1", "text-arithmetic__clip-0.2__s2",
        "InvertedPendulum-v5__no-clip__s1", "InvertedPendulum-v5__no-clip__s2",
        "text-arithmetic__no-clip__s1", "text-arithmetic__no-clip__s2",
    ]  # fmt: skip


@pytest.mark.parametrize("name", list(PRESETS)[:11])
def test_each_cell_command_parses_to_its_preset_objective_and_options(tmp_path, name):
    config = tiny_grid(tmp_path, objectives=(name,), seeds=(7,), jobs=2)
    cell = expand_grid(config)[0]
    parsed = cell_config(cell, config, tmp_path / "runs" / "grid")
    assert parsed.objective == PRESETS[name].objective
    assert (parsed.env.env_id, parsed.run.seed, parsed.run.torch_threads, parsed.run.compile) == (
        "InvertedPendulum-v5",
        7,
        1,
        False,
    )
    assert (parsed.ppo.total_steps, parsed.env.num_steps, parsed.ppo.minibatch_size, parsed.ppo.epochs) == (
        256,
        128,
        32,
        1,
    )
    assert (
        objective_label(objective_of(config_to_dict(parsed))) == name
    )  # so ppo report groups the cell under the preset's name


@pytest.mark.parametrize("name", list(PRESETS)[11:15])
def test_group_presets_make_text_and_walker_cells(tmp_path, name):
    envs = ("text:arithmetic", "InvertedPendulum-v5")
    config = tiny_grid(tmp_path, envs=envs, objectives=(name,), model="tiny", prompts_per_iteration=8)
    for cell in expand_grid(config):
        parsed = cell_config(cell, config, tmp_path / "runs" / "grid")
        assert parsed.objective == PRESETS[name].objective
        assert objective_label(objective_of(config_to_dict(parsed))) == name
    text_only_batch = tiny_grid(tmp_path, envs=("text:arithmetic",), objectives=(name,), prompts_per_iteration=4)
    with pytest.raises(ConfigError, match="not a whole number of groups of --group-size 8"):
        cell_config(expand_grid(text_only_batch)[0], text_only_batch, tmp_path / "runs" / "grid")


def test_text_cells_run_ppo_train_text_with_the_model_and_task(tmp_path):
    config = tiny_grid(
        tmp_path,
        envs=("text:arithmetic",),
        objectives=("penalty",),
        total_steps=1000,
        text_total_steps=64,
        model="tiny",
        eval_every=3,
        eval_prompts=20,
        task_options=("operand_max=9", "operations=+"),
    )
    cell = expand_grid(config)[0]
    parsed = cell_config(cell, config, tmp_path / "runs" / "grid")
    assert isinstance(parsed, TextTrainConfig) and isinstance(parsed.text.task, ArithmeticTaskConfig)
    assert (parsed.text.model, parsed.ppo.total_steps, parsed.objective) == ("tiny", 64, Penalty(kl_target=0.01))
    assert (parsed.text.eval_every, parsed.text.eval_prompts) == (3, 20)
    assert (parsed.text.task.operand_max, parsed.text.task.operations) == (9, "+")
    assert parsed.ppo.epochs == TEXT_PPO_DEFAULTS.epochs  # MuJoCo-only options leave text's defaults alone
    command = plan_cell(cell, config, tmp_path / "runs" / "grid").command
    assert command[:5] == (sys.executable, "-m", "agents", "train", "text")


def test_runs_of_ppo_train_and_ppo_compare_get_the_same_labels():
    for objective, label in [
        (Clip(clip_coef=0.3), "clip-0.3"),
        (Penalty(kl_target=0.03), "penalty-0.03"),
        (FixedKL(beta=1.0), "fixed-kl-1"),
        (NoClip(), "no-clip"),
    ]:
        assert objective_label(objective_of(config_to_dict(TrainConfig(objective=objective)))) == label
        assert label in PRESETS


def test_switching_off_value_clip_obs_norm_or_reward_scaling_reaches_the_cells_and_splits_the_label(tmp_path):
    config = tiny_grid(tmp_path, objectives=("clip",), value_clip=False, normalize_observations=False)
    parsed = cell_config(expand_grid(config)[0], config, tmp_path / "runs" / "grid")
    assert (parsed.ppo.value_clip, parsed.env.normalize_observations, parsed.env.scale_rewards) == (None, False, True)
    config = tiny_grid(tmp_path, scale_rewards=False)
    parsed = cell_config(expand_grid(config)[0], config, tmp_path / "runs" / "grid")
    assert (parsed.ppo.value_clip, parsed.env.normalize_observations, parsed.env.scale_rewards) == (0.2, True, False)
    default = cell_config(expand_grid(tiny_grid(tmp_path))[0], tiny_grid(tmp_path), tmp_path / "runs" / "grid")
    assert (default.ppo.value_clip, default.env.normalize_observations, default.env.scale_rewards) == (0.2, True, True)

    for name, value_clip, normalize, scale, label in [
        ("all-off", None, False, False, "clip-0.2 (no value clip, no obs norm, no reward scaling)"),
        ("vclip-off", None, True, True, "clip-0.2 (no value clip)"),
        ("scaling-off", 0.2, True, False, "clip-0.2 (no reward scaling)"),
        ("default", 0.2, True, True, "clip-0.2"),
    ]:
        run_config = config_to_dict(
            TrainConfig(
                env=MujocoEnvConfig(
                    env_id="Hopper-v5", num_steps=1000, normalize_observations=normalize, scale_rewards=scale
                ),
                objective=Clip(),
                ppo=PPOConfig(total_steps=10_000, value_clip=value_clip),
            )
        )
        write_run(tmp_path / "runs" / name, run_config, mujoco_records(100.0))
        assert load_run(tmp_path / "runs" / name).objective == label


def test_text_runs_that_assign_multi_turn_credit_differently_get_their_own_label(tmp_path):
    for name, changes, label in [
        ("token", {}, "clip-0.2"),
        ("bi-level", {"multi_turn_gae": "bi-level", "critic_warmup": 2}, "clip-0.2 (bi-level GAE, critic warm-up 2)"),
        ("turn-gamma", {"turn_gamma": 0.9}, "clip-0.2 (turn gamma 0.9)"),
    ]:
        run_config = text_config(Clip(), seed=1)
        run_config["text"].update(changes)
        write_run(tmp_path / "runs" / name, run_config, text_records([0.1, 0.2]))
        assert load_run(tmp_path / "runs" / name).objective == label


def test_text_runs_with_another_reference_kl_or_objective_setting_than_the_recipe_get_their_own_label(tmp_path):
    for name, objective, changes, label in [
        ("grpo", GRPO(), {}, "grpo-8"),
        ("grpo-loss-given", GRPO(), {"ref_kl_in": "loss", "ref_kl_coef": 0.04}, "grpo-8"),
        ("grpo-no-kl", GRPO(), {"ref_kl_coef": 0.0}, "grpo-8 (no reference KL)"),
        ("grpo-k2", GRPO(), {"ref_kl_estimator": "k2"}, "grpo-8 (k2 reference KL 0.04 in the loss)"),
        ("rloo-none", RLOO(), {"ref_kl_in": "none"}, "rloo-8 (no reference KL)"),
        ("dapo-none-given", DAPO(), {"ref_kl_in": "none"}, "dapo-8"),
        ("dapo-kl", DAPO(), {"ref_kl_in": "loss"}, "dapo-8 (reference KL 0.04 in the loss)"),
        ("dapo-no-cache", replace(DAPO(), overlong_cache=0), {}, "dapo-8 (overlong cache 0)"),
        (
            "clip-high",
            Clip(clip_coef_high=0.28),
            {"ref_kl_coef": 0.1},
            "clip-0.2 (reference KL 0.1 in the reward, clip coef high 0.28)",
        ),
    ]:
        run_config = text_config(objective, seed=1)
        run_config["text"].update(changes)
        write_run(tmp_path / "runs" / name, run_config, text_records([0.1, 0.2]))
        assert load_run(tmp_path / "runs" / name).objective == label


# ---------------------------------------------------------------------------------------------
# Resume, skip, failures


def test_a_finished_cell_is_not_run_again(tmp_path):
    config = tiny_grid(tmp_path)
    grid_dir = tmp_path / "runs" / "grid"
    cell = expand_grid(config)[0]
    run_dir = train(cell_config(cell, config, grid_dir))  # exactly the run the cell's subprocess would write
    metrics_mtime = (run_dir / "metrics.jsonl").stat().st_mtime_ns
    runner = RecordingRunner()
    result = run_grid(config, runner)
    assert runner.commands == [] and [p.action for p in result.plans] == ["skip"]
    assert (run_dir / "metrics.jsonl").stat().st_mtime_ns == metrics_mtime


def fake_run(run_dir: Path, config, steps: list[int], checkpoint: bool) -> None:
    """A run folder as ppo train leaves it: config.json, metrics lines at ``steps``, optionally a checkpoint."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(config_to_dict(config)))
    lines = [{"iteration": i + 1, "global_step": step, "episode_return": 1.0} for i, step in enumerate(steps)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if checkpoint:
        (run_dir / "checkpoints").mkdir()
        (run_dir / "checkpoints" / "latest.pt").write_bytes(b"checkpoint")


def test_an_interrupted_cell_is_resumed_from_its_checkpoint_and_a_checkpointless_one_restarts(tmp_path):
    config = tiny_grid(tmp_path, seeds=(1, 2))
    grid_dir = tmp_path / "runs" / "grid"
    interrupted, unsaved = expand_grid(config)
    fake_run(grid_dir / interrupted.name, cell_config(interrupted, config, grid_dir), [128], checkpoint=True)
    fake_run(grid_dir / unsaved.name, cell_config(unsaved, config, grid_dir), [128], checkpoint=False)
    folder_existed = []
    runner = RecordingRunner(lambda command: folder_existed.append((grid_dir / unsaved.name).exists()) or 0)
    result = run_grid(config, runner)
    assert [p.action for p in result.plans] == ["resume", "start"]
    assert runner.commands[0] == (
        sys.executable,
        "-m",
        "agents",
        "train",
        "--resume",
        str(grid_dir / interrupted.name),
        "--no-progress",
    )
    assert "--resume" not in runner.commands[1] and runner.commands[1][-3:] == ("clip", "--clip-coef", "0.2")
    assert folder_existed[1] is False  # the stale folder was cleared, so ppo train does not append to its metrics


def test_a_cell_made_with_another_budget_is_refused_not_mixed(tmp_path):
    config = tiny_grid(tmp_path)
    grid_dir = tmp_path / "runs" / "grid"
    cell = expand_grid(config)[0]
    fake_run(
        grid_dir / cell.name, cell_config(cell, replace(config, total_steps=512), grid_dir), [128], checkpoint=True
    )
    with pytest.raises(GridError, match=r"ppo.total_steps: 512 \(on disk\) vs 256 \(asked\)"):
        run_grid(config, RecordingRunner())


def test_a_failing_cell_is_reported_the_others_run_and_the_exit_status_is_1(tmp_path, monkeypatch, capsys):
    config = tiny_grid(tmp_path, objectives=("clip", "no-clip"), seeds=(1, 2))
    runner = RecordingRunner(
        lambda command: 1 if "no-clip" in command and command[command.index("--seed") + 1] == "1" else 0
    )
    monkeypatch.setattr("agents.commands.compare.run_logged", runner)
    assert compare_cli(config) == 1
    assert len(runner.commands) == 4
    failures = capsys.readouterr().err.splitlines()
    assert failures[0] == "1 of 4 cells failed (re-run the same command to retry them):"
    assert failures[1].startswith("  InvertedPendulum-v5__no-clip__s1: ") and len(failures) == 2


# ---------------------------------------------------------------------------------------------
# Bad input: one clear line


def cli_error(monkeypatch, *args: str) -> str:
    """Run ``ppo ARGS`` in this process and return the message it exits with."""
    monkeypatch.setattr(sys, "argv", ["ppo", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    return str(exit_info.value.code)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "--seeds"], "empty grid: --seeds got no values"),
        (["compare", "--objectives"], "empty grid: --objectives got no values"),
        (["compare", "--objectives", "clip", "clipp"], "unknown objective preset 'clipp'; known: clip-0.1, clip-0.2"),
        (["compare", "--envs", "Hoper-v5"], "unknown environment id 'Hoper-v5'"),
        (
            ["compare", "--envs", "text:poetry"],
            "unknown text task 'text:poetry'; text environments: text:sentiment, text:arithmetic, text:reasoning",
        ),
        (["compare", "--jobs", "0"], "--jobs must be a positive integer"),
        (
            ["compare", "--envs", "text:arithmetic", "--task-options", "operand_max"],
            "--task-options takes NAME=VALUE (e.g. operand_max=9), got 'operand_max'",
        ),
        (
            ["compare", "--minibatch-size", "100", "--num-steps", "128"],
            "--minibatch-size 100 does not divide the batch of 128",
        ),
        (["report"], "no run folders given"),
        (["report", "/nonexistent/runs"], "/nonexistent/runs does not exist"),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    error = cli_error(monkeypatch, *args)
    assert error.startswith("error: ") and message in error and "\n" not in error, error
    assert not (tmp_path / "runs").exists()  # nothing was started


# ---------------------------------------------------------------------------------------------
# End to end through the CLI


def test_ppo_compare_end_to_end_then_a_rerun_skips_everything(tmp_path):
    args = [
        "compare",
        "--envs",
        "InvertedPendulum-v5",
        "--objectives",
        "clip",
        "no-clip",
        "--seeds",
        "1",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--name",
        "e2e",
        "--total-steps",
        "256",
        "--num-steps",
        "128",
        "--minibatch-size",
        "32",
        "--epochs",
        "1",
        "--no-compile",
        "--random-episodes",
        "2",
    ]
    result = run_ppo(*args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    grid = tmp_path / "runs" / "e2e"
    for name in ("InvertedPendulum-v5__clip-0.2__s1", "InvertedPendulum-v5__no-clip__s1"):
        assert load_run(grid / name).finished
    report = grid / "report"
    for file in (
        "index.html",
        "report.md",
        "final_scores.csv",
        "normalized_scores.csv",
        "random_baselines.json",
        "learning_curves_InvertedPendulum-v5.png",  # one environment: its figure, no combined copy
    ):
        assert (report / file).is_file()
    assert {r["objective"] for r in read_csv(report / "final_scores.csv")} == {"clip-0.2", "no-clip"}
    again = run_ppo(*args, "--no-report")
    assert again.returncode == 0 and "2 cells: 2 finished, 0 to resume, 0 to start" in again.stdout


def test_train_options_reach_every_cell_before_its_task_and_objective_and_compares_own_are_refused(tmp_path):
    grid_dir = tmp_path / "runs" / "grid"
    text = tiny_grid(tmp_path, envs=("text:arithmetic",), model="tiny", train_options=("minibatch_size=4",))
    text_cell = expand_grid(text)[0]
    assert cell_config(text_cell, text, grid_dir).ppo.minibatch_size == 4  # compare's --minibatch-size is MuJoCo's
    command = plan_cell(text_cell, text, grid_dir).command
    assert command.index("--minibatch-size") < command.index("arithmetic") < command.index("clip")
    walker = tiny_grid(tmp_path, train_options=("nproc=2",))
    walker_cell = expand_grid(walker)[0]
    assert cell_config(walker_cell, walker, grid_dir).run.nproc == 2
    command = plan_cell(walker_cell, walker, grid_dir).command
    assert command[command.index("--nproc") + 1] == "2" and command.index("--nproc") < command.index("clip")
    with pytest.raises(GridError, match="--train-options 'seed=3': ppo compare sets that itself"):
        run_grid(replace(walker, train_options=("seed=3",)))
    with pytest.raises(GridError, match=r"--train-options takes NAME=VALUE \(e.g. nproc=2\), got 'nproc'"):
        cell_config(walker_cell, replace(walker, train_options=("nproc",)), grid_dir)
    widths = replace(walker, train_options=("hidden_sizes=256 128", "activation=relu"))
    assert cell_config(walker_cell, widths, grid_dir).policy.hidden_sizes == (256, 128)
    with pytest.raises(GridError, match='--train-options "activation=\'relu": No closing quotation'):
        cell_config(walker_cell, replace(walker, train_options=("activation='relu",)), grid_dir)


def test_objective_options_reach_every_cells_objective_and_may_not_rename_its_preset(tmp_path):
    grid_dir = tmp_path / "runs" / "grid"
    text = tiny_grid(
        tmp_path, envs=("text:arithmetic",), objectives=("dapo",), model="tiny", objective_options=("overlong_cache=0",)
    )
    text_cell = expand_grid(text)[0]
    assert cell_config(text_cell, text, grid_dir).objective.overlong_cache == 0
    assert cell_config(text_cell, replace(text, objective_options=()), grid_dir).objective.overlong_cache > 0
    command = plan_cell(text_cell, text, grid_dir).command
    assert command.index("dapo") < command.index("--overlong-cache") and command[-1] == "0"
    walker = tiny_grid(tmp_path, objective_options=("clip_coef_high=0.28",))
    walker_cell = expand_grid(walker)[0]
    assert cell_config(walker_cell, walker, grid_dir).objective.clip_coef_high == 0.28
    with pytest.raises(GridError, match="sets group_size, the value preset dapo-8 is named by"):
        run_grid(replace(text, objective_options=("group_size=4",)))
    with pytest.raises(GridError, match=r"--objective-options takes NAME=VALUE \(e.g. overlong_cache=0\)"):
        cell_config(text_cell, replace(text, objective_options=("overlong_cache",)), grid_dir)
