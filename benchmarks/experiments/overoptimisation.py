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

    python -m benchmarks.experiments.overoptimisation --runs proxy-kl0 proxy-kl0.5 best-of-n &   # one stream
    python -m benchmarks.experiments.overoptimisation --runs proxy-kl0.05 checker-kl0           # the other
    python -m benchmarks.experiments.overoptimisation --plot                                     # figure and table

``--experiment sentiment`` does the same on the default sentiment task, where the proxy is the learned reward model
(MiniLM + logistic head on IMDB labels, ``learned_reward``) and the gold is the VADER lexicon of the completion alone
(``gold_lexicon``): runs ``learned-kl0``, ``learned-kl0.05``, ``learned-kl0.5``, the control ``lexicon-kl0`` (trained
on the lexicon) and ``best-of-n`` (chosen by the learned reward), 64 completions of at most 24 tokens per iteration,
learning rate 3e-5, 23,040 generated tokens (about 16 iterations), 64 held-out prompts.

``--plot --earlier-table docs/reports/.../overoptimisation.md`` takes the series a runs dir lacks from an earlier
table, so a figure can be finished on a machine where only some of the runs were re-run.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import ppo_eval_once, read_metrics, train_text_run


@dataclass(frozen=True)
class Experiment:
    """One proxy/gold pair: the task's command-line words, its runs and where its metrics say proxy and gold."""

    task: list[str]
    """The task subcommand and its options, after ``ppo train text``'s own options."""
    runs: dict[str, tuple[list[str], list[str], float]]
    """Run name -> (``ppo train text`` options and task options that choose the training reward, the fixed
    ``--ref-kl-coef``)."""
    control: str
    """The run trained on the gold reward itself."""
    max_new_tokens: int
    """Token limit of a completion."""
    proxy_metric: str
    """The held-out proxy reward in metrics.jsonl (``eval_`` + the task's metric), and in best-of-N's table."""
    gold_metric: str
    """The held-out gold reward, likewise."""
    gold_title: str
    """What the gold is, for the figure."""
    train_options: list[str]
    """``ppo train text`` options every run of the experiment shares."""
    tokens: int
    """Generated tokens per RL run (``--tokens`` overrides)."""
    eval_prompts: int
    """Held-out prompts every evaluation and best-of-N score."""


EXPERIMENTS = {
    "arithmetic": Experiment(
        task=["arithmetic", "--operand-max", "9", "--operations", "+", "--eval-prompts", "40"],
        runs={"proxy-kl0": (["--reward", "proxy"], [], 0.0), "proxy-kl0.05": (["--reward", "proxy"], [], 0.05),
              "proxy-kl0.5": (["--reward", "proxy"], [], 0.5), "checker-kl0": (["--reward", "task"], [], 0.0)},
        control="checker-kl0", max_new_tokens=16, proxy_metric="proxy_reward", gold_metric="gold_reward",
        gold_title="the checker (held-out accuracy)", train_options=[], tokens=6000, eval_prompts=40,
    ),
    "sentiment": Experiment(
        task=["sentiment"],
        runs={"learned-kl0": ([], [], 0.0), "learned-kl0.05": ([], [], 0.05), "learned-kl0.5": ([], [], 0.5),
              "lexicon-kl0": ([], ["--reward-model", "lexicon"], 0.0)},
        control="lexicon-kl0", max_new_tokens=24, proxy_metric="learned_reward", gold_metric="gold_lexicon",
        gold_title="the VADER lexicon (held-out, -1 to 1)", tokens=23040, eval_prompts=64,
        # 3x the default learning rate, so the policy travels several nats (implementation_details 96)
        train_options=["--learning-rate", "3e-5"],
    ),
}  # fmt: skip
BEST_OF = 64
BEST_OF_FILE = "best_of_n.txt"


def train(experiment: Experiment, runs_dir: Path, name: str, tokens: int, seed: int) -> None:
    options, task_options, coef = experiment.runs[name]
    train_text_run(runs_dir, name, [
        "--seed", str(seed), *options, "--ref-kl-coef", str(coef), "--ref-kl-target", "None",
        "--prompts-per-iteration", "64", "--max-new-tokens", str(experiment.max_new_tokens), "--minibatch-size", "16",
        "--total-steps", str(tokens), "--torch-threads", "1", "--eval-every", "2",
        "--eval-prompts", str(experiment.eval_prompts), "--checkpoint-every", "2", "--no-keep-checkpoint",
        *experiment.train_options, *experiment.task, *task_options, "clip",
    ])  # fmt: skip


def best_of_n(experiment: Experiment, runs_dir: Path) -> None:
    """Best-of-N from the starting model of the RL runs (``--base``), chosen by the proxy."""
    first = next(iter(experiment.runs))
    ppo_eval_once([str(runs_dir / first), "--base", "--best-of", str(BEST_OF), "--episodes",
                   str(experiment.eval_prompts), "--seed", "1"], runs_dir / BEST_OF_FILE)  # fmt: skip


