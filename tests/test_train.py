"""The training loop: determinism, run folders, checkpoints, resume after SIGKILL, bad input."""

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

import agents.walkers.train
from agents.core.config import ConfigError
from agents.core.objectives import Clip, FixedKL, NoClip, Penalty
from agents.runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from agents.runs.config import config_from_dict
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.runs.machine import describe_machine, read_machines, record_machine
from agents.runs.memory import largest_peaks
from agents.walkers.config import TrainConfig
from agents.walkers.evaluate import evaluate, load_policy
from agents.walkers.gaussian import GaussianActorCritic
from agents.walkers.train import train
from tests.conftest import run_ppo, tiny_config, without_measurements


def test_same_seed_gives_identical_metrics(tmp_path):
    first = read_jsonl(train(tiny_config(tmp_path, "a")) / METRICS_FILE)
    second = read_jsonl(train(tiny_config(tmp_path, "b")) / METRICS_FILE)
    assert without_measurements(first) == without_measurements(second)
    other_seed = read_jsonl(train(tiny_config(tmp_path, "c", seed=2)) / METRICS_FILE)
    assert without_measurements(first) != without_measurements(other_seed)


def test_several_envs_step_on_threads_and_train_exactly_as_on_gymnasiums_envs(tmp_path, monkeypatch):
    def two_envs(name: str, threads: int):
        config = tiny_config(tmp_path, name)
        return replace(config, env=replace(config.env, num_envs=2, num_steps=64, env_threads=threads))

    built = []
    original = agents.walkers.train.make_vector_env
    monkeypatch.setattr(
        agents.walkers.train, "make_vector_env", lambda *a, **k: built.append(original(*a, **k)) or built[-1]
    )
    one_thread = read_jsonl(train(two_envs("one", 1)) / METRICS_FILE)
    two_threads = read_jsonl(train(two_envs("two", 2)) / METRICS_FILE)
    monkeypatch.setattr(agents.walkers.train, "stepping_threads", lambda *_: None)
    gymnasium = read_jsonl(train(two_envs("gymnasium", 2)) / METRICS_FILE)
    assert [type(envs).__name__ for envs in built] == ["BatchedMujocoVectorEnv"] * 2 + ["FinalObsSyncVectorEnv"]
    assert [envs.threads for envs in built[:2]] == [1, 2]
    assert without_measurements(one_thread) == without_measurements(two_threads) == without_measurements(gymnasium)
    assert any(r["episodes_finished"] > 0 for r in gymnasium), "episodes must end (and reset) inside the compared run"


def test_run_folder_contents_and_config_round_trip(tmp_path):
    config = tiny_config(tmp_path, "run", objective=Penalty(kl_target=0.02))
    run_dir = train(config)
    records = read_jsonl(run_dir / METRICS_FILE)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert records[-1]["global_step"] == 512
    for key in (
        "episode_return",
        "policy_loss",
        "value_loss",
        "approx_kl_k1",
        "approx_kl_k3",
        "clip_fraction",
        "explained_variance",
        "beta",
        "sps",
    ):
        assert key in records[-1]
    assert config_from_dict(TrainConfig, json.loads((run_dir / "config.json").read_text())) == config
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "latest.pt").is_file()
    assert read_machines(run_dir) == [describe_machine()]


def test_machine_json_gains_an_entry_only_when_a_run_moves_to_another_machine(tmp_path):
    record_machine(tmp_path)
    record_machine(tmp_path)  # resumed on the same machine: nothing to add
    assert read_machines(tmp_path) == [describe_machine()]
    entries = json.loads((tmp_path / "machine.json").read_text())
    entries[0]["processor"], entries[0]["torch_cpu_capability"] = "Another CPU", "AVX2"
    (tmp_path / "machine.json").write_text(json.dumps(entries))
    record_machine(tmp_path)  # resumed here after running there
    machines = read_machines(tmp_path)
    assert [m.processor for m in machines] == ["Another CPU", describe_machine().processor]
    assert machines[-1] == describe_machine() and machines[0].versions["torch"] == torch.__version__


def test_adaptive_beta_in_metrics_follows_the_rule(tmp_path):
    run_dir = train(tiny_config(tmp_path, "kl", objective=Penalty(kl_target=0.01, initial_beta=1.0)))
    records = read_jsonl(run_dir / METRICS_FILE)
    assert len(records) == 4, "the rule is checked between each iteration and the next"
    for record, following in zip(records, records[1:]):
        d = record["kl_after_update"]
        expected = record["beta"] / 2 if d < 0.01 / 1.5 else record["beta"] * 2 if d > 0.015 else record["beta"]
        assert following["beta"] == expected == record["beta_next"]


