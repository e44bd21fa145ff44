"""A tool task: a question the model cannot answer in its head (by default the product of two 3-digit numbers), a
calculator it may call in any turn, and an answer turn that ends the game.

Turn syntax (case-insensitive, anywhere in the turn):
- ``answer: N`` (``N`` a whole number, optionally negative, commas between its digits ignored: ``56,088``) is an
  answer turn: reward 1 if ``N`` is the exact answer, else 0, and the game is over. Any ``calc:`` in the same turn is
  ignored.
- otherwise ``calc: EXPRESSION`` calls the calculator: the expression is what follows ``calc:`` up to the first
  character that is not a digit, a space, ``+ - * / ^`` or a parenthesis (so ``calc: 12*34, please`` computes
  ``12*34``); it may use whole numbers, ``+``, ``-``, ``*`` and parentheses (``/`` and ``^`` are refused with a reason).
  The reply is ``EXPRESSION = VALUE``, or says why it cannot be computed. Reward 0; the game goes on.
- a turn with neither is answered with this syntax and scores 0, unless ``answer_format`` is ``"last-number"``: then
  such a turn answers with its last whole number (as guess-number reads a guess), if it has one.
The last ``answer:`` (or ``calc:``) of a turn is the one that counts.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from envs.text.games.base import GameError, GameStep

ANSWER = re.compile(r"answer\s*:\s*(-?\d[\d,]*)", re.IGNORECASE)
CALL = re.compile(r"calc\s*:[ \t]*([-+*/^()\d \t]*)", re.IGNORECASE)
WHOLE_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)|-?\d+")
"""A whole number, with commas only as thousands separators (``56,088``; ``4, 8, 12`` is three numbers)."""
AnswerFormat = Literal["tagged", "last-number"]
MAX_EXPRESSION_CHARS = 80
"""Longest expression the calculator evaluates: keeps products of products to numbers Python prints at once."""
BINARY_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}
UNARY_OPERATORS: dict[type, Callable[[int], int]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
QUESTION_OPERATORS: dict[str, Callable[[list[int]], int]] = {"*": math.prod, "+": sum}


class CalculatorError(ValueError):
    """An expression the calculator does not evaluate; the message is the reason shown to the policy."""


@dataclass(frozen=True)
class CalculatorConfig:
    """Answer an arithmetic question, with a calculator to call first."""

    name: ClassVar[str] = "calculator"
    max_turns: ClassVar[int] = 4  # a call, an answer, and room for a retry each
    """The default turn limit of its episodes."""
    operation: str = "*"
    """The question's operation: '*' (a product) or '+' (a sum)."""
    terms: int = 2
    """Numbers in the question."""
    digits: int = 3
    """Digits of each number (each is drawn uniformly from the numbers with exactly this many)."""
    answer_format: AnswerFormat = "tagged"
    """How a turn answers: 'tagged' only with ``answer: N``; 'last-number' also with the last whole number of a turn
    that has no ``calc:`` (SmolLM2-135M writes ``4 + 8 = 12`` but almost never the tags: no tagged success)."""

    def __post_init__(self) -> None:
        if self.operation not in QUESTION_OPERATORS:
            raise GameError(f"calculator operation {self.operation!r} is not one of {', '.join(QUESTION_OPERATORS)}")
        if self.terms < 2 or self.digits < 1:
            raise GameError(f"calculator needs terms >= 2 and digits >= 1, got {self.terms} and {self.digits}")
        if self.answer_format not in get_args(AnswerFormat):
            formats = ", ".join(get_args(AnswerFormat))
            raise GameError(f"calculator answer_format {self.answer_format!r} is not one of {formats}")


def evaluate(expression: str) -> int:
    """The value of an expression of whole numbers, ``+ - *`` and parentheses; a ``CalculatorError`` otherwise."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"it is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise CalculatorError("it is not an expression") from None
    return evaluate_node(tree.body)


def evaluate_node(node: ast.AST) -> int:
    """One node of a parsed expression (see ``evaluate``)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY_OPERATORS:
        return BINARY_OPERATORS[type(node.op)](evaluate_node(node.left), evaluate_node(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY_OPERATORS:
        return UNARY_OPERATORS[type(node.op)](evaluate_node(node.operand))
    raise CalculatorError("it uses something other than whole numbers, + - * and parentheses")


class Calculator:
    """A product (or sum) to answer with ``answer: N``, and a calculator behind ``calc: EXPRESSION``."""

    def __init__(self, config: CalculatorConfig = CalculatorConfig()) -> None:
        self.config = config
        self.numbers: list[int] = []

    @property
    def answer(self) -> int:
        """The exact answer to this episode's question."""
        return QUESTION_OPERATORS[self.config.operation](self.numbers)

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        low, high = 10 ** (self.config.digits - 1), 10**self.config.digits - 1
        self.numbers = [rng.randint(low, high) for _ in range(self.config.terms)]
        question = f" {self.config.operation} ".join(map(str, self.numbers))
        return (
            f"What is {question}? You may use a calculator: write calc: followed by an expression, such as "
            "calc: 12 * 34, and I will reply with its value. When you know the answer, write answer: followed by "
            "the number."
        )

    def step(self, turn_text: str) -> GameStep:
        answers = ANSWER.findall(turn_text)
        calls = CALL.findall(turn_text)
        if not answers and not calls and self.config.answer_format == "last-number":
            answers = WHOLE_NUMBER.findall(turn_text)
        if answers:
            if int(answers[-1].replace(",", "")) == self.answer:
                return GameStep("Correct.", 1.0, True)
            return GameStep(f"Wrong: the answer is {self.answer}.", 0.0, True)
        if not calls:
            return GameStep("Write calc: EXPRESSION to use the calculator, or answer: NUMBER to answer.", 0.0, False)
        expression = calls[-1].strip()
        try:
            return GameStep(f"{expression} = {evaluate(expression)}", 0.0, False)
        except CalculatorError as error:
            return GameStep(f"The calculator cannot compute {expression!r}: {error}.", 0.0, False)
