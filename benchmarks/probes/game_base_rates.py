"""Base success rates of a model on the shipped multi-turn games (issue 27): held-out episodes (game seeds
``TRAINING_SEEDS + i``, the ones ``--eval-every`` and ``ppo eval`` play) sampled as training samples them, with noise
from ``--seeds``. Prints, per game and setting: success, mean return, turns per episode, truncation and the policy's
tokens per episode, each the mean over episodes and seeds.

    python -m benchmarks.probes.game_base_rates --episodes 40 --seeds 0 1
    python -m benchmarks.probes.game_base_rates --games "guess-number high=10 turns=4" "calculator operation=+"
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from agents.text.config import TextEnvConfig
from agents.text.dialogue import heldout_episodes
from benchmarks.harness import machine_header
from envs.text.games import GAME_CONFIGS, game_factory
from envs.text.models import DEFAULT_MODEL, load_causal_lm

DEFAULT_GAMES = [
    "guess-number",
    "guess-number high=10 turns=4",
    "mastermind",
    "calculator",
    "calculator operation=+ terms=3 digits=3",
]
"""A game's name, then ``option=value`` settings of its config, and ``turns=N`` for ``--max-turns``."""


def parse_game(spec: str) -> tuple[object, int | None]:
    """``"guess-number high=10 turns=4"`` -> (its config, the turn limit or None for the game's own)."""
    name, *settings = spec.split()
    options: dict[str, object] = {}
    turns = None
    for setting in settings:
        key, value = setting.split("=", 1)
        if key == "turns":
            turns = int(value)
        else:
            options[key] = int(value) if value.lstrip("-").isdigit() else value
    return GAME_CONFIGS[name](**options), turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--games", nargs="+", default=DEFAULT_GAMES, help="'name option=value ... turns=N'")
    parser.add_argument("--episodes", type=int, default=40, help="held-out episodes per game")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="noise seeds of the samples")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="tokens per turn")
    parser.add_argument("--max-context-tokens", type=int, default=512)
    parser.add_argument("--no-chat-template", action="store_true", help="the plain layout instead of the template")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_header())
    lm, tokenizer, _ = load_causal_lm(args.model)
    lm.eval()
    print(f"model {args.model}; {args.episodes} held-out episodes x seeds {args.seeds}; "
          f"{args.max_new_tokens} tokens a turn, context {args.max_context_tokens}, "
          f"chat template {not args.no_chat_template}")  # fmt: skip
    print("| game | turn limit | success | return | turns | truncated | policy tokens / episode | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for spec in args.games:
        config, turns = parse_game(spec)
        text = TextEnvConfig(
            model=args.model, task=config, max_new_tokens=args.max_new_tokens, max_turns=turns,
            max_context_tokens=args.max_context_tokens, chat_template=not args.no_chat_template,
        )  # fmt: skip
        new_game = game_factory(config)
        started = time.perf_counter()
        played = [heldout_episodes(lm, tokenizer, new_game, text, seed, args.episodes) for seed in args.seeds]
        seconds = time.perf_counter() - started
        metric = {name: [v for p in played for v in p.task_metrics[name]] for name in ("success", "turns", "truncated")}
        success, turns_played, truncated = (float(np.mean(values)) for values in metric.values())
        returns = float(np.mean([r for p in played for r in p.scores.tolist()]))
        tokens = float(np.mean([n for p in played for n in p.turns.policy_mask.sum(1).tolist()]))
        limit = turns if turns is not None else type(config).max_turns
        print(f"| {spec} | {limit} | {success:.3f} | {returns:.3f} | {turns_played:.2f} | "
              f"{truncated:.2f} | {tokens:.1f} | {seconds:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
