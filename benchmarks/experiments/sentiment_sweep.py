"""The sentiment defaults sweep (issue #12): which learning rate, prompts per iteration, epochs and reference-KL
coefficient make the default text run (``ppo train text``: SmolLM2-135M-Instruct on IMDB openings, PPO-Clip) learn most
within its budget of 7,680 generated tokens.

Each configuration is the default run with some options changed, seed 1, held-out learned reward and VADER gold
on the first 64 held-out prompts before and after training (``--eval-every 1000 --eval-prompts 64``: the same
prompts and noise for every configuration, so the "before" column is the same number everywhere), and again with
``ppo eval RUN --episodes 64`` (the same prompts, other noise: seed 12345), whose output is kept in
``<name>.eval.txt`` (``base.eval.txt`` for the starting model): one sample per prompt is noisy (a standard error
of about 0.2 on the learned reward), so a configuration is judged on both checks. One torch thread per run, so two
streams of configurations go side by side on 2 cores:

    python -m benchmarks.experiments.sentiment_sweep --configs default lr3e-5 lr1e-4 p32 &
    python -m benchmarks.experiments.sentiment_sweep --configs p8 e2 e8 kl0.05
    python -m benchmarks.experiments.sentiment_sweep --table        # the table of what has finished

Wall-clock per run is written beside it (``<name>.seconds``); it is comparable between runs only when they ran
under the same load.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from benchmarks.harness import ppo_eval_once, read_metrics, train_text_run

CONFIGS = {
    "default": [],
    "lr3e-5": ["--learning-rate", "3e-5"],
    "lr1e-4": ["--learning-rate", "1e-4"],
    "p32": ["--prompts-per-iteration", "32", "--minibatch-size", "8"],
    "p8": ["--prompts-per-iteration", "8", "--minibatch-size", "2"],
    "e2": ["--epochs", "2"],
    "e8": ["--epochs", "8"],
    # beta_ref, not its target: over 336 sequences a 10,000-sequence horizon moves beta by under 1 % (ProportionalKL)
    "kl0.05": ["--ref-kl-coef", "0.05"],
    # the text default until issue 26 moved it to TRL's 1e-8: run beside `default` to re-measure the move
    "eps1e-5": ["--adam-eps", "1e-5"],
}
"""configuration name -> the options it changes (``ppo train text``'s, before the task subcommand)."""


def run(runs_dir: Path, name: str) -> None:
    started = time.perf_counter()
    whole = train_text_run(runs_dir, name, [
        "--seed", "1", "--torch-threads", "1", "--eval-every", "1000", "--eval-prompts", "64", "--no-keep-checkpoint",
        *CONFIGS[name],
    ])  # fmt: skip
    if whole:
        (runs_dir / f"{name}.seconds").write_text(f"{time.perf_counter() - started:.0f}\n")
    second_check(runs_dir, name)


def second_check(runs_dir: Path, name: str) -> tuple[float, float]:
    """Held-out learned reward and gold of ``ppo eval RUN --episodes 64`` (``--base`` for ``base``: the starting
    model, read through the default run), run once and kept in ``<name>.eval.txt``."""
    run_dir, base = (runs_dir / "default", ["--base"]) if name == "base" else (runs_dir / name, [])
    text = ppo_eval_once([str(run_dir), "--episodes", "64", *base], runs_dir / f"{name}.eval.txt")
    found = re.search(r"learned_reward (\S+), gold_lexicon (\S+)", text)
    return float(found[1]), float(found[2])


def table(runs_dir: Path) -> str:
    lines = [
        "| configuration | options | iterations | wall-clock (min) | held-out learned, before → after | held-out gold, "
        "before → after | second check (`ppo eval`): learned, gold | gain, mean of the two checks: learned, gold | "
        "ref KL at the end (nats) | length at the end | distinct-token ratio at the end |",
        "|---|---|---:|---:|---|---|---|---|---:|---:|---:|",
    ]
    base_learned, base_gold = second_check(runs_dir, "base")
    lines.append(f"| starting model | | 0 | | | | {base_learned:.2f}, {base_gold:.3f} | | 0 | | |")
    for name, options in CONFIGS.items():
        if not (runs_dir / name / "policy" / "config.json").exists():
            continue
        records = read_metrics(runs_dir / name)
        evals = [r for r in records if "eval_learned_reward" in r]
        trained = [r for r in records if "ref_kl" in r]
        seconds = runs_dir / f"{name}.seconds"
        minutes = f"{int(seconds.read_text()) / 60:.1f}" if seconds.exists() else "resumed"
        learned, gold = second_check(runs_dir, name)
        first, last = evals[0], evals[-1]
        learned_gain = (last["eval_learned_reward"] - first["eval_learned_reward"] + learned - base_learned) / 2
        gold_gain = (last["eval_gold_lexicon"] - first["eval_gold_lexicon"] + gold - base_gold) / 2
        lines.append(
            f"| {name} | {' '.join(options) or '(none)'} | {trained[-1]['iteration']} | {minutes} | "
            f"{first['eval_learned_reward']:.2f} → {last['eval_learned_reward']:.2f} | "
            f"{first['eval_gold_lexicon']:.3f} → {last['eval_gold_lexicon']:.3f} | "
            f"{learned:.2f}, {gold:.3f} | "
            f"{learned_gain:+.2f}, {gold_gain:+.3f} | "
            f"{trained[-1]['ref_kl']:.2f} | {trained[-1]['response_length']:.1f} | "
            f"{trained[-1]['distinct_token_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/sentiment-sweep"))
    parser.add_argument("--configs", nargs="*", default=[], choices=list(CONFIGS), help="what to run, in order")
    parser.add_argument("--table", action="store_true", help="print the table of the finished configurations")
    args = parser.parse_args()
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    for name in args.configs:
        run(args.runs_dir, name)
        print(f"{name}: done", flush=True)
    if args.table:
        text = table(args.runs_dir)
        (args.runs_dir / "sweep.md").write_text(text + "\n")
        print(text)


if __name__ == "__main__":
    main()
