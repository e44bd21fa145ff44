"""What every multi-turn game shares: the ``Game`` protocol (``reset(seed) -> opening text``, ``step(turn text) ->
(reply text, reward, done)``), the ``GameStep`` record a step returns, the ``GameError`` every failure is, the checked
calls the environment makes instead of calling a game directly (a game that raises, returns a non-finite reward or an
unusable reply stops the episode with one line naming the game class, the episode seed and the turn), and the loader
of a user's game class from ``path/to/file.py:ClassName`` or ``module:ClassName``.
"""

from __future__ import annotations

import importlib
import math
import os
from numbers import Real
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from envs.text.tasks.custom import import_file


class GameError(ValueError):
    """A game cannot be built or loaded, or one of its calls failed or returned something unusable."""


class GameStep(NamedTuple):
    """What a game says after one of the policy's turns; a plain ``(reply, reward, done)`` tuple works as well."""

    reply: str
    """Text appended to the dialogue after the turn (tokenized once and never re-tokenized)."""
    reward: float
    """This turn's reward (finite)."""
    done: bool
    """True when the game is over, solved or failed; the episode then terminates."""


@runtime_checkable
class Game(Protocol):
    """A text game the policy plays over several turns. Deterministic from the seed, so episodes can be replayed."""

    def reset(self, seed: int) -> str:
        """Start the episode of ``seed``; the opening text the policy reads before its first turn."""
        ...

    def step(self, turn_text: str) -> GameStep | tuple[str, float, bool]:
        """Read the policy's decoded turn (its end-of-turn token dropped); the reply, the turn's reward and whether
        the game is over."""
        ...


def one_line(error: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(error).split())


def game_name(game: object) -> str:
    """How errors name a game: its class."""
    return type(game).__name__


def checked_reset(game: Game, seed: int) -> str:
    """``game.reset(seed)``, or a ``GameError`` with one line if it raises or its opening is not non-empty text."""
    where = f"game {game_name(game)} (episode seed {seed}, at reset)"
    try:
        opening = game.reset(seed)
    except Exception as error:
        raise GameError(f"{where} raised {type(error).__name__}: {one_line(error)}; fix the game's reset") from error
    if not isinstance(opening, str) or not opening:
        raise GameError(f"{where} returned {opening!r} as its opening; return non-empty text (a str)")
    return opening


def checked_step(game: Game, turn_text: str, seed: int, turn: int) -> GameStep:
    """``game.step(turn_text)`` as a ``GameStep``, or a ``GameError`` with one line naming the game class, the
    episode ``seed`` and the ``turn`` (1 for the first) if it raises, does not return a ``(reply, reward, done)``
    tuple, replies with something other than a str, gives a reward that is not a finite number or a ``done`` that is
    not a bool."""
    where = f"game {game_name(game)} (episode seed {seed}, turn {turn})"
    try:
        result = game.step(turn_text)
    except Exception as error:
        raise GameError(f"{where} raised {type(error).__name__}: {one_line(error)}; fix the game's step") from error
    if not isinstance(result, tuple) or len(result) != 3:
        raise GameError(
            f"{where} returned {type(result).__name__}, not a (reply, reward, done) tuple; return a GameStep"
        )
    reply, reward, done = result
    if not isinstance(reply, str):
        raise GameError(f"{where} replied with {reply!r}, not text; return the reply as a str")
    if isinstance(reward, bool) or not isinstance(reward, Real) or not math.isfinite(float(reward)):
        raise GameError(f"{where} returned the reward {reward!r}; return a finite number")
    if not isinstance(done, bool | np.bool_):
        raise GameError(f"{where} returned done={done!r}, not a bool; return True or False")
    return GameStep(reply, float(reward), bool(done))


def load_game_class(spec: str) -> type:
    """The class named by ``path/to/file.py:ClassName`` or ``module:ClassName``, checked to have ``reset`` and
    ``step`` methods; every way the spec can be wrong is a one-line ``GameError``."""
    module_name, colon, class_name = spec.rpartition(":")
    if not colon or not module_name or not class_name:
        raise GameError(f"game {spec!r} must look like 'path/to/file.py:ClassName' or 'module:ClassName'")
    is_file = module_name.endswith(".py") or os.sep in module_name or "/" in module_name
    if is_file and not Path(module_name).is_file():
        raise GameError(f"game file {module_name} does not exist; pass the path of a .py file")
    where = f"game file {module_name}" if is_file else f"game module {module_name!r}"
    try:
        module = import_file(Path(module_name)) if is_file else importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise GameError(f"cannot import {where} ({error}); give an importable module or a path to a .py file") from None
    except Exception as error:  # noqa: BLE001 - importing a user's module may raise anything
        raise GameError(f"importing {where} failed with {type(error).__name__}: {one_line(error)}") from None
    if not hasattr(module, class_name):
        raise GameError(f"{where} has no class {class_name!r}; check the name after the ':'")
    game_class = getattr(module, class_name)
    if not isinstance(game_class, type) or not all(callable(getattr(game_class, m, None)) for m in ("reset", "step")):
        raise GameError(
            f"{class_name!r} in {where} is not a Game class; give a class with reset(seed) -> str and "
            "step(turn_text) -> (reply, reward, done)"
        )
    return game_class
