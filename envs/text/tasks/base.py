"""What every text task shares: the ``Task`` protocol (``prompts("train")`` and ``prompts("eval")`` hand out
prompts; ``score(prompts, completions) -> TaskScores`` gives one training reward per completion plus named
per-completion diagnostics; the reference-KL penalty is not a task's business, the trainer adds it), the
``TaskError`` and ``RewardError`` tasks raise, ``checked_scores`` (which the trainer calls rather than ``task.score``
so that a failing or non-finite reward stops the run with one clear line before anything is written), the split
check, and where offline packages (``installed_package_folder``) and caches (``default_cache_dir``) are found.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import NamedTuple, Protocol

SPLITS = ("train", "eval")


class TaskError(ValueError):
    """A task cannot be built from the given settings or files, or was asked for something it does not have."""


class RewardError(ValueError):
    """A reward function raised, or returned rewards that cannot be trained on."""


class TaskScores(NamedTuple):
    """What a task says about a batch of completions."""

    rewards: list[float]
    """The training reward, one per completion."""
    metrics: dict[str, list[float]]
    """Extra per-completion diagnostics logged beside the reward (e.g. "gold_lexicon", "accuracy")."""


class Task(Protocol):
    """A source of prompts and a way to score completions of them."""

    name: str

    def prompts(self, split: str) -> list[str]:
        """The non-empty list of prompts of ``split`` ("train" or "eval"), the same on every call."""
        ...

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        """Rewards and diagnostics for ``completions[i]`` written after ``prompts[i]``."""
        ...


def checked_scores(task: Task, prompts: list[str], completions: list[str]) -> TaskScores:
    """``task.score(prompts, completions)``, or a ``RewardError`` with one line saying what is wrong.

    Rejects a reward function that raises, returns a number of rewards other than one per
    completion, or returns NaN / infinity, so a bad reward never reaches an update or a checkpoint.
    """
    if len(prompts) != len(completions):
        raise TaskError(
            f"got {len(prompts)} prompts but {len(completions)} completions; pass one completion per prompt"
        )
    try:
        scores = task.score(prompts, completions)
    except RewardError:
        raise
    except Exception as error:
        message = " ".join(str(error).split())
        raise RewardError(
            f"the {task.name} task's reward raised {type(error).__name__}: {message}; fix the reward function"
        ) from error
    if len(scores.rewards) != len(completions):
        raise RewardError(
            f"the {task.name} task's reward returned {len(scores.rewards)} rewards for {len(completions)} completions; "
            "return exactly one number per completion"
        )
    not_finite = [i for i, reward in enumerate(scores.rewards) if not math.isfinite(reward)]
    if not_finite:
        shown = ", ".join(f"{i} ({scores.rewards[i]})" for i in not_finite[:5])
        shown += " ..." if len(not_finite) > 5 else ""
        raise RewardError(
            f"the {task.name} task's reward is not finite for {len(not_finite)} of {len(completions)} completions, "
            f"at index {shown}; make the reward function return finite numbers"
        )
    for metric, values in scores.metrics.items():
        if len(values) != len(completions):
            raise RewardError(
                f"the {task.name} task's metric {metric!r} has {len(values)} values for {len(completions)} completions"
            )
    return scores


def check_split(split: str) -> None:
    """Raise a ``TaskError`` unless ``split`` is "train" or "eval"."""
    if split not in SPLITS:
        raise TaskError(f"unknown prompt split {split!r}; use 'train' or 'eval'")


def installed_package_folder(module: str, distribution: str) -> Path:
    """The folder of an installed package, found without importing it (importing may pull heavy dependencies)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise TaskError(
            f"package {distribution!r} is not installed; install it with: pip install --no-deps {distribution}"
        )
    return Path(spec.submodule_search_locations[0])


def default_cache_dir() -> Path:
    """``$PPO_CACHE_DIR`` if set, else ``~/.cache/ppo-two-worlds``."""
    return Path(os.environ.get("PPO_CACHE_DIR") or Path.home() / ".cache" / "ppo-two-worlds")


def settings_fingerprint(settings: dict) -> str:
    """The sha256 of ``settings`` as sorted JSON: names a cached artefact by everything it depends on."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def read_fingerprinted(cache_file: Path, fingerprint: str) -> dict | None:
    """The cached JSON object if the file exists, parses and carries ``fingerprint``; else None."""
    try:
        cached = json.loads(Path(cache_file).read_text())
    except (OSError, ValueError):
        return None
    return cached if isinstance(cached, dict) and cached.get("fingerprint") == fingerprint else None


def write_atomically(cache_file: Path, cached: dict) -> None:
    """Write ``cached`` as JSON through a temporary file of this process's own, then rename it into place:
    concurrent writers never share a file and readers never see half of one."""
    cache_file = Path(cache_file)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(cached, indent=1))
    os.replace(partial, cache_file)
