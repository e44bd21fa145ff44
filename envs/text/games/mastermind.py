"""A small Mastermind: the game draws a code of ``positions`` digits, each from 1 to ``colours`` (repeats allowed),
and answers each guess with how many digits are right and in the right place (exact) and how many more are right but
in the wrong place (partial), the classic black and white pegs. The replies are what make good play possible: 3
positions of 4 colours is 64 codes, and a feedback-driven strategy needs far fewer guesses than trying them.

Turn syntax: the last run of exactly ``positions`` digits from 1 to ``colours``, optionally separated by spaces,
commas or hyphens, written anywhere in the turn is the guess (``"1 2 3"``, ``"123"``, ``"my guess: 1, 2, 3."``); a
longer run of digits (``1234`` with 3 positions) is not a guess. A turn without a guess is answered with the rules and
scores 0. Reward: 1 for the turn that cracks the code (the game is then over); any other turn scores ``peg_reward``
for each digit in the right place beyond the best earlier guess of the episode (0 by default: only cracking scores).
A positive ``peg_reward`` makes the reward arrive per turn, for writing a guess at all and for closing in, the setting
where a critic's per-turn credit has something to assign; an episode's shaping sums to ``peg_reward`` times its best
guess's digits in place, so repeating a guess earns nothing and no play that fails scores as much as cracking (on the
turns that do not crack, potential-based shaping, Ng, Harada and Russell 1999, the best guess so far the potential).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from envs.text.games.base import GameError, GameStep


@dataclass(frozen=True)
class MastermindConfig:
    """Crack a code of digits from exact/partial feedback."""

    name: ClassVar[str] = "mastermind"
    max_turns: ClassVar[int] = 6  # minimax play cracks any of the 64 codes in 4
    """The default turn limit of its episodes."""
    positions: int = 3
    """Digits in the code."""
    colours: int = 4
    """Each digit is from 1 to this (at most 9)."""
    peg_reward: float = 0.0
    """Reward of a turn that does not crack the code, per digit in the right place beyond the episode's best
    earlier guess (0: only cracking scores); below 1 / (positions - 1), so a failed episode scores less than 1."""

    def __post_init__(self) -> None:
        if self.positions < 1 or not 2 <= self.colours <= 9:
            raise GameError(
                f"mastermind needs positions >= 1 and colours from 2 to 9, got {self.positions} and {self.colours}"
            )
        if not (self.peg_reward >= 0 and self.peg_reward * (self.positions - 1) < 1):
            raise GameError(
                f"mastermind needs a peg_reward from 0 to below 1 / (positions - 1) so that only cracking scores 1, "
                f"got {self.peg_reward} with {self.positions} positions"
            )


def feedback(guess: tuple[int, ...], code: tuple[int, ...]) -> tuple[int, int]:
    """(exact, partial): digits right and in the right place, and further digits right but in the wrong place."""
    exact = sum(g == c for g, c in zip(guess, code))
    common = sum((Counter(guess) & Counter(code)).values())
    return exact, common - exact


class Mastermind:
    """Mastermind on digits with exact/partial replies; reward 1 on the turn that cracks the code (and
    ``peg_reward`` per digit in its place beyond the best earlier guess on the others)."""

    def __init__(self, config: MastermindConfig = MastermindConfig()) -> None:
        self.config = config
        digit = f"[1-{config.colours}]"
        self.guess_pattern = re.compile(rf"(?<!\d){digit}(?:[\s,\-]*{digit}){{{config.positions - 1}}}(?!\d)")
        self.code: tuple[int, ...] = ()
        self.best_exact = 0

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        positions, colours = self.config.positions, self.config.colours
        self.code = tuple(rng.randint(1, colours) for _ in range(positions))
        self.best_exact = 0
        example = " ".join(str(1 + i % colours) for i in range(positions))
        return (
            f"I have a secret code of {positions} digits, each from 1 to {colours} (digits may repeat). "
            f"Guess it: reply with {positions} digits such as {example}. I will tell you how many are right and in "
            "the right place, and how many are right but in the wrong place."
        )

    def step(self, turn_text: str) -> GameStep:
        guesses = self.guess_pattern.findall(turn_text)
        if not guesses:
            positions, colours = self.config.positions, self.config.colours
            return GameStep(f"Reply with {positions} digits, each from 1 to {colours}.", 0.0, False)
        guess = tuple(int(d) for d in re.findall(r"\d", guesses[-1]))
        shown = " ".join(map(str, guess))
        exact, partial = feedback(guess, self.code)
        if exact == self.config.positions:
            return GameStep(f"{shown}: all right, you cracked the code!", 1.0, True)
        reply = f"{shown}: {exact} right in the right place, {partial} right in the wrong place."
        closer, self.best_exact = max(exact - self.best_exact, 0), max(exact, self.best_exact)
        return GameStep(reply, self.config.peg_reward * closer, False)
