"""How often the default model (SmolLM2-135M-Instruct, fp32, CPU) already answers reasoning-gym questions: pass@1
at temperature 1 on the held-out prompts of the ``reasoning`` task for a few simple datasets, with and without the
chat template, to pick datasets where RL has something to learn from (pass@1 neither near 0 nor near 1).

Each row: one completion per prompt for the task's first ``--prompts`` held-out prompts (question_seed 0; the task
generates 4 x ``--prompts`` held-out questions so that enough remain once the training ones are dropped), sampled as
``ppo eval`` samples them (``agents.text.rollout.heldout_completions``, noise from ``--seed``), scored by the task:
pass@1 (mean accuracy), mean reward (partial credit included), answered, the longest prompt in tokens (the chat
template included; ``--max-prompt-tokens`` must be at least this) and seconds. One torch thread.

    python -m benchmarks.probes.reasoning_pass_at_1 --prompts 200 --max-new-tokens 24
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from benchmarks.harness import machine_header

# (dataset, dataset_options): short answers, small numbers and words for a 135M model; the last two: Yes/No, True/False
CANDIDATES = [
    ("chain_sum", {"min_terms": 3, "max_terms": 3, "max_digits": 1}),
    ("basic_arithmetic", {"max_terms": 2, "max_digits": 2, "operators": ["+", "-"]}),
    ("count_bits", {"max_n": 65535}),
    ("gcd", {"max_value": 100}),
    ("letter_counting", {"min_words": 1, "max_words": 3}),
    ("spell_backward", {"max_word_len": 5}),
    ("word_sorting", {"max_words": 3, "max_word_length": 6}),
    ("word_sequence_reversal", {"max_words": 3}),
    ("syllogism", {"invalid_ratio": 0.5}),
    ("ransom_note", {"max_note_length": 5, "max_magazine_length": 10}),
]


def pass_at_1(lm, tokenizer, dataset: str, options: dict, prompt_format: str, chat_template: bool, args) -> dict:
    """The row of one (dataset, options, prompt format, template) contender."""
    from agents.text.config import TextEnvConfig
    from agents.text.rollout import format_prompts, heldout_completions
    from envs.text.tasks import ReasoningTask, ReasoningTaskConfig

    # Held-out questions that are also training questions are dropped: generate enough for --prompts to remain.
    task = ReasoningTask(ReasoningTaskConfig(dataset, json.dumps(options), prompt_format, eval_size=4 * args.prompts))
    prompts = task.prompts("eval")[: args.prompts]
    text = TextEnvConfig(
        max_new_tokens=args.max_new_tokens, max_prompt_tokens=1024, temperature=1.0, chat_template=chat_template
    )
    prompt_tokens = [
        len(tokenizer(p, add_special_tokens=False)["input_ids"])
        for p in format_prompts(tokenizer, prompts, chat_template)
    ]
    start = time.perf_counter()
    completions = heldout_completions(lm, tokenizer, prompts, text, args.seed).completions
    seconds = time.perf_counter() - start
    scores = task.score(prompts, completions)
    print(f"  e.g. {prompts[0][-40:]!r} -> {completions[0]!r}", file=sys.stderr, flush=True)
    return {
        "prompts": len(prompts),
        "pass@1": sum(scores.metrics["accuracy"]) / len(prompts),
        "reward": sum(scores.rewards) / len(prompts),
        "answered": sum(scores.metrics["answered"]) / len(prompts),
        "max_prompt_tokens": max(prompt_tokens),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=200, help="held-out prompts per row")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="token limit of a completion")
    parser.add_argument("--seed", type=int, default=0, help="sampling noise seed")
    parser.add_argument("--datasets", nargs="*", help="only these candidate datasets (default: all)")
    parser.add_argument("--formats", nargs="*", default=["answer"], help="prompt formats: question, answer, tags")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from envs.text.models import load_causal_lm

    print(machine_header())
    lm, tokenizer, source = load_causal_lm()
    print(f"model: {source}; {args.prompts} held-out prompts per row, {args.max_new_tokens} new tokens, temperature 1")
    print()
    print("| dataset | dataset_options | prompt_format | chat template | prompts | pass@1 | mean reward | answered "
          "| longest prompt (tokens) | seconds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dataset, options in CANDIDATES:
        if args.datasets and dataset not in args.datasets:
            continue
        for prompt_format in args.formats:
            for chat_template in (False, True):
                row = pass_at_1(lm, tokenizer, dataset, options, prompt_format, chat_template, args)
                print(
                    f"| {dataset} | `{json.dumps(options)}` | {prompt_format} | {'yes' if chat_template else 'no'} "
                    f"| {row['prompts']} | {row['pass@1']:.3f} | {row['reward']:.3f} | {row['answered']:.2f} "
                    f"| {row['max_prompt_tokens']} | {row['seconds']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
