"""What a syllogism policy answers (issue #12): for the held-out prompts of a text run on ``reasoning --dataset
syllogism``, how often the answer read from the completion is ``Yes``, ``No`` or anything else, and the accuracy on
the questions whose right answer is Yes and on those whose right answer is No. A policy that has learned only the
answer's form says one word every time and scores 0.5 (half the conclusions follow, ``invalid_ratio`` 0.5); one
that reasons beats 0.5 on both halves together.

    python -m benchmarks.experiments.syllogism_answers RUN [--base] [--prompts 200] [--seed 1]

The completions are ``ppo eval``'s (the run's sampling settings, noise from ``--seed``): with the run's seed and
``--prompts`` equal to its ``--eval-prompts`` they are its last held-out evaluation's (the first, with ``--base``).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch

from agents.text.evaluate import load_evaluation
from agents.text.rollout import heldout_completions
from envs.text.tasks import checked_scores
from envs.text.tasks.reasoning import extracted_answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--base", action="store_true", help="the starting model instead of the trained policy")
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_evaluation(args.run, args.base)
    prompts = loaded.task.prompts("eval")[: args.prompts]
    completions = heldout_completions(loaded.lm, loaded.tokenizer, prompts, loaded.config.text, args.seed).completions
    accuracy = checked_scores(loaded.task, prompts, completions).metrics["accuracy"]
    answers = [extracted_answer(completion) or "" for completion in completions]
    forms = Counter(answer if answer in ("Yes", "No") else "other" for answer in answers)
    print(f"{loaded.model_spec}: {len(prompts)} held-out prompts, accuracy {sum(accuracy) / len(prompts):.3f}")
    print("answers: " + ", ".join(f"{form} {forms[form] / len(prompts):.2f}" for form in ("Yes", "No", "other")))
    for right in ("Yes", "No"):
        picked = [i for i, prompt in enumerate(prompts) if loaded.task.entry(prompt)["answer"] == right]
        share = sum(accuracy[i] for i in picked) / max(len(picked), 1)
        print(f"right answer {right}: {len(picked)} questions, accuracy {share:.3f}")
    print("first completions: " + " | ".join(repr(completion) for completion in completions[:8]))


if __name__ == "__main__":
    main()
