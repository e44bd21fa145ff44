"""``TextGenEnv``: token-level text generation as a Gymnasium MDP.

One episode writes one completion. The observation is the prompt and the tokens generated so far
(fixed-size padded ids and an attention mask); an action is the next token id; the reward is the
task's score of the completion when the episode ends (EOS or the token limit), 0 before. The env
runs no model: the agent chooses every token. Training uses the batched path in
``agents/text/rollout.py``, which samples with a key/value cache and gives the same episodes.

``gymnasium.make("ppo/TextGen-v0")`` builds it from the embedded defaults (the default model's tokenizer, the
sentiment task's training prompts and reward); ``model=`` and ``task=`` name others, and ``tokenizer=``,
``prompts=`` and ``score=`` pass objects for programmatic use.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.text.models import DEFAULT_MODEL, load_tokenizer
from envs.text.tasks import Task, checked_scores, make_task
from envs.text.tokens import decode_completion, encode_prompt, pad_token_id

ENV_ID = "ppo/TextGen-v0"
DEFAULT_TASK = "sentiment"
"""The task ``ppo train text`` trains on by default, and so the env's."""


class TextGenEnv(gym.Env):
    """Generate one completion per episode, one token per step.

    By name: ``model`` (a ``--model`` spec: ``tiny``, a directory, a GGUF file; only its tokenizer is loaded, since
    the vocabulary is the action space), ``task`` (a task name such as ``sentiment`` or ``arithmetic``) with
    ``task_options`` (its config fields) and ``split`` (``train`` or ``eval`` prompts).
    By object, each overriding its named counterpart: ``tokenizer``; ``prompts``, the texts episodes start from
    (one is drawn with the env's RNG, or ``reset(options={"prompt": ...})``); ``score(prompts, completions) ->
    list[float]``, the terminal reward. The tokenizer is only read, never modified.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        tokenizer=None,
        prompts: list[str] | None = None,
        score=None,
        model: str = DEFAULT_MODEL,
        task: str = DEFAULT_TASK,
        task_options: dict[str, Any] | None = None,
        split: str = "train",
        max_new_tokens: int = 24,
        max_prompt_tokens: int = 64,
        render_mode: str | None = None,
    ) -> None:
        if tokenizer is None:
            tokenizer = load_tokenizer(model)
        if prompts is None or score is None:
            named_task = make_task(task, **(task_options or {}))
            prompts = named_task.prompts(split) if prompts is None else prompts
            score = score or functools.partial(task_rewards, named_task)
        if not prompts:
            raise ValueError("TextGenEnv needs at least one prompt")
        if max_new_tokens < 1 or max_prompt_tokens < 1:
            raise ValueError(
                f"max_new_tokens and max_prompt_tokens must be positive, got {max_new_tokens} and {max_prompt_tokens}"
            )
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; episodes could never end early")
        self.tokenizer = tokenizer
        self.prompts = list(prompts)
        self.score = score
        self.max_new_tokens = max_new_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.render_mode = render_mode
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = pad_token_id(tokenizer)
        length = max_prompt_tokens + max_new_tokens
        vocab = len(tokenizer)
        self.observation_space = spaces.Dict(
            {
                "input_ids": spaces.Box(0, vocab - 1, shape=(length,), dtype=np.int64),
                "attention_mask": spaces.Box(0, 1, shape=(length,), dtype=np.int64),
            }
        )
        self.action_space = spaces.Discrete(vocab)
        self._prompt = ""
        self._ids: list[int] = []
        self._num_prompt_tokens = 0

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of ``prompt`` (no special tokens added); a one-line error if it does not fit."""
        limit = self.max_prompt_tokens
        return encode_prompt(self.tokenizer, prompt, limit, f"max_prompt_tokens={limit}")

    def _observation(self) -> dict[str, np.ndarray]:
        length = self.max_prompt_tokens + self.max_new_tokens
        ids = np.full(length, self.pad_id, dtype=np.int64)
        mask = np.zeros(length, dtype=np.int64)
        ids[: len(self._ids)] = self._ids
        mask[: len(self._ids)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    @property
    def completion_ids(self) -> list[int]:
        """Tokens generated so far in this episode."""
        return self._ids[self._num_prompt_tokens :]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._prompt = (options or {}).get("prompt") or self.prompts[int(self.np_random.integers(len(self.prompts)))]
        self._ids = self.encode_prompt(self._prompt)
        self._num_prompt_tokens = len(self._ids)
        return self._observation(), {"prompt": self._prompt}

    def step(self, action):
        if not self._ids:
            raise RuntimeError("call reset() before step()")
        token = int(action)
        self._ids.append(token)
        generated = self.completion_ids
        terminated = token == self.eos_id or len(generated) >= self.max_new_tokens
        reward, info = 0.0, {}
        if terminated:
            completion = decode_completion(self.tokenizer, generated)
            reward = float(self.score([self._prompt], [completion])[0])
            if not math.isfinite(reward):
                raise ValueError(f"the reward function returned {reward} for completion {completion!r}")
            info = {"completion": completion, "ended_with_eos": token == self.eos_id}
        return self._observation(), reward, terminated, False, info

    def render(self):
        if self.render_mode == "ansi":
            return self.tokenizer.decode(self._ids)
        return None


def task_rewards(task: Task, prompts: list[str], completions: list[str]) -> list[float]:
    """The task's training rewards, checked (a raising or non-finite reward is a one-line ``RewardError``)."""
    return checked_scores(task, prompts, completions).rewards


def register() -> None:
    """Register ``ppo/TextGen-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="envs.text.env:TextGenEnv", disable_env_checker=False)
