"""Which basin a trained HalfCheetah sits in (issue 30): most seeds of the paper's settings settle near a return of
1,750 and a few reach 3,000-4,000. This plays each run's final policy (its mean action, Gymnasium's env, held-out
seeds) and prints what the torso does: the forward speed, the share of steps it spends upside down (the pitch
``qpos[2]``, the ``rooty`` joint, past a quarter turn: ``cos(pitch) < 0``) and how much it pitches, beside the run's
last training return and policy std. A flipped run moves on its back; an upright one at low speed stalls in a gait.

    python -m benchmarks.probes.halfcheetah_basins /tmp/wret/w16x128/HalfCheetah-v5__clip-0.2__s*
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from agents.walkers.evaluate import load_policy

PITCH_JOINT = 2
"""``qpos`` index of HalfCheetah's ``rooty`` hinge: the torso's pitch in radians, 0 upright (half_cheetah.xml)."""


class Gait(NamedTuple):
    """One played episode."""

    episode_return: float
    mean_x_velocity: float
    """Mean of ``info["x_velocity"]`` over the episode (m/s)."""
    upside_down: float
    """Share of steps with the torso past a quarter turn (``upside_down_share``)."""
    mean_abs_pitch: float
    """Mean ``|pitch|`` over the episode, radians (unwrapped: a full roll counts as 2 pi)."""


def upside_down_share(pitch: np.ndarray) -> float:
    """Share of the steps ``(T,)`` whose pitch (radians) has the torso upside down: ``mean(cos(pitch) < 0)``."""
    return float(np.mean(np.cos(pitch) < 0))


def play(run: Path, episodes: int, seed: int) -> list[Gait]:
    """The run's final policy, mean actions, on ``episodes`` episodes of ``gym.make(env_id)`` seeded ``seed + i``."""
    policy, env_id = load_policy(run)
    actor = policy.numpy_actor()
    env = gym.make(env_id)
    low, high = env.action_space.low, env.action_space.high
    gaits = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, pitch, velocity, done = 0.0, [], [], False
        while not done:
            action = actor.mean(obs[None].astype(np.float32))[0]
            obs, reward, terminated, truncated, info = env.step(np.clip(action, low, high))
            total += float(reward)
            pitch.append(float(env.unwrapped.data.qpos[PITCH_JOINT]))
            velocity.append(float(info["x_velocity"]))
            done = terminated or truncated
        pitch = np.asarray(pitch)
        gaits.append(Gait(total, float(np.mean(velocity)), upside_down_share(pitch), float(np.mean(np.abs(pitch)))))
    env.close()
    return gaits


def last_metrics(run: Path) -> dict:
    """The last line of the run's metrics.jsonl."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="HalfCheetah run folders")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1_000_000, help="first evaluation seed (training never saw it)")
    args = parser.parse_args()
    header = ["run", "training return (last 100)", "policy std", "played return", "x velocity", "upside down"]
    print("| " + " | ".join([*header, "mean abs pitch"]) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for run in args.runs:
        metrics, gaits = last_metrics(run), play(run, args.episodes, args.seed)
        mean = Gait(*np.mean(np.array(gaits), axis=0))
        print(
            f"| {run.name} | {metrics['episode_return']:,.0f} | {metrics['policy_std']:.3f} | "
            f"{mean.episode_return:,.0f} | {mean.mean_x_velocity:.2f} | {mean.upside_down:.0%} | "
            f"{mean.mean_abs_pitch:.2f} |"
        )


if __name__ == "__main__":
    main()
