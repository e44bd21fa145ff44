"""benchmarks/experiments/table1.py: per-environment reports add up to the PPO paper's Table 1, checked against hand
values."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE = "benchmarks.experiments.table1"
COLUMNS = ["env", "kind", "objective", "measure", "seeds", "final_steps", "finished", "mean", "std", "per_seed",
           "random_return", "normalized_score"]  # fmt: skip


def write_report(folder: Path, random: dict[str, float], cells: list[tuple[str, str, list[float], list[bool]]]) -> Path:
    """A report folder as ``ppo report`` writes it, reduced to what the script reads."""
    folder.mkdir(parents=True)
    entries = {env: {"mean_return": value, "episodes": 100, "seed": 0} for env, value in random.items()}
    (folder / "random_baselines.json").write_text(json.dumps(entries))
    with open(folder / "final_scores.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for env, objective, scores, finished in cells:
            writer.writerow({
                "env": env, "kind": "mujoco", "objective": objective, "measure": "episode_return",
                "seeds": " ".join(str(seed) for seed in range(1, len(scores) + 1)),
                "final_steps": " ".join("999424" for _ in scores), "finished": " ".join(map(str, finished)),
                "mean": repr(sum(scores) / len(scores)), "std": "0.0", "per_seed": " ".join(map(repr, scores)),
                "random_return": "", "normalized_score": "",
            })  # fmt: skip
    return folder


def run_script(*arguments: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *map(str, arguments)], capture_output=True, text=True, cwd=ROOT
    )


def test_reports_of_one_env_each_add_up_to_hand_computed_table1(tmp_path):
    done = [True, True, True]
    hopper = write_report(tmp_path / "Hopper-v5", {"Hopper-v5": 0.0}, [
        ("Hopper-v5", "clip-0.2", [900.0, 1000.0, 1100.0], done),
        ("Hopper-v5", "penalty-0.01", [600.0, 600.0, 600.0], [True, True, False]),
    ])  # fmt: skip
    walker = write_report(tmp_path / "Walker2d-v5", {"Walker2d-v5": 100.0}, [
        ("Walker2d-v5", "clip-0.2", [500.0, 500.0, 500.0], done),
        ("Walker2d-v5", "penalty-0.01", [1000.0, 1000.0, 1000.0], done),
    ])  # fmt: skip
    details = write_report(tmp_path / "details-off", {"Hopper-v5": 0.0}, [
        ("Hopper-v5", "clip-0.2 (no value clip, no obs norm)", [800.0, 800.0, 800.0], done),
    ])  # fmt: skip
    result = run_script(hopper, walker, "--details-off", details, "--out", tmp_path / "table1")
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "table1" / "table1.md").read_text()
    # Hopper: clip (1000 - 0) / 1000 = 1, penalty 600 / 1000 = 0.6 (one seed unfinished: starred);
    # Walker2d: clip (500 - 100) / (1000 - 100) = 0.444, penalty 1; averages 0.722 and 0.8
    assert "3 of 77 cells done" in table
    assert "| clip-0.2 | 1.00 | 0.44 | **0.72** | 2 | 0.82 | 1 |" in table
    assert "| penalty-0.01 | 0.60* | 1.00 | **0.80** | 1 | 0.74 | 2 |" in table
    assert "| random policy: episodes | 100 | 100 |" in table
    # the ablation is normalised against Hopper's best default cell (1000) and random policy (0): 0.8
    assert "| Hopper-v5 | clip-0.2 (no value clip, no obs norm) | 800.0 ± 0.0 | 800.0, 800.0, 800.0 | 0.80 | " in table
    with open(tmp_path / "table1" / "table1.csv", newline="") as handle:
        rows = {row["setting"]: row for row in csv.DictReader(handle)}
    assert float(rows["clip-0.2"]["average"]) == pytest.approx((1.0 + 400 / 900) / 2)
    assert float(rows["penalty-0.01"]["Hopper-v5"]) == pytest.approx(0.6)


def test_a_report_without_the_finished_column_gets_a_one_line_error(tmp_path):
    report = write_report(tmp_path / "old", {"Hopper-v5": 0.0}, [("Hopper-v5", "clip-0.2", [1.0], [True])])
    rows = (report / "final_scores.csv").read_text().replace(",finished", "").replace(",True,", ",")
    (report / "final_scores.csv").write_text(rows)
    result = run_script(report, "--out", tmp_path / "table1")
    assert result.returncode != 0
    assert "has no finished column (an older report); write it again with ppo report" in result.stderr


def test_clipping_against_adaptive_kl_per_task_matches_hand_values(tmp_path):
    done = [True, True, True]
    cells = {
        "Hopper-v5": {"clip-0.1": 1000.0, "clip-0.2": 800.0, "penalty-0.01": 900.0, "penalty-0.03": 500.0},
        "Walker2d-v5": {"clip-0.1": 600.0, "clip-0.2": 1000.0, "penalty-0.01": 1000.0, "penalty-0.03": 600.0},
    }
    reports = [
        write_report(tmp_path / env, {env: 0.0}, [(env, setting, [value] * 3, done) for setting, value in row.items()])
        for env, row in cells.items()
    ]
    result = run_script(*reports, "--out", tmp_path / "table1")
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "table1" / "table1.md").read_text()
    # Hopper (random 0, best 1000): clipping 1.0 and 0.8 (mean 0.9), adaptive 0.9 and 0.5 (mean 0.7)
    # every seed of a cell alike: no resample differs, so the interval is the point and clipping is ahead in all
    hopper = "| Hopper-v5 | 1.00 (clip-0.1) | 0.90 (penalty-0.01) | -0.10 | 0.90 | 0.70 | clipping |"
    assert f"{hopper} +0.20 [+0.20, +0.20] | 100% |" in table
    # Walker2d: clipping 0.6 and 1.0, adaptive 1.0 and 0.6: equal means
    walker = "| Walker2d-v5 | 1.00 (clip-0.2) | 1.00 (penalty-0.01) | +0.00 | 0.80 | 0.80 | tie |"
    assert f"{walker} +0.00 [+0.00, +0.00] | 0% |" in table
    # averages over the two tasks: clip-0.1 0.8, clip-0.2 0.9, penalty-0.01 0.95, penalty-0.03 0.55
    assert "| average (ours) | 0.90 (clip-0.2) | 0.95 (penalty-0.01) | -0.05 | 0.85 | 0.75 | clipping |" in table
    # the paper's averages: clip 0.76, 0.82, 0.70; adaptive 0.68, 0.74, 0.71
    paper = "| paper's Table 1 (7 v1 tasks) | 0.82 (clip-0.2) | 0.74 (penalty-0.01) | +0.08 | 0.76 | 0.71 | clipping |"
    assert paper in table


def test_the_seed_bootstrap_brackets_the_gap_and_moves_with_the_seeds(tmp_path):
    done = [True, True, True]
    # clipping's seeds 700-1000, adaptive KL's 100-400: every resample keeps clipping ahead, yet the gap varies
    cells = [("Hopper-v5", "clip-0.2", [700.0, 850.0, 1000.0]), ("Hopper-v5", "penalty-0.01", [100.0, 250.0, 400.0])]
    report = write_report(tmp_path / "Hopper-v5", {"Hopper-v5": 0.0}, [(*cell, done) for cell in cells])
    result = run_script(report, "--out", tmp_path / "table1")
    assert result.returncode == 0, result.stderr
    row = next(line for line in (tmp_path / "table1" / "table1.md").read_text().splitlines()
               if line.startswith("| Hopper-v5 | 1.00 (clip-0.2)"))  # fmt: skip
    gap, share = row.split(" | ")[-2:]
    point, low, high = (float(v) for v in gap.replace("[", "").replace("]", "").replace(",", "").split())
    assert point == pytest.approx(1 - 250 / 850, abs=0.005)  # (850 - 250) / 850 with the best setting's mean 850
    assert 0 < low < point < high <= 1 - 100 / 1000  # the largest gap a resample can give: 1000 against 100
    assert share == "100% |"