@pytest.mark.parametrize("objective", [Clip(), Penalty(), FixedKL(beta=1.0), NoClip()])
def test_every_objective_trains_on_hopper(tmp_path, objective):
    records = read_jsonl(train(tiny_config(tmp_path, "smoke", objective=objective)) / METRICS_FILE)
    assert len(records) == 4
    assert all(np.isfinite(r["policy_loss"]) and np.isfinite(r["value_loss"]) for r in records)
    assert records[-1]["kl_after_update"] > 0


def test_checkpoint_round_trip_gives_identical_actions_and_statistics(tmp_path):
    torch.manual_seed(0)
    policy = GaussianActorCritic(11, 3)
    policy.update_normalizer(np.random.default_rng(0).normal(3.0, 2.0, size=(500, 11)))
    torch.nn.init.normal_(policy.actor_mean[-1].weight)
    config = tiny_config(tmp_path, "x")
    from agents.runs.config import config_to_dict

    save_checkpoint({"policy": policy.state_dict(), "config": config_to_dict(config)}, tmp_path / "policy.pt")
    loaded, env_id = load_policy(tmp_path / "policy.pt")
    assert env_id == "Hopper-v5"
    obs = np.random.default_rng(1).normal(3.0, 2.0, size=(16, 11)).astype(np.float32)
    assert np.array_equal(loaded.numpy_actor().mean(obs), policy.numpy_actor().mean(obs))
    for name in ("obs_mean", "obs_var", "obs_count"):
        assert torch.equal(getattr(loaded, name), getattr(policy, name))


def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path):
    path = tmp_path / "checkpoints" / "latest.pt"
    save_checkpoint({"iteration": 1}, path)
    with pytest.raises(Exception):  # noqa: B017 - whatever fails mid-write, the previous checkpoint must survive
        save_checkpoint({"iteration": 2, "unpicklable": lambda: None}, path)
    assert load_checkpoint(path)["iteration"] == 1
    assert list(path.parent.iterdir()) == [path]


def test_corrupt_and_missing_checkpoints_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(bad)
    good = tmp_path / "good.pt"
    save_checkpoint({"iteration": 1}, good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(truncated)


TWO_ENVS_ON_THREADS = ["--num-steps", "64", "--num-envs", "2", "--env-threads", "2"]


@pytest.mark.slow
@pytest.mark.parametrize("envs", [["--num-steps", "128"], TWO_ENVS_ON_THREADS], ids=["one-env", "two-envs-on-threads"])
def test_sigkilled_run_resumes_where_it_stopped(tmp_path, envs):
    common = [
        "train",
        "--env-id",
        "Hopper-v5",
        *envs,
        "--minibatch-size",
        "32",
        "--epochs",
        "2",
        "--total-steps",
        str(128 * 40),
        "--no-compile",
        "--no-progress",
        "--runs-dir",
        str(tmp_path),
        "--checkpoint-every",
        "2",
    ]
    assert run_ppo(*common, "--run-name", "whole").returncode == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "agents", *common, "--run-name", "killed"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metrics_file = tmp_path / "killed" / METRICS_FILE
    deadline = time.time() + 120
    while time.time() < deadline and (not metrics_file.exists() or len(metrics_file.read_text().splitlines()) < 7):
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written_before_kill = len(metrics_file.read_text().splitlines())
    assert 7 <= written_before_kill < 40, "the kill should land mid-run"
    resumed = run_ppo("train", "--resume", str(tmp_path / "killed"), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    whole, killed = read_jsonl(tmp_path / "whole" / METRICS_FILE), read_jsonl(tmp_path / "killed" / METRICS_FILE)
    assert [r["iteration"] for r in killed] == list(range(1, 41))
    assert without_measurements(whole) == without_measurements(killed)


def test_eval_reports_mean_and_std(tmp_path):
    run_dir = train(tiny_config(tmp_path, "e", env_id="InvertedPendulum-v5"))
    policy, env_id = load_policy(run_dir)
    result = evaluate(policy, env_id, episodes=3, seed=0, deterministic=True)
    assert len(result.returns) == 3 and result.mean == pytest.approx(np.mean(result.returns))
    output = run_ppo("eval", str(run_dir), "--episodes", "2")
    assert output.returncode == 0, output.stderr
    assert "InvertedPendulum-v5: return" in output.stdout and "± " in output.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env-id", "Hoppper-v5"], "unknown environment id 'Hoppper-v5'"),
        (["--env-id", "CartPole-v1"], "not a MuJoCo environment"),
        (["--num-envs", "0"], "--num-envs must be a positive integer"),
        (["--env-threads", "-1"], "--env-threads must be >= 0"),
        (["--num-steps", "-5"], "--num-steps must be a positive integer"),
        (["--num-steps", "32", "--minibatch-size", "64"], "larger than the batch"),
        (["--num-steps", "100", "--minibatch-size", "64"], "does not divide the batch"),
        (["--learning-rate", "0"], "--learning-rate must be > 0"),
        (["--gamma", "1.5"], "--gamma must be in [0, 1]"),
        (["penalty", "--kl-target", "-1"], "--kl-target must be > 0"),
        (["--num-envs", "2", "dapo"], "dapo steps --group-size environments side by side"),
        (["--recompute-advantages", "grpo"], "grpo has no critic"),
    ],
)
def test_bad_config_gives_one_line_error(tmp_path, args, message):
    result = run_ppo("train", "--runs-dir", str(tmp_path), "--no-progress", *args)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
    assert message in result.stderr
    assert not any(tmp_path.iterdir()), "a rejected config must not create a run folder"


