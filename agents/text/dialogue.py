"""Multi-turn dialogues sampled as a batch with one key/value cache across turns: the training-side form of
``envs/text/multi_turn.py``'s ``MultiTurnTextEnv``.

B games are played side by side. Their openings are prefilled once, left-padded; the policy's turns are then sampled
token by token from pre-drawn uniforms (``inverse_cdf_sample``). At a turn's end the row's game reads the decoded
turn, and its reply, tokenized once in the environment's layout, is appended to the row's cache by a forward of those
tokens only: the history is never re-tokenized nor run again, so a policy token costs one single-token forward at turn
8 as at turn 1. A row whose episode is over leaves the cache. The token layout, the roles, the turn and context limits
and the game's checked calls are the environment's own, and the tests step the environment with the sampled tokens to
check that both write the same dialogue token for token. See docs/text_env.md, "The batched multi-turn form".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from agents.core.distributed import rank, world_size
from agents.text.actor_critic import LMActorCritic, inverse_cdf_sample, prefill_prompts, token_log_probs_and_entropy
from agents.text.config import TextEnvConfig, game_turn_limit
from agents.text.metrics import gathered_eval_metrics
from agents.text.rollout import (
    SampledCompletions,
    TextBatchSettings,
    TextRollout,
    TurnStructure,
    concatenate_samples,
    left_pad,
)
from envs.text.games import TRAINING_SEEDS, Game, GameError, checked_reset, checked_step, game_name
from envs.text.multi_turn import PLAIN_LAYOUT, TokenRole, TurnLayout, chat_layout
from envs.text.tokens import decode_completion, pad_token_id


@dataclass(frozen=True)
class DialogueSettings:
    """How dialogues are sampled. The limits mean what ``MultiTurnTextEnv``'s keywords of the same names mean, with
    the same defaults."""

    max_turns: int = 6
    """The policy's turns per episode: the episode terminates after the last one, or earlier when the game is over."""
    max_turn_tokens: int = 32
    """Tokens of one turn; reaching it ends the turn as the end-of-turn token (the tokenizer's EOS) does."""
    max_context_tokens: int = 512
    """Prompt, turns and replies together: the episode is truncated when the next token, or a reply and one more
    token, would not fit."""
    temperature: float = 1.0
    """Tokens are drawn from, and their log-probs are those of, ``softmax(logits / temperature)``."""
    chat_template: bool | None = None
    """Wrap the opening and the replies in the tokenizer's chat template (None: when the tokenizer has one)."""

    def __post_init__(self) -> None:
        if min(self.max_turns, self.max_turn_tokens, self.max_context_tokens) < 1 or not self.temperature > 0:
            raise ValueError(
                "max_turns, max_turn_tokens, max_context_tokens and temperature must be positive, got "
                f"{self.max_turns}, {self.max_turn_tokens}, {self.max_context_tokens} and {self.temperature}"
            )

    @classmethod
    def from_text(cls, text: TextEnvConfig) -> DialogueSettings:
        """A game run's settings: ``--max-turns`` (or the game's limit), ``--max-new-tokens`` per turn,
        ``--max-context-tokens``, ``--temperature`` and ``--chat-template``."""
        return cls(game_turn_limit(text), text.max_new_tokens, text.max_context_tokens, text.temperature,
                   text.chat_template)  # fmt: skip


