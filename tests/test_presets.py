"""``ppo train --preset``: the paper's settings unchanged, the tuned settings of agents/walkers/presets.py, the command
line over both, config.json, and the network options the tuned recipes need."""

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

import agents.walkers.train
from agents.commands.train_args import parse_train_args
from agents.core.config import ConfigError
from agents.runs.config import config_to_dict, read_config
from agents.runs.session import prepare_run
from agents.walkers.config import TrainConfig, preset_config, validate_config
from agents.walkers.evaluate import load_policy
from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.presets import CONFIRMED, TUNED, Setting, with_settings
from agents.walkers.train import train
from tests.conftest import run_ppo

SMALL_RUN = ["--total-steps", "512", "--no-compile", "--no-progress", "--checkpoint-every", "1"]


def flat(config: TrainConfig) -> dict[str, object]:
    """Every leaf of ``config``'s config.json form, keyed by its dotted path (``ppo.gamma``)."""

    def leaves(prefix: str, node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from leaves(f"{prefix}{key}.", value)
        else:
            yield prefix[:-1], node

    return dict(leaves("", config_to_dict(config)))


def as_json(value):
    return list(value) if isinstance(value, tuple) else value


def test_the_paper_preset_is_the_defaults_field_by_field():
    paper = flat(TrainConfig())
    for config in (parse_train_args([]), parse_train_args(["--preset", "paper"]), preset_config("paper", "Hopper-v5")):
        assert flat(config) == paper
    assert paper["preset"] == "paper"


@pytest.mark.parametrize("task", sorted(TUNED))
def test_the_tuned_preset_sets_exactly_the_files_values(task):
    paper = flat(parse_train_args(["--env-id", task]))
    tuned = flat(parse_train_args(["--env-id", task, "--preset", "tuned"]))
    settings = {setting.field: as_json(setting.value) for setting in TUNED[task].settings}
    assert len(settings) == len(TUNED[task].settings), "a field is set twice"
    changed = {key for key in paper if paper[key] != tuned[key]}
    assert changed == {"preset", *settings}, "the preset changes a value it does not list, or lists an unchanged one"
    assert {key: tuned[key] for key in settings} == settings
    assert tuned["env.env_id"] == task
    validate_config(parse_train_args(["--env-id", task, "--preset", "tuned"]))


def test_every_tuned_entry_names_its_source_and_its_status():
    for task, tuned in TUNED.items():
        assert tuned.status.startswith("from ") and "sweep" in tuned.status, task
        assert CONFIRMED in tuned.status, f"{task}: every entry was chosen by the sweep on seeds 1-3"
        assert "seeds 4-6" in tuned.status, f"{task}: an entry gives its figure on the seeds the choice never saw"
        for setting in tuned.settings:
            assert len(setting.source) > 20 and setting.source.strip() == setting.source, (task, setting)
    assert {task.split("-v")[1] for task in TUNED} == {"5"}


def test_command_line_options_override_the_preset_and_the_rest_keeps_it():
    args = ["--env-id", "HalfCheetah-v5", "--preset", "tuned", "--gamma", "0.99", "--activation", "tanh"]
    config = parse_train_args([*args, "clip", "--clip-coef", "0.2"])
    assert config.ppo.gamma == 0.99 and config.policy.activation == "tanh" and config.objective.clip_coef == 0.2
    assert config.ppo.gae_lambda == 0.92 and config.policy.hidden_sizes == (256, 256)  # not given: the preset's
    assert parse_train_args(["--env-id=HalfCheetah-v5", "--preset=tuned", "clip"]).objective.clip_coef == 0.1
    assert parse_train_args(["--preset", "tuned", "--env-id", "Swimmer-v5"]).ppo.gamma == 0.9999  # either order


def test_a_tuned_run_saves_resumes_and_evaluates_with_the_presets_values(tmp_path):
    config = parse_train_args(
        ["--env-id", "HalfCheetah-v5", "--preset", "tuned", *SMALL_RUN, "--runs-dir", str(tmp_path), "--run-name", "r"]
    )
    run_dir = train(config)
    saved = read_config(run_dir)
    assert saved["preset"] == "tuned"
    network = {"hidden_sizes": [256, 256], "initial_log_std": -2.0, "activation": "relu", "orthogonal_init": False}
    assert saved["policy"] == network
    assert saved["ppo"]["value_clip"] is None and saved["objective"]["clip_coef"] == 0.1
    resumed = prepare_run(parse_train_args(["--resume", str(run_dir), "--no-progress"]), validate_config).config
    assert resumed == dataclasses.replace(config, run=dataclasses.replace(config.run, resume=run_dir))
    policy, env_id = load_policy(run_dir)
    assert env_id == "HalfCheetah-v5" and any(isinstance(layer, nn.ReLU) for layer in policy.actor_mean)


def test_unknown_tasks_presets_and_activations_fail_in_one_line(tmp_path):
    cases = {
        ("--env-id", "Hopper-v4", "--preset", "tuned"): "--preset tuned has no settings for Hopper-v4; tasks with "
        "tuned settings: Ant-v5, HalfCheetah-v5, Hopper-v5",
        ("--preset", "best"): "--preset must be one of paper, tuned, got 'best'",
        ("--activation", "gelu"): "--activation must be one of tanh, relu, got 'gelu'",
    }
    for args, message in cases.items():
        result = run_ppo("train", "--runs-dir", str(tmp_path), "--no-progress", *args)
        assert result.returncode != 0
        assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
        assert message in result.stderr
    assert not any(tmp_path.iterdir()), "a rejected config must not create a run folder"


def test_relu_and_widths_build_the_network_they_say_and_the_numpy_actor_follows():
    torch.manual_seed(0)
    policy = GaussianActorCritic(5, 2, (32, 16), activation="relu")
    for net, out in ((policy.actor_mean, 2), (policy.critic, 1)):
        linears = [layer for layer in net if isinstance(layer, nn.Linear)]
        assert [(layer.in_features, layer.out_features) for layer in linears] == [(5, 32), (32, 16), (16, out)]
        assert [type(layer) for layer in net if not isinstance(layer, nn.Linear)] == [nn.ReLU, nn.ReLU]
    for layer in policy.actor_mean:
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight)
            nn.init.normal_(layer.bias)  # negative pre-activations, so that relu and tanh differ
    obs = np.random.default_rng(2).normal(size=(7, 5)).astype(np.float32)
    expected = policy.action_mean(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(policy.numpy_actor().mean(obs), expected, rtol=1e-5, atol=1e-5)
    tanh_actor = GaussianActorCritic(5, 2, (32, 16))
    tanh_actor.load_state_dict(policy.state_dict())
    assert not np.allclose(tanh_actor.numpy_actor().mean(obs), expected, atol=1e-3)


def test_without_orthogonal_init_every_layer_keeps_torchs_default_init():
    torch.manual_seed(0)
    policy = GaussianActorCritic(11, 3, orthogonal_init=False)
    torch.manual_seed(0)
    default = nn.Linear(11, 64)
    torch.testing.assert_close(policy.actor_mean[0].weight, default.weight, rtol=0, atol=0)
    torch.testing.assert_close(policy.actor_mean[0].bias, default.bias, rtol=0, atol=0)
    out = policy.actor_mean[-1].weight  # torch's default: uniform in +-1/sqrt(64), far from the 0.01 gain
    assert out.abs().max().item() <= 1 / 8 and (out @ out.T).diagonal().mean().item() > 1e-2
    torch.manual_seed(0)
    orthogonal = GaussianActorCritic(11, 3)
    hidden = orthogonal.actor_mean[0].weight
    torch.testing.assert_close(hidden.T @ hidden, 2.0 * torch.eye(11), atol=1e-5, rtol=0)


def test_the_training_loop_builds_the_network_the_config_asks_for(tmp_path, monkeypatch):
    built = []

    class Recorded(GaussianActorCritic):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append((self, self.actor_mean[0].bias.detach().clone()))  # the bias before training moves it

    monkeypatch.setattr(agents.walkers.train, "GaussianActorCritic", Recorded)
    args = ["--activation", "relu", "--no-orthogonal-init", "--hidden-sizes", "16", "8", "--num-steps", "128"]
    train(parse_train_args([*args, *SMALL_RUN, "--minibatch-size", "32", "--runs-dir", str(tmp_path)]))
    ((policy, initial_bias),) = built
    assert [type(layer) for layer in policy.critic] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    assert policy.actor_mean[0].out_features == 16 and initial_bias.abs().min().item() > 0  # orthogonal init: zeros


def test_bad_networks_and_settings_fail_in_one_line():
    config = TrainConfig()
    with pytest.raises(ConfigError, match="^--activation must be one of tanh, relu, got 'sigmoid'$"):
        validate_config(dataclasses.replace(config, policy=dataclasses.replace(config.policy, activation="sigmoid")))
    with pytest.raises(ValueError, match="activation must be one of"):
        GaussianActorCritic(3, 1, activation="sigmoid")
    with pytest.raises(ValueError, match="PPOConfig has no field 'gama'"):
        with_settings(config, (Setting("ppo.gama", 0.9, "a typo"),))


def write_sweep_scores(runs_dir, candidate, seeds, per_seed, finished=True):
    """A grid's report/final_scores.csv as ``ppo compare`` writes it, for one Swimmer candidate of the sweep."""
    from benchmarks.experiments import tuned_sweep

    folder = runs_dir / tuned_sweep.grid_name("Swimmer-v5", candidate, seeds) / "report"
    folder.mkdir(parents=True)
    done, seed_list, returns = (" ".join(map(str, values)) for values in ([str(finished)] * 3, seeds, per_seed))
    (folder / "final_scores.csv").write_text(
        "env,kind,objective,measure,seeds,final_steps,finished,mean,std,per_seed,random_return,normalized_score\n"
        f"Swimmer-v5,mujoco,clip-0.2 (no value clip),return,{seed_list},1 1 1,{done},0,0,{returns},,\n"
    )


def test_the_sweep_prints_its_grids_and_chooses_on_seeds_1_to_3_only(tmp_path):
    import subprocess
    import sys

    from benchmarks.experiments import tuned_sweep

    dry = subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.tuned_sweep", "--tasks", "Swimmer-v5", "--dry-run",
         "--runs-dir", str(tmp_path), "--record-dir", str(tmp_path / "recorded")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    commands = [line for line in dry.stdout.splitlines() if line.startswith("$ ppo compare")]
    assert len(commands) == len(tuned_sweep.candidates("Swimmer-v5"))
    assert all("--seeds 1 2 3" in c and "--total-steps 1000000" in c for c in commands)
    assert "--train-options preset=tuned anneal_lr=True" in dry.stdout
    only = subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.tuned_sweep", "--tasks", "Swimmer-v5", "--dry-run",
         "--runs-dir", str(tmp_path), "--record-dir", str(tmp_path / "recorded"), "--candidates", "tuned-anneal"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert [line for line in only.stdout.splitlines() if line.startswith("$ ppo compare")] == [
        c for c in commands if "__tuned-anneal__" in c
    ]
    unknown = subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.tuned_sweep", "--dry-run", "--candidates", "tuned-fast"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert unknown.returncode != 0 and "invalid choice: 'tuned-fast'" in unknown.stderr

    class Args:
        runs_dir = tmp_path
        record_dir = tmp_path / "recorded"
        paper_reports = None

    def write_scores(candidate, seeds, per_seed):
        write_sweep_scores(tmp_path, candidate, seeds, per_seed)

    for candidate, score in zip(tuned_sweep.candidates("Swimmer-v5")[:-1], (50, 280, 120)):
        write_scores(candidate, tuned_sweep.CHOOSE_SEEDS, [score - 1, score, score + 1])
    assert tuned_sweep.chosen(Args, "Swimmer-v5") is None  # one candidate has not finished
    write_scores(tuned_sweep.candidates("Swimmer-v5")[-1], tuned_sweep.CHOOSE_SEEDS, [100, 100, 100])
    write_scores("paper", tuned_sweep.REPORT_SEEDS, [900, 900, 900])  # seeds 4-6 never sway the choice
    assert tuned_sweep.chosen(Args, "Swimmer-v5") == "tuned"


def test_a_finished_grid_is_recorded_and_another_machine_reads_it_without_the_runs(tmp_path):
    import subprocess
    import sys

    from benchmarks.experiments import tuned_sweep

    class Args:
        runs_dir = tmp_path / "runs"
        record_dir = tmp_path / "recorded"
        paper_reports = None

    seeds = tuned_sweep.CHOOSE_SEEDS
    write_sweep_scores(Args.runs_dir, "tuned", seeds, [300, 310, 320])
    write_sweep_scores(Args.runs_dir, "paper", seeds, [80, 90, 100], finished=False)
    tuned_sweep.record(Args, "Swimmer-v5", "tuned", seeds)
    tuned_sweep.record(Args, "Swimmer-v5", "paper", seeds)  # unfinished: nothing to record
    grid = tuned_sweep.grid_name("Swimmer-v5", "tuned", seeds)
    assert (Args.record_dir / grid / "final_scores.csv").is_file()
    assert not (Args.record_dir / tuned_sweep.grid_name("Swimmer-v5", "paper", seeds)).exists()

    Args.runs_dir = tmp_path / "elsewhere"  # another machine: no runs, only the recorded copies
    assert tuned_sweep.final_score(Args, "Swimmer-v5", "tuned", seeds) == [300.0, 310.0, 320.0]
    assert tuned_sweep.final_score(Args, "Swimmer-v5", "paper", seeds) is None
    dry = subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.tuned_sweep", "--tasks", "Swimmer-v5", "--dry-run",
         "--runs-dir", str(Args.runs_dir), "--record-dir", str(Args.record_dir)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    commands = [line for line in dry.stdout.splitlines() if line.startswith("$ ppo compare")]
    assert len(commands) == len(tuned_sweep.candidates("Swimmer-v5")) - 1
    assert not any(grid in c for c in commands) and "Swimmer-v5 tuned: finished, read from" in dry.stdout
    assert "| Swimmer-v5 | tuned | preset=tuned | 310 ± 8 | - |" in dry.stdout

    by_hand = tmp_path / "by_hand"  # a grid whose ppo compare ran outside the sweep is recorded when the sweep passes
    write_sweep_scores(by_hand, "paper", seeds, [80, 90, 100])
    subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.tuned_sweep", "--tasks", "Swimmer-v5", "--candidates", "paper",
         "--runs-dir", str(by_hand), "--record-dir", str(Args.record_dir)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert tuned_sweep.final_score(Args, "Swimmer-v5", "paper", seeds) == [80.0, 90.0, 100.0]


def test_the_sweep_reads_papers_seeds_from_table_1_and_skips_tuned_where_it_is_the_paper(tmp_path):
    import subprocess
    import sys

    from benchmarks.experiments import tuned_sweep

    swept = {task for task, entry in TUNED.items() if entry.settings}  # a preset that sets values was swept
    assert swept <= set(tuned_sweep.SWEEP_CANDIDATES)
    for task in set(TUNED) - set(tuned_sweep.SWEEP_CANDIDATES):  # the rest keep the paper's and run it once
        assert not TUNED[task].settings and tuned_sweep.candidates(task) == ("paper",)
    table1 = tmp_path / "table1" / "Swimmer-v5"
    table1.mkdir(parents=True)
    header = "env,kind,objective,measure,seeds,final_steps,finished,mean,std,per_seed,random_return,normalized_score\n"
    (table1 / "final_scores.csv").write_text(
        header + "Swimmer-v5,mujoco,clip-0.1,return,1 2 3,1 1 1,True True True,0,0,7 7 7,,\n"
        "Swimmer-v5,mujoco,clip-0.2,return,1 2 3,1 1 1,True True True,0,0,76 55 117,,\n"
    )

    class Args:
        runs_dir = tmp_path / "sweep"
        record_dir = tmp_path / "recorded"
        paper_reports = tmp_path / "table1"

    assert tuned_sweep.final_score(Args, "Swimmer-v5", "paper", tuned_sweep.CHOOSE_SEEDS) == [76, 55, 117]
    assert tuned_sweep.final_score(Args, "Swimmer-v5", "paper", tuned_sweep.REPORT_SEEDS) is None  # never reused
    assert tuned_sweep.final_score(Args, "Reacher-v5", "paper", tuned_sweep.CHOOSE_SEEDS) is None  # no report
    dry = subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.tuned_sweep", "--tasks", "Swimmer-v5", "--dry-run",
         "--runs-dir", str(Args.runs_dir), "--record-dir", str(Args.record_dir),
         "--paper-reports", str(Args.paper_reports)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    commands = [line for line in dry.stdout.splitlines() if line.startswith("$ ppo compare")]
    assert len(commands) == len(tuned_sweep.candidates("Swimmer-v5")) - 1
    assert not any("__paper__" in c for c in commands)
    assert "| Swimmer-v5 | paper | (the paper's) | 82.7 ± 25.7 | - |" in dry.stdout


def test_the_sweeps_table_gives_small_returns_decimals_and_large_ones_whole_numbers():
    from benchmarks.experiments import tuned_sweep

    assert tuned_sweep.score_cell([-4.28, -4.47, -4.23]) == "-4.33 ± 0.10"  # Reacher: "-4 ± 0" would hide the spread
    assert tuned_sweep.score_cell([8017, 9260, 8171]) == "8,483 ± 553"
    assert tuned_sweep.score_cell([-28.92, -28.75, -28.08]) == "-28.6 ± 0.4"  # Pusher


def test_compare_passes_bool_train_options_as_switches(tmp_path):
    from agents.commands.compare import CompareConfig, cell_config, expand_grid

    for value, expected in (("True", True), ("False", False)):
        grid = CompareConfig(
            envs=("Swimmer-v5",), objectives=("clip-0.2",), seeds=(1,), runs_dir=tmp_path,
            train_options=("preset=tuned", f"anneal_lr={value}"),
        )  # fmt: skip
        parsed = cell_config(expand_grid(grid)[0], grid, tmp_path / "grid")
        assert parsed.preset == "tuned" and parsed.ppo.anneal_lr is expected


def test_every_sweep_candidate_parses_into_the_config_it_names(tmp_path):
    from agents.commands.compare import CompareConfig, cell_config, expand_grid
    from agents.walkers.presets import TUNED
    from benchmarks.experiments import tuned_sweep

    for task in TUNED:
        for candidate in tuned_sweep.candidates(task):
            grid = CompareConfig(
                envs=(task,), objectives=("clip-0.2",), seeds=(1,), runs_dir=tmp_path,
                train_options=tuned_sweep.VARIATIONS[candidate],
            )  # fmt: skip
            parsed = cell_config(expand_grid(grid)[0], grid, tmp_path / "grid")
            assert parsed.env.env_id == task and parsed.preset == ("tuned" if "tuned" in candidate else "paper")
    grid = CompareConfig(
        envs=("Ant-v5",), objectives=("clip-0.2",), seeds=(1,), runs_dir=tmp_path,
        train_options=tuned_sweep.VARIATIONS["tianshou-lr-1e-3"],
    )  # fmt: skip
    parsed = cell_config(expand_grid(grid)[0], grid, tmp_path / "grid")
    assert (parsed.env.num_envs, parsed.env.num_steps, parsed.policy.initial_log_std) == (64, 32, -0.5)
    assert parsed.ppo.value_clip is None and not parsed.ppo.normalize_advantages
    assert parsed.ppo.recompute_advantages and parsed.ppo.learning_rate == 1e-3


@pytest.mark.parametrize("task", ["Ant-v5", "Humanoid-v5", "HumanoidStandup-v5"])
def test_the_tuned_preset_is_the_candidate_the_sweep_chose(task, tmp_path):
    from dataclasses import replace

    from agents.commands.compare import CompareConfig, cell_config, expand_grid
    from benchmarks.experiments import tuned_sweep

    def config(options):
        grid = CompareConfig(
            envs=(task,), objectives=("clip-0.2",), seeds=(1,), runs_dir=tmp_path, train_options=options
        )
        return cell_config(expand_grid(grid)[0], grid, tmp_path / "grid")

    swept, preset = config(tuned_sweep.VARIATIONS["tianshou"]), config(("preset=tuned",))
    assert replace(swept, preset="tuned") == preset
