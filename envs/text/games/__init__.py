"""Games for the multi-turn text environment: the ``Game`` protocol and its checked calls (``base``), three shipped
games, pure Python, offline and deterministic from the episode seed (``guess_number``, ``mastermind``,
``calculator``), ``GAME_CONFIGS``, the one table of game names, and ``make_game``, which builds a shipped game by name
or a user's game from ``path/to/file.py:ClassName``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

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


@dataclass(frozen=True)
class CustomGameConfig:
    """Your own game: a class with ``reset(seed) -> opening text`` and ``step(turn_text) -> (reply, reward, done)``,
    built with keyword options (see docs/text_env.md, "Bring your own game")."""

    name: ClassVar[str] = "custom-game"
    max_turns: ClassVar[int] = 6
    """The default turn limit of its episodes."""
    env_file: str = ""
    """The game class: path/to/file.py:ClassName or module:ClassName."""
    game_options: str = "{}"
    """A JSON object of keyword arguments the class is built with, e.g. '{"high": 50}'."""

    def __post_init__(self) -> None:
        if ":" not in self.env_file:
            raise GameError(
                f"custom-game needs --env-file path/to/file.py:ClassName (or module:ClassName), got {self.env_file!r}"
            )
        try:
            options = json.loads(self.game_options)
        except json.JSONDecodeError as error:
            raise GameError(f"--game-options {self.game_options!r} is not JSON ({error}); give a JSON object") from None
        if not isinstance(options, dict):
            raise GameError(f"--game-options {self.game_options!r} is not a JSON object; give one, e.g. '{{}}'")


TRAINING_SEEDS = 10**9
"""Training episodes draw their game seeds below this; held-out episode ``i`` is played from seed
``TRAINING_SEEDS + i``, so no held-out seed is ever trained on (a small game's states still recur across seeds)."""

GAME_TASK_CONFIGS: dict[str, type] = {**GAME_CONFIGS, CustomGameConfig.name: CustomGameConfig}
"""What ``ppo train text`` takes as a game: every shipped game's config and a user's game, under their names."""
GameTaskConfig = GuessNumberConfig | MastermindConfig | CalculatorConfig | CustomGameConfig


def is_game_config(config: object) -> bool:
    """Whether a text run's task config is a multi-turn game."""
    return type(config) in GAME_TASK_CONFIGS.values()


def game_factory(config: GameTaskConfig) -> Callable[[], Game]:
    """A function that builds a fresh game object of ``config`` each call (every row of a batch plays its own); the
    first one is built here, so a file, class or option that does not work fails before training starts."""
    if isinstance(config, CustomGameConfig):
        options = json.loads(config.game_options)

        def build() -> Game:
            return make_game(config.env_file, options)

    else:

        def build() -> Game:
            return GAME_CLASSES[type(config)](config)

    game = build()
    if not isinstance(game, Game):
        raise GameError(f"{game_name(game)} is not a Game: give it reset(seed) and step(turn_text) methods")
    return build


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
    "GAME_TASK_CONFIGS",
    "TRAINING_SEEDS",
    "Calculator",
    "CalculatorConfig",
    "CustomGameConfig",
    "Game",
    "GameError",
    "GameStep",
    "GameTaskConfig",
    "GuessNumber",
    "GuessNumberConfig",
    "Mastermind",
    "MastermindConfig",
    "checked_reset",
    "checked_step",
    "game_factory",
    "game_name",
    "is_game_config",
    "load_game_class",
    "make_game",
]
