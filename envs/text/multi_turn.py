"""``MultiTurnTextEnv``: a multi-turn game played token by token, as a Gymnasium MDP.

An action is one token. A turn of the policy ends at its end-of-turn token (the tokenizer's EOS, which is the chat
end-of-turn token of instruction-tuned models such as SmolLM2's ``<|im_end|>``) or at ``max_turn_tokens``. The game
then reads the turn's decoded text and answers with a reply, that turn's reward and whether it is over; the reply is
tokenized once and appended to the token history, which is never re-tokenized, so the tokens the policy saw are the
tokens it is trained on. The episode terminates when the game is over or after ``max_turns`` turns, and is truncated
when the next token, or the reply and one more token, would not fit in ``max_context_tokens``.

``gymnasium.make("ppo/GuessNumber-v0")`` (and ``ppo/Mastermind-v0``, ``ppo/Calculator-v0``) builds one on its
defaults, the default model's tokenizer and its chat template; ``ppo/MultiTurn-v0`` takes ``game=`` for any game,
a user's ``path/to/file.py:ClassName`` included. See docs/text_env.md, "Multi-turn environments".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.text.games import (
    CalculatorConfig,
    Game,
    GameError,
    GuessNumberConfig,
    MastermindConfig,
    checked_reset,
    checked_step,
    game_name,
    make_game,
)
from envs.text.models import DEFAULT_MODEL, load_tokenizer
from envs.text.tokens import decode_completion, pad_token_id

GAME_SEEDS = 2**31
"""Game seeds drawn by ``reset`` are below this (any int a game's ``random.Random(seed)`` takes would do)."""
PLAIN_SEPARATOR = "\n"
"""Without a chat template the opening and each reply are lines of their own: this ends the opening and comes before
and after each reply."""
ENV_IDS = {
    "ppo/GuessNumber-v0": {"game": "guess-number", "max_turns": GuessNumberConfig.max_turns},
    "ppo/Mastermind-v0": {"game": "mastermind", "max_turns": MastermindConfig.max_turns},
    "ppo/Calculator-v0": {"game": "calculator", "max_turns": CalculatorConfig.max_turns},
    "ppo/MultiTurn-v0": {},
}
"""Each registered id and the keyword defaults it adds to ``MultiTurnTextEnv``'s own."""


class TokenRole(IntEnum):
    """Whose a position of the observation is, in ``info["roles"]``."""

    PADDING = 0
    PROMPT = 1
    """The game's opening (with the chat template's system and user wrapping and the assistant header)."""
    POLICY = 2
    """A token the policy chose: the only positions that are actions."""
    ENVIRONMENT = 3
    """A reply of the game (with the chat template's wrapping and the next assistant header)."""


@dataclass(frozen=True)
class TurnLayout:
    """How text around the policy's turns is written: plain, or in the tokenizer's chat template."""

    opening_prefix: str
    """Before the game's opening text."""
    opening_suffix: str
    """After the opening text, up to where the policy's first turn starts."""
    turn_close: str
    """What closes an assistant turn after its text; the part the policy's own end-of-turn token already wrote is
    left out, so the environment writes it only for a turn cut at ``max_turn_tokens``."""
    reply_prefix: str
    """Before a reply's text."""
    reply_suffix: str
    """After a reply's text, up to where the policy's next turn starts."""

    def opening(self, text: str) -> str:
        """The prompt's text for the game's opening ``text``."""
        return f"{self.opening_prefix}{text}{self.opening_suffix}"

    def reply(self, text: str, end_of_turn_text: str | None) -> str:
        """What follows a turn, for the game's reply ``text``; ``end_of_turn_text`` is the text of the turn's last
        token if it was the end-of-turn token (then not written again), else None."""
        close = self.turn_close
        if end_of_turn_text is not None and close.startswith(end_of_turn_text):
            close = close[len(end_of_turn_text) :]
        return f"{close}{self.reply_prefix}{text}{self.reply_suffix}"


PLAIN_LAYOUT = TurnLayout("", PLAIN_SEPARATOR, "", PLAIN_SEPARATOR, PLAIN_SEPARATOR)
"""No template: the opening and each reply on lines of their own."""

OPENING_MARK, TURN_MARK, REPLY_MARK = "<<opening-7f3a>>", "<<turn-7f3a>>", "<<reply-7f3a>>"
"""Placeholders rendered through a chat template to read off its wrapping; no real text contains them."""


def split_at(text: str, mark: str) -> tuple[str, str]:
    """The text before and after the single occurrence of ``mark``."""
    if text.count(mark) != 1:
        raise ValueError("the chat template does not copy a message's text once; pass chat_template=False")
    before, _, after = text.partition(mark)
    return before, after


def chat_layout(tokenizer) -> TurnLayout:
    """The tokenizer's chat template's wrapping: the opening as a user turn followed by the assistant header, each
    reply as the close of the assistant turn, a user turn and the next assistant header."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; pass chat_template=False")

    def render(messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    opening_prefix, opening_suffix = split_at(render([{"role": "user", "content": OPENING_MARK}], True), OPENING_MARK)
    dialogue = [{"role": "user", "content": OPENING_MARK}, {"role": "assistant", "content": TURN_MARK}]
    before = render(dialogue, False)
    after = render([*dialogue, {"role": "user", "content": REPLY_MARK}], True)
    if not after.startswith(before):
        raise ValueError("the chat template rewrites earlier turns when one is added; pass chat_template=False")
    reply_prefix, reply_suffix = split_at(after[len(before) :], REPLY_MARK)
    return TurnLayout(opening_prefix, opening_suffix, split_at(before, TURN_MARK)[1], reply_prefix, reply_suffix)


@functools.cache
def shared_tokenizer(model: str):
    """``load_tokenizer(model)``, loaded once per process: the environment only reads it, so copies share it."""
    return load_tokenizer(model)


class MultiTurnTextEnv(gym.Env):
    """Play a ``Game`` over several turns, one token per step.

    ``game``: a shipped game's name (``guess-number``, ``mastermind``, ``calculator``) with ``game_options`` its config
    fields, ``path/to/file.py:ClassName`` (or ``module:ClassName``) of your own class, built with ``game_options`` as
    keywords, or a ``Game`` object. ``model``: a ``--model`` spec whose tokenizer is loaded (the env runs no model), or
    ``tokenizer`` the object itself, only read. ``chat_template``: wrap the opening and replies in the tokenizer's
    chat template (None: when it has one).

    Observation: ``input_ids`` and ``attention_mask``, each ``(max_context_tokens,)`` int64, right-padded. Every
    ``info`` has ``roles`` (``(max_context_tokens,)`` int8, a ``TokenRole`` per position), ``turns`` (turns completed),
    ``turn_rewards`` (one per completed turn) and ``game_seed``; the step that ends a turn adds ``turn_text`` (the
    decoded turn the game read) and ``reply``. ``reset(options={"game_seed": k})`` plays episode ``k`` of the game;
    otherwise a seed is drawn with the env's RNG.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        game: str | Game = "guess-number",
        game_options: dict[str, Any] | None = None,
        tokenizer=None,
        model: str = DEFAULT_MODEL,
        chat_template: bool | None = None,
        max_turns: int = 6,
        max_turn_tokens: int = 32,
        max_context_tokens: int = 512,  # holds each id's longest dialogue on SmolLM2's template (about 450 tokens)
        render_mode: str | None = None,
    ) -> None:
        if min(max_turns, max_turn_tokens, max_context_tokens) < 1:
            raise ValueError(
                "max_turns, max_turn_tokens and max_context_tokens must be positive, "
                f"got {max_turns}, {max_turn_tokens} and {max_context_tokens}"
            )
        if isinstance(game, str):
            game = make_game(game, game_options)
        elif not isinstance(game, Game):
            raise GameError(f"{game_name(game)} is not a Game: give it reset(seed) and step(turn_text) methods")
        if tokenizer is None:
            tokenizer = shared_tokenizer(model)
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token, the end-of-turn token; turns could never end early")
        if chat_template is None:
            chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.game = game
        self.tokenizer = tokenizer
        self.layout = chat_layout(tokenizer) if chat_template else PLAIN_LAYOUT
        self.max_turns = max_turns
        self.max_turn_tokens = max_turn_tokens
        self.max_context_tokens = max_context_tokens
        self.render_mode = render_mode
        self.end_of_turn_id = tokenizer.eos_token_id
        self.end_of_turn_text = tokenizer.convert_ids_to_tokens(self.end_of_turn_id)
        self.pad_id = pad_token_id(tokenizer)
        vocab = len(tokenizer)
        self.observation_space = spaces.Dict(
            {
                "input_ids": spaces.Box(0, vocab - 1, shape=(max_context_tokens,), dtype=np.int64),
                "attention_mask": spaces.Box(0, 1, shape=(max_context_tokens,), dtype=np.int64),
            }
        )
        self.action_space = spaces.Discrete(vocab)
        self._ids: list[int] = []
        self._roles: list[int] = []
        self._turn_start = 0
        self._turn_rewards: list[float] = []
        self._game_seed = 0
        self._over = True

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added (special tokens written in it, as a chat template writes
        them, are read as themselves)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _append(self, ids: list[int], role: TokenRole) -> None:
        self._ids.extend(ids)
        self._roles.extend([int(role)] * len(ids))

    def _observation(self) -> dict[str, np.ndarray]:
        ids = np.full(self.max_context_tokens, self.pad_id, dtype=np.int64)
        mask = np.zeros(self.max_context_tokens, dtype=np.int64)
        ids[: len(self._ids)] = self._ids
        mask[: len(self._ids)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def _info(self) -> dict[str, Any]:
        roles = np.zeros(self.max_context_tokens, dtype=np.int8)
        roles[: len(self._roles)] = self._roles
        turns = len(self._turn_rewards)
        return {"roles": roles, "turns": turns, "turn_rewards": list(self._turn_rewards), "game_seed": self._game_seed}

    @property
    def turn_ids(self) -> list[int]:
        """The tokens of the policy's current turn so far."""
        return self._ids[self._turn_start :]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "game_seed" in options:
            self._game_seed = int(options["game_seed"])
        else:
            self._game_seed = int(self.np_random.integers(GAME_SEEDS))
        opening = self.encode(self.layout.opening(checked_reset(self.game, self._game_seed)))
        if len(opening) >= self.max_context_tokens:
            raise GameError(
                f"game {game_name(self.game)} (episode seed {self._game_seed}, at reset) opens with {len(opening)} "
                f"tokens, leaving no room in max_context_tokens={self.max_context_tokens}: raise it"
            )
        self._ids, self._roles, self._turn_rewards = [], [], []
        self._append(opening, TokenRole.PROMPT)
        self._turn_start = len(self._ids)
        self._over = False
        return self._observation(), self._info()

    def step(self, action):
        if self._over:
            raise RuntimeError("the episode is over (or never started): call reset() before step()")
        token = int(action)
        self._append([token], TokenRole.POLICY)
        ended_by_policy = token == self.end_of_turn_id
        if not ended_by_policy and len(self.turn_ids) < self.max_turn_tokens:
            truncated = len(self._ids) >= self.max_context_tokens
            self._over = truncated
            return self._observation(), 0.0, False, truncated, self._info()
        turn_text = decode_completion(self.tokenizer, self.turn_ids)
        turn = len(self._turn_rewards) + 1
        reply, reward, done = checked_step(self.game, turn_text, self._game_seed, turn)
        self._turn_rewards.append(reward)
        terminated = done or turn >= self.max_turns
        truncated = False
        if not terminated:
            reply_ids = self.encode(self.layout.reply(reply, self.end_of_turn_text if ended_by_policy else None))
            truncated = len(self._ids) + len(reply_ids) >= self.max_context_tokens
            if not truncated:
                self._append(reply_ids, TokenRole.ENVIRONMENT)
                self._turn_start = len(self._ids)
        self._over = terminated or truncated
        info = {**self._info(), "turn_text": turn_text, "reply": reply}
        return self._observation(), reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "ansi":
            return self.tokenizer.decode(self._ids)
        return None


def register() -> None:
    """Register the multi-turn ids of ``ENV_IDS`` with Gymnasium (idempotent)."""
    for env_id, kwargs in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="envs.text.multi_turn:MultiTurnTextEnv", kwargs=kwargs)
