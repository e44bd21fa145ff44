"""Games for the multi-turn text environment: the ``Game`` protocol and its checked calls (``base``), three shipped
games, pure Python, offline and deterministic from the episode seed (``guess_number``, ``mastermind``,
``calculator``), ``GAME_CONFIGS``, the one table of game names, and ``make_game``, which builds a shipped game by name
or a user's game from ``path/to/file.py:ClassName``.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from envs.text.games.base import (
    Game,
    GameError,
    GameStep,
    checked_reset,
    checked_step,
    game_name,
    load_game_class,
    one_line,
)
from envs.text.games.calculator import Calculator, CalculatorConfig
from envs.text.games.guess_number import GuessNumber, GuessNumberConfig
from envs.text.games.mastermind import Mastermind, MastermindConfig

GAME_CONFIGS: dict[str, type] = {cls.name: cls for cls in (GuessNumberConfig, MastermindConfig, CalculatorConfig)}
"""Every shipped game's config class under the game's name."""
GAME_CLASSES: dict[type, type] = {
    GuessNumberConfig: GuessNumber,
    MastermindConfig: Mastermind,
    CalculatorConfig: Calculator,
}
"""The game class each config class builds."""


def make_game(spec: str, options: dict[str, Any] | None = None) -> Game:
    """A shipped game by name (``make_game("guess-number", {"high": 50})``, ``options`` its config fields) or a
    user's class from ``path/to/file.py:ClassName`` / ``module:ClassName``, called with ``options`` as keywords.
    Every way this can fail is a one-line ``GameError``."""
    options = dict(options or {})
    if spec in GAME_CONFIGS:
        config_class = GAME_CONFIGS[spec]
        field_names = [f.name for f in fields(config_class)]
        unknown = sorted(set(options) - set(field_names))
        if unknown:
            raise GameError(
                f"the {spec} game has no option {', '.join(map(repr, unknown))}; its options: {', '.join(field_names)}"
            )
        return GAME_CLASSES[config_class](config_class(**options))
    if ":" not in spec:
        raise GameError(
            f"unknown game {spec!r}; known games: {', '.join(GAME_CONFIGS)}, or 'path/to/file.py:ClassName'"
        )
    game_class = load_game_class(spec)
    try:
        return game_class(**options)
    except Exception as error:
        raise GameError(
            f"building game {game_class.__name__} from {spec!r} raised {type(error).__name__}: {one_line(error)}"
        ) from error


__all__ = [
    "GAME_CLASSES",
    "GAME_CONFIGS",
    "Calculator",
    "CalculatorConfig",
    "Game",
    "GameError",
    "GameStep",
    "GuessNumber",
    "GuessNumberConfig",
    "Mastermind",
    "MastermindConfig",
    "checked_reset",
    "checked_step",
    "game_name",
    "load_game_class",
    "make_game",
]
