"""``ppo eval``: the return of a trained walker over N episodes, or a text run's score on held-out prompts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from agents.runs.config import CONFIG_FILE, read_config
from agents.walkers.evaluate import evaluate, load_policy


@dataclass(frozen=True)
class EvalConfig:
    """Evaluate a checkpoint: mean +- std return over episodes (rendering headless needs MUJOCO_GL=egl)."""

    run: tyro.conf.Positional[Path]
    """Run folder (uses checkpoints/latest.pt) or a checkpoint file; a text run's folder (policy/, else latest.pt)."""
    episodes: int = 10
    """Number of episodes to run (text: number of held-out prompts, one completion each)."""
    base: bool = False
    """Text runs: evaluate the starting model instead of the trained policy (the "before")."""
    best_of: int = 0
    """Text runs: best-of-N sampling for N = 1, 2, 4, ... up to this, chosen by the task reward; 0 = off."""
    deterministic: bool = True
    """Act with the Gaussian mean instead of sampling."""
    seed: int = 12345
    """Seed of the evaluation episodes (different from training seeds by default)."""
    video: Path | None = None
    """Write an MP4 of the first episode here (e.g. walker.mp4)."""
    device: str = "cpu"
    """Device for the policy."""


def is_text_run(path: Path) -> bool:
    """True for a folder written by ``ppo train text``."""
    return (path / CONFIG_FILE).is_file() and read_config(path).get("kind") == "text"


def evaluate_cli(config: EvalConfig) -> None:
    if config.best_of < 0 or (config.best_of and not is_text_run(config.run)):
        raise ValueError(
            f"--best-of takes a positive N for a text run (0 = off), got {config.best_of} for {config.run}"
        )
    if is_text_run(config.run) and config.best_of > 0:
        from agents.text.evaluate import best_of_n

        rows = best_of_n(config.run, config.episodes, config.seed, config.base, config.best_of)
        names = list(rows[0].metrics)
        print(f"best-of-N over {config.episodes} held-out prompts, chosen by the task reward:")
        print(" | ".join(["N", "KL bound (nats)", "reward", *names]))
        for row in rows:
            print(
                " | ".join(
                    [str(row.n), f"{row.kl:.3f}", f"{row.reward:.3f}", *(f"{row.metrics[n]:.3f}" for n in names)]
                )
            )
        return
    if is_text_run(config.run):
        from agents.text.evaluate import evaluate_text_run

        result = evaluate_text_run(config.run, config.episodes, config.seed, config.base)
        extra = ", ".join(f"{name} {value:.3f}" for name, value in result.metrics.items())
        print(
            f"{result.model}: score {np.mean(result.scores):.3f} ± {np.std(result.scores):.3f} "
            f"over {len(result.scores)} held-out prompts; {extra}"
        )
        for prompt, completion, score in result.samples:
            print(f"  {score:+.2f}  {prompt!r} -> {completion!r}")
        return
    policy, env_id = load_policy(config.run, config.device)
    result = evaluate(policy, env_id, config.episodes, config.seed, config.deterministic, config.video)
    print(
        f"{env_id}: return {result.mean:.1f} ± {result.std:.1f} over {config.episodes} episodes "
        f"(mean length {np.mean(result.lengths):.0f})"
    )
    if config.video:
        print(f"video written to {config.video}")