def rl_points(experiment: Experiment, run_dir: Path) -> list[tuple[float, float | None, float, int]]:
    """(sqrt KL, held-out proxy, held-out gold, iteration) at every evaluation of a run. A run trained on the
    checker logs no proxy (None) and its reward is the gold."""
    records = read_metrics(run_dir)
    points = []
    for record in records:
        if "eval_reward" in record:
            kl = record.get("ref_kl", 0.0)  # iteration 0 (the starting policy) has no KL
            proxy = record.get(f"eval_{experiment.proxy_metric}")
            gold = record.get(f"eval_{experiment.gold_metric}", record["eval_reward"])
            points.append((math.sqrt(max(kl, 0.0)), proxy, gold, record["iteration"]))
    return points


def best_of_points(experiment: Experiment, runs_dir: Path) -> list[tuple[float, float, float, int]]:
    """(sqrt KL bound, proxy, gold, N) of each N, read from ``ppo eval --best-of``'s table."""
    lines = (runs_dir / BEST_OF_FILE).read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("N |"))
    names = [cell.strip() for cell in lines[header].split("|")]
    points = []
    for line in lines[header + 1 :]:
        row = dict(zip(names, (float(cell) for cell in line.split("|"))))
        points.append((math.sqrt(row["KL bound (nats)"]), row[experiment.proxy_metric], row[experiment.gold_metric],
                       int(row["N"])))  # fmt: skip
    return points


def table_points(table: Path) -> dict[str, list[tuple[float, float | None, float, int]]]:
    """Every series of an earlier ``--plot`` table (its ``overoptimisation.md``), as ``rl_points`` gives them."""
    series: dict[str, list[tuple[float, float | None, float, int]]] = {}
    for line in table.read_text().splitlines()[2:]:
        name, point, sqrt_kl, proxy, gold = (cell.strip() for cell in line.strip("|").split("|"))
        series.setdefault(name, []).append(
            (float(sqrt_kl), float(proxy) if proxy else None, float(gold), int(point.split()[1]))
        )
    return series


def plot(experiment: Experiment, runs_dir: Path, earlier_table: Path | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {name: rl_points(experiment, runs_dir / name) for name in experiment.runs
              if (runs_dir / name / "metrics.jsonl").exists()}  # fmt: skip
    if (runs_dir / BEST_OF_FILE).exists():
        series["best-of-N (proxy)"] = best_of_points(experiment, runs_dir)
    if earlier_table is not None:
        earlier = table_points(earlier_table)
        series = {name: series.get(name) or earlier[name] for name in [*earlier, *series]}
    figure, (proxy_panel, gold_panel) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, points in series.items():
        xs = [p[0] for p in points]
        style = "s--" if name.startswith("best") else "o-"
        if points[0][1] is not None:
            proxy_panel.plot(xs, [p[1] for p in points], style, label=name, markersize=3)
        gold_panel.plot(xs, [p[2] for p in points], style, label=name, markersize=3)
    proxy_panel.set(title="proxy reward (held-out, logit)", xlabel="sqrt(KL to reference), sqrt(nats)")
    gold_panel.set(title=f"gold reward: {experiment.gold_title}", xlabel="sqrt(KL to reference), sqrt(nats)")
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
    parser.add_argument("--experiment", choices=list(EXPERIMENTS), default="arithmetic")
    parser.add_argument("--runs-dir", type=Path, default=None, help="default runs/overoptimisation[-sentiment]")
    parser.add_argument("--runs", nargs="*", default=[], help="what to run, in order: run names and best-of-n")
    parser.add_argument("--tokens", type=int, default=None, help="generated tokens per RL run (default: experiment's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", action="store_true", help="draw the figure and the table from what has finished")
    parser.add_argument(
        "--earlier-table",
        type=Path,
        default=None,
        help="with --plot: an earlier overoptimisation.md whose series fill in runs missing here",
    )
    args = parser.parse_args()
    experiment = EXPERIMENTS[args.experiment]
    unknown = [name for name in args.runs if name not in [*experiment.runs, "best-of-n"]]
    if unknown:
        parser.error(f"--experiment {args.experiment} has no run {unknown[0]!r}; choose from "
                     f"{', '.join([*experiment.runs, 'best-of-n'])}")  # fmt: skip
    suffix = "" if args.experiment == "arithmetic" else f"-{args.experiment}"
    runs_dir = args.runs_dir or Path(f"runs/overoptimisation{suffix}")
    runs_dir.mkdir(parents=True, exist_ok=True)
    for name in args.runs:
        if name == "best-of-n":
            best_of_n(experiment, runs_dir)
        else:
            train(experiment, runs_dir, name, args.tokens or experiment.tokens, args.seed)
        print(f"{name}: done", flush=True)
    if args.plot:
        if args.earlier_table is not None and not args.earlier_table.is_file():
            parser.error(f"--earlier-table {args.earlier_table} is not a file; give an overoptimisation.md from --plot")
        plot(experiment, runs_dir, args.earlier_table)


if __name__ == "__main__":
    main()