class SampledDialogues(NamedTuple):
    """B dialogues, right-padded to the longest (``L`` tokens); the per-turn fields are ``(B, max_turns)``."""

    input_ids: torch.Tensor
    """``(B, L)`` int64: prompt, turn 1, reply 1, turn 2, ..., exactly as ``MultiTurnTextEnv``'s observation holds
    them; the tokenizer's padding id after the dialogue."""
    attention_mask: torch.Tensor
    """``(B, L)`` int64: 1 on the dialogue's tokens, 0 on padding."""
    roles: torch.Tensor
    """``(B, L)`` int8: a ``TokenRole`` per position, as the environment's ``info["roles"]`` (``POLICY`` marks the
    actions, ``PADDING`` the positions after the dialogue)."""
    sampled_logp: torch.Tensor
    """``(B, L)`` float32: at each ``POLICY`` position, log pi(token | every token before it) at the temperature, as
    computed while sampling; 0 elsewhere."""
    turn_rewards: torch.Tensor
    """``(B, max_turns)`` float32: the game's reward for each completed turn, 0 past ``turns``."""
    turn_ends: torch.Tensor
    """``(B, max_turns)`` int64: the position in ``input_ids`` of each completed turn's last token (the step the
    environment gives that turn's reward on), -1 past ``turns``."""
    turns: torch.Tensor
    """``(B,)`` int64: turns completed, that is read and scored by the game."""
    success: torch.Tensor
    """``(B,)`` bool: the game ended the episode with a positive reward on its last turn (solved, as the shipped
    games reward it)."""
    terminated: torch.Tensor
    """``(B,)`` bool: the game said it was over, or ``max_turns`` turns were played."""
    truncated: torch.Tensor
    """``(B,)`` bool: the context was full before the episode terminated (a turn cut off, or a reply not appended)."""
    game_seeds: torch.Tensor
    """``(B,)`` int64: the episode seed each row's game was reset with."""
    texts: list[str]
    """Each dialogue decoded, special tokens kept (what the environment's ``render`` shows)."""


@dataclass(frozen=True)
class DialogueWriting:
    """What turns sampled tokens into dialogue: the tokenizer, the environment's layout and the end-of-turn token."""

    tokenizer: object
    layout: TurnLayout
    settings: DialogueSettings
    end_of_turn_id: int
    end_of_turn_text: str

    @classmethod
    def for_tokenizer(cls, tokenizer, settings: DialogueSettings) -> DialogueWriting:
        """As ``MultiTurnTextEnv`` sets itself up: the chat template's layout when asked for (or when the tokenizer
        has one and ``settings.chat_template`` is None), else the plain one; the tokenizer's EOS ends turns."""
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token, the end-of-turn token; turns could never end early")
        chat_template = settings.chat_template
        if chat_template is None:
            chat_template = bool(getattr(tokenizer, "chat_template", None))
        layout = chat_layout(tokenizer) if chat_template else PLAIN_LAYOUT
        eos = tokenizer.eos_token_id
        return cls(tokenizer, layout, settings, eos, tokenizer.convert_ids_to_tokens(eos))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as the environment writes them: no special tokens added."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass
class DialogueRow:
    """One game being played: its dialogue so far and the tokens still to be run into its cache."""

    game: Game
    seed: int
    ids: list[int]
    roles: list[int]
    logp: list[float] = field(default_factory=list)
    """Per position of ``ids``: the sampled log-prob at policy tokens, 0 elsewhere."""
    turn_start: int = 0
    turn_rewards: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    """Tokens written but not yet run through the LM: the last sampled token, and after a turn the reply's."""
    terminated: bool = False
    truncated: bool = False
    success: bool = False

    @property
    def over(self) -> bool:
        return self.terminated or self.truncated

    def append(self, ids: list[int], role: TokenRole, logp: float = 0.0) -> None:
        self.ids.extend(ids)
        self.roles.extend([int(role)] * len(ids))
        self.logp.extend([logp] * len(ids))


def start_row(game: Game, seed: int, writing: DialogueWriting) -> DialogueRow:
    """Reset ``game`` to episode ``seed``; its row holds the opening's tokens (``PROMPT``), as ``reset`` writes them."""
    opening = writing.encode(writing.layout.opening(checked_reset(game, seed)))
    limit = writing.settings.max_context_tokens
    if len(opening) >= limit:
        raise GameError(
            f"game {game_name(game)} (episode seed {seed}, at reset) opens with {len(opening)} tokens, leaving no "
            f"room in max_context_tokens={limit}: raise it"
        )
    row = DialogueRow(game, seed, [], [])
    row.append(opening, TokenRole.PROMPT)
    row.turn_start = len(row.ids)
    return row


