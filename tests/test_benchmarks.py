"""The benchmark suite keeps working when ``agents/`` changes: every script answers ``--help`` (so its imports
resolve), every shell script parses, each is listed in benchmarks/README.md, and the shared harness reads runs as
the scripts rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*/*.py") if p.name != "__init__.py")
SHELL_SCRIPTS = sorted(BENCHMARKS.glob("*/*.sh"))
HELP_SECONDS = 120
"""Ceiling on every script's ``--help`` together, in one process (about 10 s on 2 cores: torch and the project are
imported once)."""
ANSWER_HELP = """
import contextlib, io, json, runpy, sys

answers = {}
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    out, err = io.StringIO(), io.StringIO()
    code = "returned without exiting"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code or 0
        except BaseException as error:
            code = f"{type(error).__name__}: {error}"
    answers[name] = {"code": code, "stdout": out.getvalue()[:200], "stderr": err.getvalue()[-2000:]}
print(json.dumps(answers))
"""
"""Runs each module named on the command line as ``python -m NAME --help`` would, in this one process, and prints
each one's exit code and output as JSON."""


def module_name(script: Path) -> str:
    return ".".join(script.relative_to(ROOT).with_suffix("").parts)


def test_the_suite_has_its_scripts_in_purpose_folders():
    assert {p.parent.name for p in [*SCRIPTS, *SHELL_SCRIPTS]} == {"peers", "experiments", "probes"}
    assert len(SCRIPTS) >= 15, [p.name for p in SCRIPTS]


def test_every_benchmark_answers_help_as_a_module():
    """TRL's baselines too, without TRL installed: they import TRL only once they run. One child process runs every
    script as ``python -m NAME --help`` does (a fresh process per script costs a few seconds each on 2 cores)."""
    names = [module_name(script) for script in SCRIPTS]
    result = subprocess.run(
        [sys.executable, "-c", ANSWER_HELP, *names], cwd=ROOT, capture_output=True, text=True, timeout=HELP_SECONDS
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answers = json.loads(result.stdout.splitlines()[-1])
    assert sorted(answers) == sorted(names)
    failed = {
        name: answer
        for name, answer in answers.items()
        if answer["code"] != 0 or not answer["stdout"].startswith("usage: ")
    }
    assert not failed, failed


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_every_shell_benchmark_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=HELP_SECONDS)
    assert result.returncode == 0, result.stderr


def test_the_readme_lists_every_script_and_only_existing_ones():
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    for script in [*SCRIPTS, *SHELL_SCRIPTS]:
        assert str(script.relative_to(BENCHMARKS)) in readme, f"{script.name} is missing from benchmarks/README.md"


def test_iteration_times_leave_the_first_iteration_out():
    records = [
        {"iteration": 1, "global_step": 256, "rollout_seconds": 9.0, "update_seconds": 9.0},
        {"iteration": 2, "global_step": 512, "rollout_seconds": 1.0, "update_seconds": 3.0},
        {"iteration": 3, "global_step": 768, "rollout_seconds": 2.0, "update_seconds": 2.0},
    ]
    times = harness.iteration_times(records)
    assert (times.iterations, times.rollout_seconds, times.update_seconds, times.seconds, times.steps) == (
        2,
        1.5,
        2.5,
        8.0,
        512,
    )
    assert (times.seconds_per_iteration, times.steps_per_second) == (4.0, 64.0)
    evaluated_first = [{"iteration": 0, "global_step": 0, "eval_success": 0.1}, *records]
    assert harness.iteration_times(evaluated_first) == times  # an evaluation-only record is not an iteration
    with pytest.raises(harness.RunError, match="nothing timed"):
        harness.iteration_times(records[:1])


def test_read_metrics_stops_at_a_cut_line_and_refuses_a_run_without_iterations(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"iteration": 1}) + '\n{"iteration": 2, "glo')
    assert harness.read_metrics(tmp_path) == [{"iteration": 1}]
    with pytest.raises(harness.RunError, match="holds no iteration; the run failed before its first"):
        harness.read_metrics(tmp_path / "missing")


def test_ppo_commands_use_this_interpreter_and_torchrun_for_several_processes():
    assert harness.ppo_command("train", "--seed", "1") == [sys.executable, "-m", "agents", "train", "--seed", "1"]
    command = harness.ppo_command("train", processes=2)
    assert command[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    assert command[6:] == ["-m", "agents", "train"]


def test_a_finished_text_run_is_skipped_and_a_finished_evaluation_read_back(tmp_path, monkeypatch):
    def no_child(*_args, **_kwargs):
        raise AssertionError("nothing should run")

    monkeypatch.setattr(harness.subprocess, "run", no_child)
    (tmp_path / "done" / "policy").mkdir(parents=True)
    (tmp_path / "done" / "policy" / "config.json").write_text("{}")
    assert harness.train_text_run(tmp_path, "done", ["--seed", "1"]) is False
    (tmp_path / "base.eval.txt").write_text("learned_reward 0.1, gold_lexicon 0.2\n")
    assert harness.ppo_eval_once(["RUN"], tmp_path / "base.eval.txt") == "learned_reward 0.1, gold_lexicon 0.2\n"


def test_the_trl_speed_table_gives_each_phase_its_ratio_and_the_versions_below_the_table(monkeypatch, capsys):
    from benchmarks.peers import grpo_vs_trl

    def row(seconds, sampling, nograd, update):
        return {
            "seconds_per_iteration": seconds,
            "sampling": sampling,
            "nograd_forwards": nograd,
            "update": update,
            "peak_gb": 1.0,
            "tokens_per_iteration": 900.0,
            "versions": {"trl": "9.9"},
        }

    monkeypatch.setattr(grpo_vs_trl, "ours_speed", lambda *_args: row(100.0, 10.0, 20.0, 70.0))
    monkeypatch.setattr(grpo_vs_trl, "trl_speed", lambda *_args: row(150.0, 25.0, 30.0, 95.0))
    args = grpo_vs_trl.argparse.Namespace(
        new_tokens=[16], betas=[0.0], threads=[1], side_by_side=True, runs_dir=Path("unused"), iterations=2
    )
    grpo_vs_trl.speed_table(args, Path("unused"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3] == "| | | | **TRL / ours** | **1.50x** | 2.5x | 1.5x | 1.4x | | |"
    assert lines[-1] == 'TRL side: {"trl": "9.9"}'
