"""Text throughput: KV-cached sampling cost per token at two lengths, and whole PPO iterations against TRL's PPOTrainer.

Default model (SmolLM2-135M-Instruct, fp32, CPU), 8 prompts of about 11 tokens, 1 torch thread unless
``--threads``. Three measurements, one after another in this run:

1. Sampling with the key/value cache (``agents.text.actor_critic.sample_responses``) for 32 and 128 new tokens, EOS
   disabled so every row generates the full length: seconds per generated token must stay flat.
   The same for a loop that re-runs the whole prefix at every token (what a naive per-token env does).
2. ``ppo train text`` iterations on the sentiment task (8 review openings of 8 words, about 11 tokens;
   32 new tokens, 4 epochs, minibatch 8 sequences; continuations of reviews rarely stop before the
   limit, so the lengths match TRL's, which never stops): generated tokens per second of wall-clock,
   first iteration excluded; full fine-tuning and LoRA rank 8, each in its own process for its peak memory.
3. TRL 1.12's PPOTrainer on the same model, batch and lengths, run by ``benchmarks/peers/trl_ppo_baseline.py``
   with the Python of a separate venv (``--trl-python``; TRL is a peer, not a dependency).

    python -m benchmarks.peers.text_throughput --trl-python /work/trl-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.harness import child_result, iteration_times, machine_header, module_command, read_metrics

TRL_BASELINE = "benchmarks.peers.trl_ppo_baseline"
"""The TRL measurement, run as a module by the TRL venv's python (it imports nothing of this project)."""
PROMPTS = [
    "What is 7 + 5? Answer:",
    "What is 13 - 4? Answer:",
    "What is 9 + 11? Answer:",
    "What is 18 - 9? Answer:",
    "What is 6 + 14? Answer:",
    "What is 20 - 7? Answer:",
    "What is 3 + 16? Answer:",
    "What is 15 - 8? Answer:",
]


def sampling_cost(lm, tokenizer, new_tokens: int, use_cache: bool) -> float:
    """Seconds per generated token for the 8 prompts, EOS never stopping a row."""
    from agents.text.actor_critic import inverse_cdf_sample, sample_responses
    from agents.text.rollout import left_pad

    ids, mask = left_pad(
        [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS],
        tokenizer.pad_token_id or 0,
        torch.device("cpu"),
    )
    uniforms = torch.rand(len(PROMPTS), new_tokens, generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    if use_cache:
        sample_responses(lm, ids, mask, uniforms, 1.0, eos_id=-1, pad_id=0)
    else:
        with torch.no_grad():
            for t in range(new_tokens):
                logits = lm(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, -1]
                token = inverse_cdf_sample(logits, uniforms[:, t], 1.0)
                ids = torch.cat([ids, token.unsqueeze(1)], 1)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return (time.perf_counter() - start) / (new_tokens * len(PROMPTS))


def ppo_iterations(
    iterations: int, threads: int, lora_rank: int = 0, dtype: str = "fp32", objective=None, separate_critic=False
) -> dict:
    """``ppo train text`` iterations on the benchmark's batch (8 x 32 tokens, 4 epochs, minibatch 8, lexicon reward)
    with ``objective`` (default PPO-Clip): timings of all but the first, peak memory and trainable numbers."""
    from agents.core.objectives import Clip
    from agents.runs.config import RunConfig
    from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig
    from agents.text.train import train_text
    from envs.text.tasks import SentimentTaskConfig

    with tempfile.TemporaryDirectory() as runs:
        config = TextTrainConfig(
            text=TextEnvConfig(
                task=SentimentTaskConfig(reward_model="lexicon"),
                prompts_per_iteration=8,
                max_new_tokens=32,
                forward_batch=8,
                lora_rank=lora_rank,
                dtype=dtype,
                separate_critic=separate_critic,
            ),
            objective=objective or Clip(),
            ppo=replace(TEXT_PPO_DEFAULTS, total_steps=8 * 32 * iterations, epochs=4, minibatch_size=8),
            run=RunConfig(
                runs_dir=Path(runs),
                run_name="bench",
                progress=False,
                compile=False,
                torch_threads=threads,
                checkpoint_every=10_000,
            ),
        )
        run_dir = train_text(config)
        records = read_metrics(run_dir)
        trainable = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)["trainable"]
    timed, times = records[1:], iteration_times(records)
    return {
        "iterations_timed": times.iterations,
        "seconds_per_iteration": times.seconds_per_iteration,
        "rollout_seconds": times.rollout_seconds,
        "update_seconds": times.update_seconds,
        "mean_response_length": sum(r["response_length"] for r in timed) / len(timed),
        "generated_tokens_per_second": times.steps_per_second,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "trainable_millions": sum(t.numel() for t in trainable.values()) / 1e6,
    }