def play_token(row: DialogueRow, token: int, logp: float, writing: DialogueWriting) -> None:
    """Write the policy's sampled ``token`` into ``row`` as ``MultiTurnTextEnv.step`` does: within a turn, append it
    (truncated when the context is then full); at the turn's end (the end-of-turn token, or ``max_turn_tokens``) let
    the game read the turn, record its reward, and append the reply unless the episode is over or the reply and one
    more token would not fit. What the LM has yet to read is left in ``row.pending``."""
    settings = writing.settings
    row.append([token], TokenRole.POLICY, logp)
    row.pending = [token]
    ended_by_policy = token == writing.end_of_turn_id
    if not ended_by_policy and len(row.ids) - row.turn_start < settings.max_turn_tokens:
        row.truncated = len(row.ids) >= settings.max_context_tokens
        return
    turn_text = decode_completion(writing.tokenizer, row.ids[row.turn_start :])
    turn = len(row.turn_rewards) + 1
    reply, reward, done = checked_step(row.game, turn_text, row.seed, turn)
    row.turn_rewards.append(reward)
    row.turn_ends.append(len(row.ids) - 1)
    row.success = done and reward > 0
    row.terminated = done or turn >= settings.max_turns
    if row.terminated:
        return
    reply_ids = writing.encode(writing.layout.reply(reply, writing.end_of_turn_text if ended_by_policy else None))
    row.truncated = len(row.ids) + len(reply_ids) >= settings.max_context_tokens
    if not row.truncated:
        row.append(reply_ids, TokenRole.ENVIRONMENT)
        row.pending.extend(reply_ids)
        row.turn_start = len(row.ids)


