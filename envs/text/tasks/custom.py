"""The custom task: your prompts and your reward. Prompts are read from a .txt file (one per non-blank line) or a
.jsonl file (one ``{"prompt": ...}`` object per line), with an optional separate eval file; the reward is the
function named by ``module:function`` or ``path/to/file.py:function``, called as ``function(prompts, completions)``
and expected to return one number per completion. Every way these files or names can be wrong is a one-line
``TaskError``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from envs.text.tasks.base import RewardError, TaskError, TaskScores, check_split

RewardFunction = Callable[[list[str], list[str]], Sequence[float]]


@dataclass(frozen=True)
class CustomTaskConfig:
    """Your prompts and your reward function."""

    name: ClassVar[str] = "custom"
    prompts_file: Path
    """Training prompts: a .txt file (one prompt per non-empty line) or .jsonl (objects with a "prompt" field)."""
    reward: str
    """Reward 'module:function' or 'path/to/file.py:function', called as function(prompts, completions) -> numbers."""
    eval_prompts_file: Path | None = None
    """Evaluation prompts in the same formats; default: the training prompts."""


def read_prompts(path: Path) -> list[str]:
    """Prompts from a .txt file (each non-blank line, newline removed) or a .jsonl file (each object's "prompt")."""
    path = Path(path)
    if path.suffix not in (".txt", ".jsonl"):
        raise TaskError(
            f'prompts file {path} must end in .txt (one prompt per line) or .jsonl (one {{"prompt": ...}} per line)'
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TaskError(f"prompts file {path} does not exist; pass the path of a .txt or .jsonl file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TaskError(
            f"cannot read prompts file {path} ({type(error).__name__}: {error}); pass a readable UTF-8 file"
        ) from None
    if path.suffix == ".txt":
        prompts = [line for line in lines if line.strip()]
    else:
        prompts = [jsonl_prompt(line, path, number) for number, line in enumerate(lines, start=1) if line.strip()]
    if not prompts:
        raise TaskError(f"prompts file {path} holds no prompts; write at least one")
    return prompts


def jsonl_prompt(line: str, path: Path, number: int) -> str:
    """The "prompt" string of one jsonl line."""
    try:
        record = json.loads(line)
    except ValueError as error:
        raise TaskError(f"{path}:{number} is not valid JSON ({error}); write one JSON object per line") from None
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str) or not record["prompt"]:
        raise TaskError(f'{path}:{number} has no "prompt" string; write objects like {{"prompt": "Once upon a time"}}')
    return record["prompt"]


def load_reward_function(spec: str) -> RewardFunction:
    """The function named by ``module:function`` (an importable module) or ``path/to/file.py:function``."""
    module_name, colon, function_name = spec.rpartition(":")
    if not colon or not module_name or not function_name:
        raise TaskError(f"reward {spec!r} must look like 'module:function' or 'path/to/file.py:function'")
    try:
        if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
            module = import_file(Path(module_name))
        else:
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise TaskError(
            f"cannot import reward module {module_name!r} ({error}); give an importable module or a path to a .py file"
        ) from None
    except TaskError:
        raise
    except Exception as error:  # noqa: BLE001 - importing a user's module may raise anything
        message = " ".join(str(error).split())
        raise TaskError(
            f"importing reward module {module_name!r} failed with {type(error).__name__}: {message}"
        ) from None
    if not hasattr(module, function_name):
        raise TaskError(
            f"reward module {module_name!r} has no function {function_name!r}; check the name after the ':'"
        )
    function = getattr(module, function_name)
    if not callable(function):
        raise TaskError(
            f"reward {spec!r} is a {type(function).__name__}, not a function; point it at fn(prompts, completions)"
        )
    return function


def import_file(path: Path):
    """Import a Python source file as a module (registered under a name derived from its absolute path)."""
    if not path.is_file():
        raise TaskError(f"reward file {path} does not exist; pass the path of a .py file")
    resolved = path.resolve()
    name = f"ppo_custom_reward_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so dataclasses and pickling inside the file can find their module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class CustomTask:
    """Prompts read from a file; ``reward = function(prompts, completions)``, one number per completion."""

    name = CustomTaskConfig.name

    def __init__(self, config: CustomTaskConfig) -> None:
        self.config = config
        train = read_prompts(config.prompts_file)
        held_out = train if config.eval_prompts_file is None else read_prompts(config.eval_prompts_file)
        self.split_prompts = {"train": train, "eval": held_out}
        self.reward_function = load_reward_function(config.reward)

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return list(self.split_prompts[split])

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        result = self.reward_function(list(prompts), list(completions))
        try:
            rewards = [float(reward) for reward in result]
        except (TypeError, ValueError) as error:
            raise RewardError(
                f"the custom reward {self.config.reward} returned {type(result).__name__} ({error}); "
                "return a sequence of numbers, one per completion"
            ) from None
        return TaskScores(rewards=rewards, metrics={})
