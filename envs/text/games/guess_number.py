"""Guess-the-number: the game draws a whole number from 1 to ``high`` and answers each guess with "too low" or "too
high" until the policy names it. The turn limit of the environment sets the horizon; bisection needs
``ceil(log2(high + 1))`` guesses, so ``high`` sets how hard a limit is.

Turn syntax: the last whole number written anywhere in the turn is the guess (``"I guess 7."``, ``"7"``,
``"Is it 3? No, 7"`` all guess 7). A turn without a number, or with one outside 1..``high``, is answered with the rules
and scores 0. Reward: 1 for the turn that names the number (the game is then over), 0 for every other turn.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import ClassVar

from envs.text.games.base import GameError, GameStep

INTEGER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class GuessNumberConfig:
    """Guess a whole number from 1 to ``high`` from higher/lower replies."""

    name: ClassVar[str] = "guess-number"
    max_turns: ClassVar[int] = 6  # bisection of 1..20 needs 5 guesses
    """The default turn limit of its episodes."""
    high: int = 20
    """The largest number the game may draw (the smallest is 1)."""

    def __post_init__(self) -> None:
        if self.high < 2:
            raise GameError(f"guess-number needs high >= 2 (a range with something to guess), got {self.high}")


class GuessNumber:
    """Guess-the-number with higher/lower replies; reward 1 on the turn that names the number."""

    def __init__(self, config: GuessNumberConfig = GuessNumberConfig()) -> None:
        self.config = config
        self.target = 0

    def reset(self, seed: int) -> str:
        self.target = random.Random(seed).randint(1, self.config.high)
        return (
            f"I am thinking of a whole number from 1 to {self.config.high}. Guess it: reply with one number, "
            "and I will tell you whether my number is higher or lower."
        )

    def step(self, turn_text: str) -> GameStep:
        high = self.config.high
        numbers = INTEGER.findall(turn_text)
        if not numbers:
            return GameStep(f"Reply with one whole number from 1 to {high}.", 0.0, False)
        guess = int(numbers[-1])
        if not 1 <= guess <= high:
            return GameStep(f"{guess} is not between 1 and {high}. Guess again.", 0.0, False)
        if guess < self.target:
            return GameStep(f"{guess} is too low. My number is higher.", 0.0, False)
        if guess > self.target:
            return GameStep(f"{guess} is too high. My number is lower.", 0.0, False)
        return GameStep(f"{guess} is right!", 1.0, True)
