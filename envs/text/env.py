"""``TextGenEnv``: token-level text generation as a Gymnasium MDP.

One episode writes one completion. The observation is the prompt and the tokens generated so far
(fixed-size padded ids and an attention mask); an action is the next token id; the reward is the
task's score of the completion when the episode ends (EOS or the token limit), 0 before. The env
runs no model: the agent chooses every token. Training uses the batched path in
``agents/text_rollout.py``, which samples with a key/value cache and gives the same episodes.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "ppo/TextGen-v0"


class TextGenEnv(gym.Env):
    """Generate one completion per episode, one token per step.

    ``score(prompts, completions) -> list[float]`` gives the terminal reward (a task's scorer, for
    example ``envs.text.tasks`` ``checked_scores``-wrapped ``task.score``). ``prompts`` are the texts
    episodes start from (one is drawn with the env's RNG, or ``reset(options={"prompt": ...})``).
    The tokenizer is only read, never modified.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        tokenizer,
        prompts: list[str],
        score,
        max_new_tokens: int = 24,
        max_prompt_tokens: int = 32,
        render_mode: str | None = None,
    ) -> None:
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
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
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
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError("an empty prompt cannot start an episode")
        if len(ids) > self.max_prompt_tokens:
            raise ValueError(
                f"prompt of {len(ids)} tokens is longer than max_prompt_tokens={self.max_prompt_tokens}; "
                "shorten it or raise the limit"
            )
        return ids

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
            completion = self.tokenizer.decode([t for t in generated if t != self.eos_id], skip_special_tokens=True)
            reward = float(self.score([self._prompt], [completion])[0])
            if not math.isfinite(reward):
                raise ValueError(f"the reward function returned {reward} for completion {completion!r}")
            info = {"completion": completion, "ended_with_eos": token == self.eos_id}
        return self._observation(), reward, terminated, False, info

    def render(self):
        if self.render_mode == "ansi":
            return self.tokenizer.decode(self._ids)
        return None


def register() -> None:
    """Register ``ppo/TextGen-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="envs.text.env:TextGenEnv", disable_env_checker=False)
