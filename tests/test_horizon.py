"""The horizon experiment's grids, table and figure (``benchmarks/experiments/horizon.py``, issue 27), on fabricated
run folders: what it runs and what it reads, not what it finds."""

import argparse
import json
import shutil
import subprocess
import sys

import pytest

from benchmarks.experiments import horizon
from benchmarks.harness import ROOT

WALKERS = ROOT / "docs" / "reports" / "after-ppo-walkers" / "final_scores.csv"


def test_each_turn_limit_gets_a_range_bisection_solves_in_that_many_guesses():
    assert [horizon.range_for(t) for t in (1, 2, 4, 8)] == [2, 3, 15, 255]
    for turns in (2, 4, 8):  # bisection needs ceil(log2(high + 1)) guesses (envs/text/games/guess_number.py)
        assert (horizon.range_for(turns) + 1).bit_length() - 1 == turns


def write_run(folder, evaluations, per_turn, zero_variance_groups=0.0):
    """A run's metrics.jsonl: held-out success ``evaluations`` at iterations 0, 2, ... (1,000 tokens each); every
    trained iteration logs ``per_turn`` (metric name -> value), ``zero_variance_groups``, 10 s of sampling, 30 s of
    update and a peak of 3 GB."""
    folder.mkdir(parents=True)
    records = []
    for iteration in range(2 * len(evaluations) - 1):
        record = {"iteration": iteration, "global_step": 1000 * iteration, "zero_variance_groups": zero_variance_groups}
        if iteration % 2 == 0:
            record["eval_success"] = evaluations[iteration // 2]
        if iteration > 0:
            record |= per_turn | {"rollout_seconds": 10.0, "update_seconds": 30.0, "update_peak_gb": 3.0}
        records.append(record)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_table_reads_success_gaps_and_per_turn_diagnostics(tmp_path):
    grid = tmp_path / horizon.grid_name(2)
    critic = {"turn_explained_variance_1": 0.2, "turn_explained_variance_2": 0.6, "turn_advantage_std_1": 0.5}
    write_run(grid / "text-guess-number__clip-0.2__s1", [0.1, 0.3, 0.5], critic)
    write_run(grid / "text-guess-number__clip-0.2__s2", [0.1, 0.2, 0.3], critic | {"turn_explained_variance_2": 0.2})
    write_run(grid / "text-guess-number__grpo-8__s1", [0.1, 0.2], {"turn_advantage_std_1": 1.0}, 0.75)
    write_run(grid / "text-guess-number__grpo-8__s2", [0.1], {})  # one evaluation: not read yet
    args = argparse.Namespace(turns=[2, 4], runs_dir=tmp_path, walkers=WALKERS, record=tmp_path / "cells.jsonl")
    results = horizon.collect(args)
    printed = "\n".join(horizon.table(args, results))
    # each seed: 3 timed iterations (the first trained one is warm-up) of 40 s over 3,000 tokens
    critic_row = (
        "| 2 | 1..3 | clip-0.2 | 1 2 | 0.100 -> 0.400 (0.500, 0.300) | 4,000 | 0.20 / 0.40 | 0.50 | 0.00 "
        "| 40 s, 3.0 GB | unknown machine, 20"
    )
    assert critic_row in printed
    assert "| 2 | 1..3 | grpo-8 | 1 | 0.100 -> 0.200 (0.200) | 2,000 | - | 1.00 | 0.75 | 40 s, 3.0 GB |" in printed
    assert "| 2 | | **critic - group** | | **+0.200** |" in printed
    assert "| 4 | 1..15 | clip-0.2 | - | not run |" in printed and "| 4 | | **critic - group** | | - |" in printed
    horizon.plot(args, results, tmp_path / "horizon.png")
    assert (tmp_path / "horizon.png").stat().st_size > 10_000
    assert horizon.walker_ratios(WALKERS)["Hopper-v5"] == pytest.approx(824.356 / 2564.313, rel=1e-5)  # the docs' table


def test_the_run_stage_prints_one_compare_grid_per_turn_limit(tmp_path):
    printed = subprocess.run(
        [sys.executable, "-m", "benchmarks.experiments.horizon", "--turns", "1", "8", "--seeds", "3", "--dry-run",
         "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    commands = [line for line in printed.splitlines() if line.startswith("$ ppo compare")]
    assert len(commands) == 2
    assert "--task-options high=2 --train-options max_turns=1" in commands[0]
    assert "--task-options high=255 --train-options max_turns=8" in commands[1]
    assert all("--objectives clip grpo --seeds 3" in c and "--checkpoint-every 1" in c for c in commands)
    assert not (tmp_path / horizon.grid_name(1)).exists()
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([sys.executable, "-m", "benchmarks.experiments.horizon", "--turns", "0", "--dry-run"],
                       capture_output=True, check=True)  # fmt: skip


def test_the_record_outlives_the_run_folders_and_takes_only_runs_that_came_further(tmp_path):
    runs, record = tmp_path / "runs", tmp_path / "cells.jsonl"
    args = argparse.Namespace(turns=[2], runs_dir=runs, walkers=WALKERS, record=record)
    cell = runs / horizon.grid_name(2) / "text-guess-number__clip-0.2__s1"
    write_run(cell, [0.1, 0.3, 0.5], {"turn_explained_variance_2": 0.4})
    first = horizon.collect(args)
    assert [(c.turns, c.objective, c.seed, c.end, c.tokens) for c in first] == [(2, "clip-0.2", 1, 0.5, 4000)]
    assert first[0].explained_variance == {2: 0.4} and first[0].source.startswith("unknown machine, 20")
    shutil.rmtree(runs)  # a new machine: the run folders are gone, the committed record is not
    assert horizon.collect(args) == first
    write_run(cell, [0.1, 0.2], {})  # a rerun that has come less far does not replace the record
    assert horizon.collect(args) == first
    shutil.rmtree(runs)
    write_run(cell, [0.1, 0.2, 0.3, 0.7], {})  # one that came further does
    (cell / "machine.json").write_text(json.dumps([{
        "processor": "AMD EPYC", "logical_cpus": 2, "torch_cpu_capability": "AVX2", "native_bf16": False,
        "gpu": None, "versions": {},
    }]))  # fmt: skip
    assert [(c.end, c.tokens) for c in horizon.collect(args)] == [(0.7, 6000)]
    assert horizon.read_record(record)[2, "clip-0.2", 1].source.startswith("AMD EPYC (AVX2), 20")
    assert [c.end for c in horizon.read_record(record).values()] == [0.7]
    horizon.collect(argparse.Namespace(turns=[4], runs_dir=runs, walkers=WALKERS, record=record))
    assert list(horizon.read_record(record)) == [(2, "clip-0.2", 1)]  # other turn limits keep their cells


def test_costs_from_machines_of_different_speed_are_shown_per_seed_not_averaged():
    def cell(seed, seconds, peak, source):
        return horizon.CellResult(8, "grpo-8", seed, 0.0, 0.0, 8000, {}, {}, 1.0, seconds, peak, source)

    same = [cell(1, 240.0, 5.9, "AMD EPYC (AVX2), 2026-12-04"), cell(2, 250.0, 5.0, "AMD EPYC (AVX2), 2026-12-05")]
    assert horizon.cost_text(same) == "245 s, 5.9 GB"
    mixed = [same[0], cell(2, 170.0, 5.0, "AMD EPYC (AVX512), 2026-12-05")]
    assert horizon.cost_text(mixed) == "240 / 170 s, 5.9 / 5.0 GB"
    assert horizon.cost_text([cell(1, None, None, "machine F")]) == "-"