@torch.no_grad()
def sample_dialogues(
    lm: nn.Module,
    games: Sequence[Game],
    tokenizer,
    game_seeds: Sequence[int],
    uniforms: torch.Tensor,
    settings: DialogueSettings = DialogueSettings(),
) -> SampledDialogues:
    """Play ``games[b]`` from episode ``game_seeds[b]`` for each of the B rows, the policy's tokens sampled from
    ``lm`` with one key/value cache kept across turns.

    ``uniforms`` ``(B, max_turns, max_turn_tokens)``, on the LM's device: token ``j`` of turn ``t`` of row ``b`` is
    drawn by ``inverse_cdf_sample`` at ``uniforms[b, t, j]``, so a row's dialogue depends only on its game, its seed
    and its uniforms, and any batching of the rows samples the same tokens (up to the rounding of the logits). The
    games are stepped in place, one object per row (give distinct objects).

    The openings are prefilled once (``prefill_prompts``: left-padded, copies of an opening run once). Then each
    forward runs every unfinished row's next unread tokens through the cache: one token (the one just sampled) while
    any row is inside its turn, or, when every row has a reply to read, the first ``w`` tokens of each (``w`` the
    shortest unread run), so the cache stays one dense block with no holes and every token is run exactly once. A
    row whose episode is over is dropped from the cache. A game that raises or returns something unusable is a
    one-line ``GameError`` naming the game, the episode seed and the turn.
    """
    batch = len(games)
    if len(game_seeds) != batch or uniforms.shape != (batch, settings.max_turns, settings.max_turn_tokens):
        raise ValueError(
            f"{batch} games need {batch} game seeds and uniforms of shape ({batch}, max_turns={settings.max_turns}, "
            f"max_turn_tokens={settings.max_turn_tokens}), got {len(game_seeds)} seeds and {tuple(uniforms.shape)}"
        )
    if len({id(game) for game in games}) != batch:
        raise ValueError("each row needs its own game object: a game is stepped in place")
    for game in games:
        if not isinstance(game, Game):
            raise GameError(f"{game_name(game)} is not a Game: give it reset(seed) and step(turn_text) methods")
    positions = getattr(lm.config, "max_position_embeddings", None) or getattr(lm.config, "n_positions", None)
    if positions is not None and settings.max_context_tokens > positions:
        raise ValueError(
            f"max_context_tokens={settings.max_context_tokens} is longer than the model's {positions} positions: "
            f"lower --max-context-tokens to at most {positions}"
        )
    writing = DialogueWriting.for_tokenizer(tokenizer, settings)
    rows = [start_row(game, int(seed), writing) for game, seed in zip(games, game_seeds, strict=True)]
    device = uniforms.device
    pad_id = pad_token_id(tokenizer)
    prompt_ids, attention_mask = left_pad([row.ids for row in rows], pad_id, device)
    prefilled = prefill_prompts(lm, prompt_ids, attention_mask)
    logits, cache = prefilled.last_logits, prefilled.cache
    next_position = attention_mask.sum(-1)
    running = list(range(batch))  # the rows still playing, in the order of the cache's rows
    while True:
        drawing = [i for i, b in enumerate(running) if not rows[b].pending]
        if drawing:
            drawn_rows = [rows[running[i]] for i in drawing]
            turn = torch.tensor([len(row.turn_rewards) for row in drawn_rows], device=device)
            position = torch.tensor([len(row.ids) - row.turn_start for row in drawn_rows], device=device)
            row_index = torch.tensor([running[i] for i in drawing], device=device)
            drawn_logits = logits[torch.tensor(drawing, device=device)]
            tokens = inverse_cdf_sample(drawn_logits, uniforms[row_index, turn, position], settings.temperature)
            logp, _ = token_log_probs_and_entropy(drawn_logits.unsqueeze(1), tokens.unsqueeze(1), settings.temperature)
            for row, token, token_logp in zip(drawn_rows, tokens.tolist(), logp.squeeze(1).tolist(), strict=True):
                play_token(row, token, token_logp, writing)
        keep = [i for i, b in enumerate(running) if not rows[b].over]
        if not keep:
            break
        if len(keep) < len(running):  # the finished rows leave the cache and every later forward
            kept = torch.tensor(keep, device=device)
            cache.batch_select_indices(kept)
            attention_mask, next_position = attention_mask[kept], next_position[kept]
            running = [running[i] for i in keep]
        width = min(len(rows[b].pending) for b in running)
        fed = torch.tensor([rows[b].pending[:width] for b in running], device=device)
        for b in running:
            del rows[b].pending[:width]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(running), width)], dim=1)
        logits = lm(
            input_ids=fed,
            attention_mask=attention_mask,
            position_ids=next_position.unsqueeze(1) + torch.arange(width, device=device),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        next_position = next_position + width
    return collect_dialogues(rows, writing, pad_id, device)


def collect_dialogues(
    rows: list[DialogueRow], writing: DialogueWriting, pad_id: int, device: torch.device
) -> SampledDialogues:
    """The finished rows as one right-padded record (see ``SampledDialogues``)."""
    batch, length, max_turns = len(rows), max(len(row.ids) for row in rows), writing.settings.max_turns
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(batch, length, dtype=torch.long)
    roles = torch.full((batch, length), int(TokenRole.PADDING), dtype=torch.int8)
    sampled_logp = torch.zeros(batch, length)
    turn_rewards = torch.zeros(batch, max_turns)
    turn_ends = torch.full((batch, max_turns), -1, dtype=torch.long)
    for b, row in enumerate(rows):
        n, turns = len(row.ids), len(row.turn_rewards)
        input_ids[b, :n] = torch.tensor(row.ids)
        attention_mask[b, :n] = 1
        roles[b, :n] = torch.tensor(row.roles, dtype=torch.int8)
        sampled_logp[b, :n] = torch.tensor(row.logp)
        turn_rewards[b, :turns] = torch.tensor(row.turn_rewards)
        turn_ends[b, :turns] = torch.tensor(row.turn_ends, dtype=torch.long)
    return SampledDialogues(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        roles=roles.to(device),
        sampled_logp=sampled_logp.to(device),
        turn_rewards=turn_rewards.to(device),
        turn_ends=turn_ends.to(device),
        turns=torch.tensor([len(row.turn_rewards) for row in rows], device=device),
        success=torch.tensor([row.success for row in rows], device=device),
        terminated=torch.tensor([row.terminated for row in rows], device=device),
        truncated=torch.tensor([row.truncated for row in rows], device=device),
        game_seeds=torch.tensor([row.seed for row in rows], device=device),
        texts=[writing.tokenizer.decode(row.ids) for row in rows],
    )


def dialogue_completions(dialogues: SampledDialogues, tokenizer) -> SampledCompletions:
    """The dialogues in the training batch's layout: each opening is the prompt and everything after it (the turns
    and the replies between them) the response, right-padded, with a ``TurnStructure`` saying which tokens are the
    policy's; the score is the episode's return (the sum of its turn rewards). The completions' text is the dialogue
    after the opening, special tokens kept; the task metrics are ``success``, ``turns`` and ``truncated``."""
    device = dialogues.input_ids.device
    opening = (dialogues.roles == int(TokenRole.PROMPT)).sum(1)  # the opening is a prefix of every dialogue
    response_lengths = dialogues.attention_mask.sum(1) - opening
    columns = torch.arange(int(response_lengths.max()), device=device)
    inside = columns < response_lengths.unsqueeze(1)
    source = (opening.unsqueeze(1) + columns).clamp(max=dialogues.input_ids.shape[1] - 1)
    response_ids = torch.where(inside, dialogues.input_ids.gather(1, source), pad_token_id(tokenizer))
    policy = inside & (dialogues.roles.gather(1, source) == int(TokenRole.POLICY))
    sampled_logp = torch.where(
        policy, dialogues.sampled_logp.gather(1, source), torch.zeros_like(policy, dtype=torch.float32)
    )
    scored = torch.arange(dialogues.turn_ends.shape[1], device=device) < dialogues.turns.unsqueeze(1)
    rows, turn = scored.nonzero(as_tuple=True)
    turn_ends = torch.zeros_like(policy)
    turn_ends[rows, dialogues.turn_ends[rows, turn] - opening[rows]] = True
    ends = turn_ends.long()
    turn_index = torch.where(policy, ends.cumsum(1) - ends, torch.full_like(ends, -1))
    prompt_ids = [ids[:n] for ids, n in zip(dialogues.input_ids.tolist(), opening.tolist(), strict=True)]
    lengths = response_lengths.tolist()
    completions = [tokenizer.decode(ids[:n]) for ids, n in zip(response_ids.tolist(), lengths, strict=True)]
    turns = TurnStructure(
        policy.float(), turn_ends, turn_index, dialogues.turn_rewards, dialogues.turns, dialogues.success,
        dialogues.truncated, dialogues.game_seeds,
    )  # fmt: skip
    return SampledCompletions(
        prompts=[tokenizer.decode(ids) for ids in prompt_ids],
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_mask=inside.long(),
        ended=dialogues.terminated,
        completions=completions,
        scores=dialogues.turn_rewards.sum(1),
        task_metrics={
            "success": dialogues.success.float().tolist(),
            "turns": dialogues.turns.float().tolist(),
            "truncated": dialogues.truncated.float().tolist(),
        },
        overlong_penalty=None,
        turns=turns,
        sampled_logp=sampled_logp,
    )


def play_episodes(
    lm: nn.Module,
    tokenizer,
    new_game: Callable[[], Game],
    seeds: list[int],
    uniforms: torch.Tensor,
    settings: DialogueSettings,
    sampling_batch: int,
) -> SampledCompletions:
    """One episode of a fresh ``new_game()`` from each of ``seeds``, ``sampling_batch`` rows sampled together, as
    the training batch's ``SampledCompletions`` (``uniforms`` ``(len(seeds), max_turns, max_turn_tokens)``)."""
    parts = []
    for start in range(0, len(seeds), sampling_batch):
        chunk = seeds[start : start + sampling_batch]
        games = [new_game() for _ in chunk]
        sampled = sample_dialogues(lm, games, tokenizer, chunk, uniforms[start : start + len(chunk)], settings)
        parts.append(dialogue_completions(sampled, tokenizer))
    return concatenate_samples(parts)


@dataclass
class GameGroups:
    """Draws training episode seeds (``seed_rng``, below ``TRAINING_SEEDS``) and plays each ``settings.group_size``
    times side by side (the G episodes of one seed form a group, as G completions of one prompt do), noise from
    ``generator``."""

    policy: LMActorCritic
    tokenizer: object
    new_game: Callable[[], Game]
    settings: TextBatchSettings
    dialogue: DialogueSettings
    seed_rng: np.random.Generator
    generator: torch.Generator

    def __call__(self, groups: int) -> SampledCompletions:
        drawn = self.seed_rng.integers(TRAINING_SEEDS, size=groups)
        seeds = [int(seed) for seed in np.repeat(drawn, self.settings.group_size)]
        shape = (len(seeds), self.dialogue.max_turns, self.dialogue.max_turn_tokens)
        device = next(self.policy.parameters()).device
        uniforms = torch.rand(shape, generator=self.generator).to(device)
        self.policy.eval()
        return play_episodes(
            self.policy.lm, self.tokenizer, self.new_game, seeds, uniforms, self.dialogue, self.settings.sampling_batch
        )

    def logged_rows(self, rollout: TextRollout, count: int) -> list[dict]:
        """The first ``count`` episodes as whole dialogues, for ``samples.jsonl``."""
        turns = rollout.turns
        rows = zip(rollout.prompts, rollout.completions, rollout.scores.tolist(), turns.episode_seeds.tolist(),
                   turns.turns.tolist(), turns.success.tolist(), turns.turn_rewards.tolist())  # fmt: skip
        return [
            {"prompt": opening, "completion": dialogue, "score": score, "game_seed": seed, "turns": n,
             "success": solved, "turn_rewards": rewards[:n]}
            for opening, dialogue, score, seed, n, solved, rewards in rows
        ][:count]  # fmt: skip


def heldout_episodes(
    lm: nn.Module, tokenizer, new_game: Callable[[], Game], text: TextEnvConfig, seed: int, episodes: int,
    rows: slice = slice(None),
) -> SampledCompletions:  # fmt: skip
    """Held-out episodes ``0 .. episodes - 1`` (game seeds ``TRAINING_SEEDS + i``), those of ``rows`` played, with
    noise for all of them drawn from ``seed`` alone: an episode's dialogue depends on the model, its game seed and
    ``seed``, not on ``rows`` or the batching."""
    settings = DialogueSettings.from_text(text)
    shape = (episodes, settings.max_turns, settings.max_turn_tokens)
    uniforms = torch.rand(shape, generator=torch.Generator().manual_seed(seed))[rows]
    seeds = list(range(TRAINING_SEEDS, TRAINING_SEEDS + episodes))[rows]
    device = next(lm.parameters()).device
    return play_episodes(lm, tokenizer, new_game, seeds, uniforms.to(device), settings, text.sampling_batch)


def heldout_game_metrics(lm, tokenizer, new_game: Callable[[], Game], text: TextEnvConfig, seed: int) -> dict:
    """``--eval-every`` for games: ``--eval-prompts`` held-out episodes split over the processes: ``eval_reward``
    (the mean return), ``eval_success``, ``eval_turns``, ``eval_truncated``, ``eval_response_length`` (the policy's
    tokens per episode) and ``eval_seconds``."""
    started = time.perf_counter()
    played = heldout_episodes(lm, tokenizer, new_game, text, seed, text.eval_prompts, slice(rank(), None, world_size()))
    lengths = played.turns.policy_mask.sum(1).tolist()
    return gathered_eval_metrics(played.scores.tolist(), played.task_metrics, lengths, started)
