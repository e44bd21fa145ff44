"""Walker evaluation: load a trained policy and measure its return over N episodes, optionally recording an MP4."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents.core.objectives import uses_critic
from agents.runs.checkpoint import CheckpointError, load_checkpoint
from agents.runs.config import config_from_dict
from agents.walkers.config import TrainConfig
from agents.walkers.gaussian import GaussianActorCritic
from envs.mujoco import make_vector_env


class EvaluationResult:
    """Returns and lengths of the evaluation episodes."""

    def __init__(self, returns: list[float], lengths: list[int]) -> None:
        self.returns = returns
        self.lengths = lengths

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


def load_policy(run: Path, device: str = "cpu") -> tuple[GaussianActorCritic, str]:
    """The trained policy (with its observation normaliser) and its env id, from a run folder or checkpoint file."""
    state = load_checkpoint(run, map_location=device)
    config = config_from_dict(TrainConfig, state["config"])
    action_space = make_vector_env(config.env.env_id, 1).single_action_space
    obs_dim = state["policy"]["obs_mean"].shape[0]
    policy = GaussianActorCritic(
        obs_dim,
        action_space.shape[0],
        config.policy.hidden_sizes,
        config.policy.initial_log_std,
        config.env.normalize_observations,
        critic=uses_critic(config.objective),
        activation=config.policy.activation,
        orthogonal_init=config.policy.orthogonal_init,
    )
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint policy does not match its config ({str(error).splitlines()[0]})") from error
    return policy.to(device).eval(), config.env.env_id


def evaluate(
    policy: GaussianActorCritic, env_id: str, episodes: int, seed: int, deterministic: bool, video: Path | None = None
) -> EvaluationResult:
    """Run ``episodes`` full episodes (env seeds ``seed, seed+1, ...``) and return their raw returns."""
    if episodes < 1:
        raise ValueError(f"--episodes must be a positive integer, got {episodes}")
    envs = make_vector_env(env_id, 1, render_mode="rgb_array" if video else None)
    actor = policy.numpy_actor()
    rng = np.random.default_rng(seed)
    low, high = envs.single_action_space.low, envs.single_action_space.high
    returns, lengths, frames = [], [], []
    try:
        for episode in range(episodes):
            obs, _ = envs.reset(seed=seed + episode)
            total, length, done = 0.0, 0, False
            while not done:
                if video and episode == 0:
                    frames.append(envs.envs[0].render())
                obs32 = obs.astype(np.float32)
                action = actor.mean(obs32) if deterministic else actor.sample(obs32, rng)
                obs, reward, terminated, truncated, _ = envs.step(np.clip(action, low, high))
                total += float(reward[0])
                length += 1
                done = bool(terminated[0] or truncated[0])
            returns.append(total)
            lengths.append(length)
    finally:
        envs.close()
    if video:
        write_video(video, frames, fps=int(envs.envs[0].metadata.get("render_fps", 30)) if envs.envs else 30)
    return EvaluationResult(returns, lengths)


def write_video(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """Encode RGB frames ``(H, W, 3)`` as an H.264 MP4 with the ffmpeg that imageio-ffmpeg ships."""
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimwrite(path, frames, fps=fps, macro_block_size=1)
