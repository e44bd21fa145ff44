"""Over-optimisation of a learned proxy against a checker (Gao et al. 2022, qualitatively), issue #12.

SmolLM2-135M-Instruct on one-digit addition (arithmetic, operands 0-9, '+': 60 training and 40 held-out questions),
PPO-Clip with a fixed reference-KL coefficient in the reward, trained on the proxy of the checker (``--reward
proxy``: a MiniLM + logistic head fitted to 1,024 checker-labelled completions of the starting model) with
coefficients 0, 0.05 and 0.5, and on the checker itself with coefficient 0 (the control). Beside them best-of-N
sampling from the starting model, chosen by the proxy, N = 1 ... 64. Held-out proxy and gold (checker) reward every
2 iterations, plotted against sqrt(KL to the reference): the KL of an RL point is the mean summed per-token KL of
that iteration's training completions, that of best-of-N the analytic bound ``log N - (N-1)/N``.

Every run: 64 completions of at most 16 tokens per iteration, minibatches of 16, 6,000 generated tokens, one torch
thread, so two runs go side by side on 2 cores:

    python benchmarks/overoptimisation.py --runs proxy-kl0 proxy-kl0.5 best-of-n &   # one stream
    python benchmarks/overoptimisation.py --runs proxy-kl0.05 checker-kl0           # the other
    python benchmarks/overoptimisation.py --plot                                     # figure and table
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = ["arithmetic", "--operand-max", "9", "--operations", "+", "--eval-prompts", "40"]
RUNS = {"proxy-kl0": ("proxy", 0.0), "proxy-kl0.05": ("proxy", 0.05), "proxy-kl0.5": ("proxy", 0.5)}
RUNS["checker-kl0"] = ("task", 0.0)
"""run name -> (--reward, fixed --ref-kl-coef)."""
BEST_OF = 64
BEST_OF_FILE = "best_of_n.txt"


def train(runs_dir: Path, name: str, tokens: int, seed: int) -> None:
    reward, coef = RUNS[name]
    run_dir = runs_dir / name
    if (run_dir / "policy" / "config.json").exists():
        return
    if (run_dir / "checkpoints" / "latest.pt").exists():
        arguments = ["--resume", str(run_dir), "--no-progress"]
    else:
        arguments = [
            "--seed", str(seed), "--runs-dir", str(runs_dir), "--run-name", name, "--no-progress",
            "--reward", reward, "--ref-kl-coef", str(coef), "--ref-kl-target", "None",
            "--prompts-per-iteration", "64", "--max-new-tokens", "16", "--minibatch-size", "16",
            "--total-steps", str(tokens), "--torch-threads", "1", "--eval-every", "2", "--eval-prompts", "40",
            "--checkpoint-every", "2", *TASK, "clip",
        ]  # fmt: skip
    with open(runs_dir / f"{name}.log", "w") as log:
        subprocess.run([sys.executable, "-m", "agents", "train", "text", *arguments], check=True, cwd=ROOT, stdout=log,
                       stderr=subprocess.STDOUT)  # fmt: skip


def best_of_n(runs_dir: Path) -> None:
    """Best-of-N from the starting model of the proxy runs (``--base``), chosen by the proxy."""
    output = runs_dir / BEST_OF_FILE
    if output.exists():
        return
    command = [sys.executable, "-m", "agents", "eval", str(runs_dir / "proxy-kl0"), "--base", "--best-of",
               str(BEST_OF), "--episodes", "40", "--seed", "1"]  # fmt: skip
    result = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    output.write_text(result.stdout)


def rl_points(run_dir: Path) -> list[tuple[float, float | None, float, int]]:
    """(sqrt KL, held-out proxy, held-out gold, iteration) at every evaluation of a run; the control, trained on
    the checker, has no proxy (None) and its reward is the gold."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = []
    for record in records:
        if "eval_reward" in record:
            kl = record.get("ref_kl", 0.0)  # iteration 0 (the starting policy) has no KL
            proxy = record["eval_reward"] if "eval_gold_reward" in record else None
            gold = record.get("eval_gold_reward", record["eval_reward"])
            points.append((math.sqrt(max(kl, 0.0)), proxy, gold, record["iteration"]))
    return points


def best_of_points(runs_dir: Path) -> list[tuple[float, float, float, int]]:
    """(sqrt KL bound, proxy, gold, N) of each N, read from ``ppo eval --best-of``'s table."""
    lines = (runs_dir / BEST_OF_FILE).read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("N |"))
    names = [cell.strip() for cell in lines[header].split("|")]
    points = []
    for line in lines[header + 1 :]:
        row = dict(zip(names, (float(cell) for cell in line.split("|"))))
        points.append((math.sqrt(row["KL bound (nats)"]), row["reward"], row["gold_reward"], int(row["N"])))
    return points


def plot(runs_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {name: rl_points(runs_dir / name) for name in RUNS if (runs_dir / name / "metrics.jsonl").exists()}
    if (runs_dir / BEST_OF_FILE).exists():
        series["best-of-N (proxy)"] = best_of_points(runs_dir)
    figure, (proxy_panel, gold_panel) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, points in series.items():
        xs = [p[0] for p in points]
        style = "s--" if name.startswith("best") else "o-"
        if points[0][1] is not None:
            proxy_panel.plot(xs, [p[1] for p in points], style, label=name, markersize=3)
        gold_panel.plot(xs, [p[2] for p in points], style, label=name, markersize=3)
    proxy_panel.set(title="proxy reward (held-out, logit)", xlabel="sqrt(KL to reference), sqrt(nats)")
    gold_panel.set(title="gold reward: the checker (held-out accuracy)", xlabel="sqrt(KL to reference), sqrt(nats)")
    gold_panel.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(runs_dir / "overoptimisation.png", dpi=110)
    lines = ["| series | point | sqrt KL | proxy | gold |", "|---|---|---:|---:|---:|"]
    for name, points in series.items():
        unit = "N" if name.startswith("best") else "iteration"
        lines += [f"| {name} | {unit} {p[3]} | {p[0]:.2f} | {'' if p[1] is None else f'{p[1]:.3f}'} | {p[2]:.3f} |"
                  for p in points]  # fmt: skip
    (runs_dir / "overoptimisation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/overoptimisation"))
    parser.add_argument("--runs", nargs="*", default=[], choices=[*RUNS, "best-of-n"], help="what to run, in order")
    parser.add_argument("--tokens", type=int, default=6000, help="generated tokens per RL run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", action="store_true", help="draw the figure and the table from what has finished")
    args = parser.parse_args()
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    for name in args.runs:
        if name == "best-of-n":
            best_of_n(args.runs_dir)
        else:
            train(args.runs_dir, name, args.tokens, args.seed)
        print(f"{name}: done", flush=True)
    if args.plot:
        plot(args.runs_dir)


if __name__ == "__main__":
    main()