def test_resume_errors_are_one_line(tmp_path):
    missing = run_ppo("train", "--resume", str(tmp_path / "nope"))
    assert (
        missing.returncode != 0
        and "is not a run folder" in missing.stderr
        and len(missing.stderr.strip().splitlines()) == 1
    )
    run_dir = train(tiny_config(tmp_path, "r"))
    checkpoint = run_dir / "checkpoints" / "latest.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:200])
    corrupt = run_ppo("train", "--resume", str(run_dir))
    assert (
        corrupt.returncode != 0
        and "corrupt or truncated" in corrupt.stderr
        and len(corrupt.stderr.strip().splitlines()) == 1
    )


def test_a_run_folder_left_before_its_first_checkpoint_is_not_appended_to(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / METRICS_FILE).write_text('{"iteration": 1}\n')
    again = run_ppo("train", "--runs-dir", str(tmp_path), "--run-name", "r", "--num-steps", "64", "--total-steps", "64")
    assert again.returncode != 0 and "stopped before its first checkpoint" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert (run_dir / METRICS_FILE).read_text() == '{"iteration": 1}\n'


def test_elapsed_seconds_is_the_process_clock(tmp_path):
    records = read_jsonl(train(tiny_config(tmp_path, "clock")) / METRICS_FILE)
    elapsed = [r["elapsed_seconds"] for r in records]
    steps = [r["rollout_seconds"] + r["update_seconds"] for r in records]
    assert all(later - earlier >= step for earlier, later, step in zip(elapsed, elapsed[1:], steps[1:], strict=False))
    assert elapsed[0] >= steps[0]


def test_config_validation_rejects_impossible_values(tmp_path):
    from dataclasses import replace

    from agents.walkers.config import validate_config

    config = tiny_config(tmp_path, "v")
    with pytest.raises(ConfigError, match="--total-steps 10 is less than one batch"):
        validate_config(replace(config, ppo=replace(config.ppo, total_steps=10)))
    with pytest.raises(ConfigError, match="--hidden-sizes"):
        validate_config(replace(config, policy=replace(config.policy, hidden_sizes=(64, 0))))


def test_eval_records_an_mp4_headless(tmp_path):
    import os

    import imageio.v2 as imageio

    run_dir = train(tiny_config(tmp_path, "video", env_id="InvertedPendulum-v5"))
    video = tmp_path / "pendulum.mp4"
    env = {**os.environ, "MUJOCO_GL": "egl"}
    result = subprocess.run(
        [sys.executable, "-m", "agents", "eval", str(run_dir), "--episodes", "1", "--video", str(video)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    reader = imageio.get_reader(video)
    count = reader.count_frames()
    first, last = reader.get_data(0), reader.get_data(count - 1)
    assert count >= 2 and first.ndim == 3 and first.shape[-1] == 3
    assert first.max() > 0 and last.max() > 0, "frames should not be all black"


PHASE_MEMORY_PROBE = """
import torch
from agents.runs.memory import peak_memory_gb, reset_peak_memory
cpu = torch.device("cpu")
reset_peak_memory(cpu)
before = peak_memory_gb(cpu)
block = torch.ones(64 * 1024**2)  # 0.25 GiB, every page written
during = peak_memory_gb(cpu)
del block
reset_peak_memory(cpu)
print(before, during, peak_memory_gb(cpu))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU probe reads /proc")
def test_phase_peak_memory_sees_an_allocation_and_forgets_it_after_a_reset():
    # a fresh process: the test process's own allocator state (after hundreds of tests) is not the subject
    probe = subprocess.run([sys.executable, "-c", PHASE_MEMORY_PROBE], capture_output=True, text=True, check=True)
    before, during, after = map(float, probe.stdout.split())
    assert during - before > 0.2
    assert after < during - 0.2, "a reset starts the next phase from the memory in use now"
    assert largest_peaks({"update_peak_gb": during, "unknown": None}) == {"update_peak_gb": during}
