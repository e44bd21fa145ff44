"""Whole runs under torchrun: 2 real processes on gloo (the CPU backend), launched the way a user launches them."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from agents.runs.logger import METRICS_FILE, read_jsonl
from tests.conftest import run_ppo, without_measurements

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
WALKER = ["--env-id", "Hopper-v5", "--num-steps", "128", "--minibatch-size", "64", "--epochs", "2"]
WALKER += ["--no-compile", "--no-progress"]


def torchrun(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([*TORCHRUN, "-m", "agents", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_a_two_process_walker_run_counts_both_processes_steps_and_episodes(tmp_path):
    two = torchrun("train", *WALKER, "--total-steps", "256", "--runs-dir", str(tmp_path), "--run-name", "two")
    assert two.returncode == 0, two.stderr[-8000:]
    assert two.stdout.count("run written to") == 1  # the first process speaks for the run
    one = run_ppo("train", *WALKER, "--total-steps", "128", "--runs-dir", str(tmp_path), "--run-name", "one")
    assert one.returncode == 0, one.stderr[-8000:]
    (two_record,) = read_jsonl(tmp_path / "two" / METRICS_FILE)
    (one_record,) = read_jsonl(tmp_path / "one" / METRICS_FILE)
    assert two_record["global_step"] == 256 and one_record["global_step"] == 128  # 128 steps per process
    # the first process's rollout is the one-process run's (same seed and weights); the second adds its episodes
    assert two_record["episodes_finished"] > one_record["episodes_finished"] > 0
    assert json.loads((tmp_path / "two" / "config.json").read_text())["env"]["num_steps"] == 128


def test_a_sigkilled_two_process_run_resumes_as_if_it_had_never_stopped(tmp_path):
    common = ["train", *WALKER, "--total-steps", str(256 * 16), "--runs-dir", str(tmp_path), "--checkpoint-every", "2"]
    whole = torchrun(*common, "--run-name", "whole")
    assert whole.returncode == 0, whole.stderr[-8000:]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*TORCHRUN, "-m", "agents", *common, "--run-name", "killed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    metrics_file = tmp_path / "killed" / METRICS_FILE
    deadline = time.time() + 240
    while time.time() < deadline and (not metrics_file.exists() or len(metrics_file.read_text().splitlines()) < 5):
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # torchrun and both of its processes at once
    process.wait()
    written_before_kill = len(metrics_file.read_text().splitlines())
    assert 5 <= written_before_kill < 16, "the kill should land mid-run"
    resumed = torchrun("train", "--resume", str(tmp_path / "killed"), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-8000:]
    killed = read_jsonl(tmp_path / "killed" / METRICS_FILE)
    assert [r["iteration"] for r in killed] == list(range(1, 17))
    assert without_measurements(read_jsonl(tmp_path / "whole" / METRICS_FILE)) == without_measurements(killed)


def kill_worker(local_rank: int, run_dir) -> None:
    """SIGKILL the worker of ``local_rank`` of the run writing ``run_dir`` once it has logged 5 iterations."""
    metrics_file = run_dir / METRICS_FILE
    deadline = time.time() + 240
    while time.time() < deadline and (not metrics_file.exists() or len(metrics_file.read_text().splitlines()) < 5):
        time.sleep(0.02)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environment = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            command = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        ours = str(run_dir.parent).encode() in command and f"\0{run_dir.name}\0".encode() in command
        if f"LOCAL_RANK={local_rank}".encode() in environment and ours:
            os.kill(int(pid), signal.SIGKILL)
            return
    raise AssertionError(f"no worker of local rank {local_rank} found")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the worker through /proc")
def test_a_killed_worker_stops_the_run_with_one_line_that_says_how_to_resume(tmp_path):
    common = [*WALKER, "--total-steps", str(256 * 16), "--runs-dir", str(tmp_path), "--checkpoint-every", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launched = subprocess.Popen(
        [sys.executable, "-m", "agents", "train", "--nproc", "2", *common, "--run-name", "nproc"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    kill_worker(1, tmp_path / "nproc")
    _, stderr = launched.communicate(timeout=120)
    assert launched.returncode == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    assert re.fullmatch(
        r"error: process 1 of 2 was killed \(SIGKILL\), so the run stopped; its last checkpoint is iteration \d+ "
        r"\(.*latest\.pt\): resume with `ppo train --resume .*nproc`",
        lines[0],
    ), lines[0]
    resumed = run_ppo("train", "--resume", str(tmp_path / "nproc"), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["iteration"] for r in read_jsonl(tmp_path / "nproc" / METRICS_FILE)] == list(range(1, 17))
    plain = subprocess.Popen(
        [*TORCHRUN, "-m", "agents", "train", *common, "--run-name", "plain"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    kill_worker(1, tmp_path / "plain")
    _, stderr = plain.communicate(timeout=120)
    # whichever comes first: the collective failing, or torchrun's SIGTERM to the survivor
    ours = [line for line in stderr.splitlines() if "lost its connection" in line or "was stopped by torchrun" in line]
    assert len(ours) == 1 and "resume with `ppo train --resume" in ours[0], stderr[-3000:]
    assert "[rank0]: Traceback" not in stderr  # the surviving worker's own lines (torchrun's launcher adds its own)


def test_ppo_train_nproc_starts_the_processes_and_a_resume_starts_as_many_again(tmp_path):
    common = [*WALKER, "--runs-dir", str(tmp_path), "--run-name", "two"]
    two = run_ppo("train", "--nproc", "2", *common, "--total-steps", "256")
    assert two.returncode == 0, two.stderr[-8000:]
    assert json.loads((tmp_path / "two" / "config.json").read_text())["run"]["nproc"] == 2
    assert read_jsonl(tmp_path / "two" / METRICS_FILE)[-1]["global_step"] == 256  # 128 steps in each of 2 processes
    # given one more iteration to go, `ppo train --resume` starts the 2 processes the run was made with
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    config["ppo"]["total_steps"] = 512
    (tmp_path / "two" / "config.json").write_text(json.dumps(config))
    resumed = run_ppo("train", "--resume", str(tmp_path / "two"), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-8000:]
    assert [r["global_step"] for r in read_jsonl(tmp_path / "two" / METRICS_FILE)] == [256, 512]


def test_ppo_train_nproc_refuses_a_minibatch_that_does_not_split_in_one_line_before_launching(tmp_path):
    result = run_ppo("train", "--nproc", "2", *WALKER, "--minibatch-size", "1", "--runs-dir", str(tmp_path))
    assert result.returncode != 0
    assert result.stderr.strip() == "error: --minibatch-size 1 does not split over 2 processes; use a multiple of 2"
    assert not (tmp_path / "runs").exists() and not list(tmp_path.iterdir())  # nothing was started or written


def test_resuming_with_another_number_of_processes_is_a_one_line_error(tmp_path):
    two = torchrun("train", *WALKER, "--total-steps", "256", "--runs-dir", str(tmp_path), "--run-name", "two")
    assert two.returncode == 0, two.stderr[-8000:]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one_process = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    alone = subprocess.run(
        [*one_process, "-m", "agents", "train", "--resume", str(tmp_path / "two"), "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert alone.returncode != 0
    errors = [line for line in alone.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "trained with 2 processes and this run has 1" in errors[0]


def test_a_two_process_text_run_finishes_and_writes_one_policy(tmp_path):
    result = torchrun(
        "train", "text", "--model", "tiny", "--prompts-per-iteration", "4", "--max-new-tokens", "8",
        "--total-steps", "64", "--minibatch-size", "2", "--no-progress", "--runs-dir", str(tmp_path),
        "--run-name", "text", "arithmetic",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-8000:]
    records = read_jsonl(tmp_path / "text" / METRICS_FILE)
    assert records[-1]["global_step"] >= 64
    assert all(r["global_step"] - p["global_step"] <= 4 * 8 for p, r in zip([{"global_step": 0}, *records], records))
    assert (tmp_path / "text" / "policy" / "config.json").is_file()


def test_a_two_process_game_run_finishes_with_per_turn_metrics_and_one_evaluation_per_iteration(tmp_path):
    result = torchrun(
        "train", "text", "--model", "tiny", "--prompts-per-iteration", "8", "--max-new-tokens", "4",
        "--max-context-tokens", "200", "--max-turns", "2", "--total-steps", "64", "--minibatch-size", "2",
        "--eval-every", "1", "--eval-prompts", "4", "--no-progress", "--runs-dir", str(tmp_path), "--run-name", "game",
        "guess-number", "--high", "8", "grpo", "--group-size", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-8000:]
    records = read_jsonl(tmp_path / "game" / METRICS_FILE)
    trained = [r for r in records if r["iteration"] > 0]
    assert trained and trained[-1]["global_step"] >= 64
    assert all("task_turns" in r and "turn_reward_1" in r for r in trained)
    evaluations = [r["eval_success"] for r in records if "eval_success" in r]
    assert len(evaluations) == len(trained) + 1  # one evaluation line per iteration, not one per process


def test_two_process_group_runs_take_equal_shares_and_finish_in_both_worlds(tmp_path):
    walker = torchrun(
        "train", "--env-id", "InvertedPendulum-v5", "--num-steps", "64", "--minibatch-size", "32", "--epochs", "2",
        "--total-steps", "512", "--no-compile", "--no-progress", "--runs-dir", str(tmp_path), "--run-name", "walker",
        "grpo", "--group-size", "4",
    )  # fmt: skip
    assert walker.returncode == 0, walker.stderr[-8000:]
    records = read_jsonl(tmp_path / "walker" / METRICS_FILE)
    assert records[-1]["global_step"] >= 512
    assert all(r["groups_sampled"] >= 2 for r in records), "every process's groups are counted"
    text = torchrun(
        "train", "text", "--model", "tiny", "--prompts-per-iteration", "8", "--max-new-tokens", "8",
        "--total-steps", "128", "--minibatch-size", "4", "--no-progress", "--runs-dir", str(tmp_path),
        "--run-name", "text", "--fsdp", "arithmetic", "dapo", "--group-size", "2",
    )  # fmt: skip
    assert text.returncode == 0, text.stderr[-8000:]
    text_records = read_jsonl(tmp_path / "text" / METRICS_FILE)
    assert text_records and all(r["sampling_rounds"] >= 1 for r in text_records)
    assert all("ref_kl" not in r for r in text_records), "beta_ref 0: no reference is built, sharded or run"


def test_an_fsdp2_text_run_matches_plain_data_parallelism_and_resumes_from_its_whole_state(tmp_path):
    common = [
        "train", "text", "--model", "tiny", "--prompts-per-iteration", "4", "--max-new-tokens", "8",
        "--minibatch-size", "2", "--no-anneal-lr", "--no-progress", "--runs-dir", str(tmp_path),
        "--checkpoint-every", "1", "--eval-every", "2", "--eval-prompts", "5",
    ]  # fmt: skip
    # a reward with signal: with all-zero rewards the whitened advantages are rounding noise, which no two
    # reduction orders (reduce-scatter against all-reduce) share
    (tmp_path / "rewards.py").write_text(
        "def score(prompts, completions):\n    return [c.count('o') - 0.5 * c.count('e') for c in completions]\n"
    )
    (tmp_path / "prompts.txt").write_text("the movie was\na film\nthis story is very\none actor\n")
    task = ["custom", "--prompts-file", str(tmp_path / "prompts.txt"), "--reward", f"{tmp_path / 'rewards.py'}:score"]
    for name, extra in (("dp", []), ("fsdp", ["--fsdp"]), ("split", ["--fsdp"])):
        budget = "64" if name == "split" else "128"
        result = torchrun(*common, *extra, "--total-steps", budget, "--run-name", name, *task)
        assert result.returncode == 0, result.stderr[-8000:]
    # the split run stopped halfway; given the whole budget, it resumes from the gathered (whole) checkpoint
    config = json.loads((tmp_path / "split" / "config.json").read_text())
    config["ppo"]["total_steps"] = 128
    (tmp_path / "split" / "config.json").write_text(json.dumps(config))
    resumed = torchrun("train", "text", "--resume", str(tmp_path / "split"), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-8000:]
    fsdp, dp = read_jsonl(tmp_path / "fsdp" / METRICS_FILE), read_jsonl(tmp_path / "dp" / METRICS_FILE)
    assert without_measurements(read_jsonl(tmp_path / "split" / METRICS_FILE)) == without_measurements(fsdp)
    assert len(fsdp) >= 3 and [r.get("reward") for r in fsdp] == [r.get("reward") for r in dp]
    for sharded, plain in zip(fsdp[1:], dp[1:]):
        assert sharded["policy_loss"] == pytest.approx(plain["policy_loss"], rel=1e-4, abs=1e-6)
    # the exported policy is an ordinary model folder with the weights data parallelism reaches
    from transformers import AutoModelForCausalLM

    exported = json.loads((tmp_path / "fsdp" / "policy" / "config.json").read_text())["architectures"]
    assert exported == ["GPT2LMHeadModel"]
    sharded_lm = AutoModelForCausalLM.from_pretrained(tmp_path / "fsdp" / "policy")
    plain_lm = AutoModelForCausalLM.from_pretrained(tmp_path / "dp" / "policy")
    for (name, tensor), (_, expected) in zip(sharded_lm.state_dict().items(), plain_lm.state_dict().items()):
        torch.testing.assert_close(tensor, expected, rtol=1e-4, atol=1e-5, msg=name)
    value_heads = [torch.load(tmp_path / run / "policy" / "value_head.pt") for run in ("fsdp", "dp")]
    torch.testing.assert_close(value_heads[0], value_heads[1], rtol=1e-4, atol=1e-5)