def ppo_in_subprocess(args: argparse.Namespace, lora_rank: int, dtype: str = "fp32") -> dict:
    """``ppo_iterations`` in a fresh process, so its peak memory is its own."""
    arguments = ["--only-ppo", "--lora-rank", str(lora_rank), "--threads", str(args.threads), "--iterations",
                 str(args.iterations), "--dtype", dtype]  # fmt: skip
    return child_result(module_command(__spec__.name, *arguments))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=4, help="PPO iterations (the first is not timed)")
    parser.add_argument(
        "--trl-python", type=Path, help="python of a venv with trl==1.12.0 (see benchmarks/peers/trl_ppo_baseline.py)"
    )
    parser.add_argument("--trl-updates", type=int, default=3)
    parser.add_argument("--skip-sampling", action="store_true", help="skip measurement 1")
    parser.add_argument("--only-ppo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lora-rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument(
        "--bf16", action="store_true", help="also time full fine-tuning with bf16 autocast (pays on native-bf16 CPUs)"
    )
    parser.add_argument("--skip-lora", action="store_true", help="skip the LoRA measurement")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.only_ppo:
        print(json.dumps(ppo_iterations(args.iterations, args.threads, args.lora_rank, args.dtype)))
        return
    from envs.text.models import load_causal_lm

    lm, tokenizer, source = load_causal_lm()
    print(machine_header())
    print(f"model: {source}; {args.threads} torch thread(s); 8 prompts")
    for use_cache in () if args.skip_sampling else (True, False):
        costs = {n: sampling_cost(lm, tokenizer, n, use_cache) for n in (32, 128)}
        label = "KV cache (ours)" if use_cache else "full prefix per token"
        print(
            f"sampling, {label:<22}: {costs[32] * 1e3:6.1f} ms/token at 32, {costs[128] * 1e3:6.1f} ms/token at 128 "
            f"(x{costs[128] / costs[32]:.2f}); {1 / costs[32]:.0f} tokens/s at 32"
        )
    del lm
    results = {"this PPO, full fine-tuning": ppo_in_subprocess(args, lora_rank=0)}
    if args.bf16:
        results["this PPO, full fine-tuning, bf16 autocast"] = ppo_in_subprocess(args, lora_rank=0, dtype="bf16")
    if not args.skip_lora:
        results["this PPO, LoRA rank 8"] = ppo_in_subprocess(args, lora_rank=8)
    ours = results["this PPO, full fine-tuning"]
    for label, result in results.items():
        print(
            f"{label}: {result['seconds_per_iteration']:.1f} s per iteration "
            f"(rollout {result['rollout_seconds']:.1f} s, update {result['update_seconds']:.1f} s), "
            f"{result['generated_tokens_per_second']:.1f} generated tokens/s of PPO, "
            f"mean response {result['mean_response_length']:.1f} tokens, peak {result['peak_rss_gb']:.1f} GB"
        )
    if args.trl_python:
        arguments = ["--updates", str(args.trl_updates), "--threads", str(args.threads), "--new-tokens", "32",
                     "--batch", "8"]  # fmt: skip
        trl = child_result(module_command(TRL_BASELINE, *arguments, python=str(args.trl_python)))
        trl_rate = trl["tokens_per_update"] / trl["seconds_per_update"]
        print(
            f"TRL {trl.get('trl_version')} PPOTrainer: {trl['seconds_per_update']:.1f} s per update, "
            f"{trl_rate:.1f} generated tokens/s of PPO, "
            f"peak {trl.get('peak_rss_gb', float('nan')):.1f} GB"
        )
        print(
            "ratio (ours / TRL, generated tokens per second of PPO): "
            f"{ours['generated_tokens_per_second'] / trl_rate:.2f}x"
        )
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
