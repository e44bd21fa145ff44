"""The arithmetic task, RL with a verifiable reward: prompts such as ``What is 7 + 5? Answer:`` cover every question
of an operand range, split once into disjoint train and eval lists by a seeded shuffle, and a program checks each
answer: reward 1 if the first number of the completion is exactly right, else 0.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from envs.text.tasks.base import TaskError, TaskScores, check_split

OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}
QUESTION = re.compile(r"What is (\(-\d+\)|-?\d+) ([-+*]) (\(-\d+\)|-?\d+)\?")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class ArithmeticTaskConfig:
    """Answer small arithmetic questions; reward 1 for the exact answer, else 0."""

    name: ClassVar[str] = "arithmetic"
    operand_min: int = 0
    """Smallest operand."""
    operand_max: int = 20
    """Largest operand."""
    operations: str = "+-"
    """Operators to ask about, any of '+', '-', '*'."""
    eval_prompts: int = 100
    """Questions held out for evaluation; all other questions of the range are training prompts."""
    question_seed: int = 0
    """Seed of the shuffle that decides which questions are held out, and the order of both lists."""


def arithmetic_question(a: int, operation: str, b: int) -> str:
    """``What is 7 + 5? Answer:``; a negative operand is written in parentheses."""

    def operand(n: int) -> str:
        return f"({n})" if n < 0 else str(n)

    return f"What is {operand(a)} {operation} {operand(b)}? Answer:"


def arithmetic_answer(prompt: str) -> int:
    """The exact answer to the question ``arithmetic_question`` wrote into ``prompt`` (found anywhere in it)."""
    match = QUESTION.search(prompt)
    if match is None:
        raise TaskError(
            f"prompt {prompt[:60]!r} holds no 'What is A op B?' question; "
            "score only prompts from ArithmeticTask.prompts"
        )
    a, operation, b = match.groups()
    return OPERATIONS[operation](int(a.strip("()")), int(b.strip("()")))


def first_number(text: str) -> Fraction | None:
    """The first number written in ``text`` ("-3", "12", "2.5"), read exactly; None if there is none."""
    match = NUMBER.search(text.replace("\N{MINUS SIGN}", "-"))
    return None if match is None else Fraction(match.group())


class ArithmeticTask:
    """RL with a verifiable reward: a program checks the answer.

    Prompts: every question ``What is a op b? Answer:`` with ``a, b`` in [operand_min, operand_max] and
    ``op`` in ``operations``, shuffled with ``question_seed``; the first ``eval_prompts`` are "eval", the rest
    "train" (disjoint). Scores: ``answered = 1`` if the completion contains a number;
    ``reward = accuracy = 1`` if its first number equals ``a op b`` exactly ("12", "The answer is 12.",
    "12.0"), else 0 ("13", "", "12.5", "1 2").
    """

    name = ArithmeticTaskConfig.name

    def __init__(self, config: ArithmeticTaskConfig = ArithmeticTaskConfig()) -> None:
        if config.operand_min > config.operand_max:
            raise TaskError(f"operand_min ({config.operand_min}) must not exceed operand_max ({config.operand_max})")
        unknown = set(config.operations) - set(OPERATIONS)
        if not config.operations or unknown:
            raise TaskError(f"operations must be made of '+', '-', '*', got {config.operations!r}")
        operands = range(config.operand_min, config.operand_max + 1)
        questions = [
            arithmetic_question(a, op, b)
            for op in dict.fromkeys(config.operations)
            for a, b in itertools.product(operands, operands)
        ]
        if not 1 <= config.eval_prompts < len(questions):
            raise TaskError(
                f"eval_prompts must be between 1 and {len(questions) - 1} "
                f"(there are {len(questions)} questions in this range), "
                f"got {config.eval_prompts}; widen the operand range or hold out fewer"
            )
        random.Random(config.question_seed).shuffle(questions)
        self.config = config
        self.split_prompts = {"eval": questions[: config.eval_prompts], "train": questions[config.eval_prompts :]}

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return list(self.split_prompts[split])

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        answers = [first_number(completion) for completion in completions]
        correct = [
            float(answer is not None and answer == arithmetic_answer(prompt))
            for prompt, answer in zip(prompts, answers)
        ]
        answered = [float(answer is not None) for answer in answers]
        return TaskScores(rewards=correct, metrics={"accuracy": list(correct), "answered": answered})
