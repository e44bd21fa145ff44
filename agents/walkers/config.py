"""``ppo train``'s configuration: the MuJoCo task, the Gaussian policy, the objective, PPO and the run.

Defaults reproduce the PPO paper's MuJoCo settings (Schulman et al. 2017, Table 3) plus the
implementation details of Huang et al. 2022; see docs/implementation_details.md. ``--preset tuned`` starts
from a task's published recipe instead (agents/walkers/presets.py, ``preset_config``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from agents.core.config import ConfigError, PPOConfig, check_batch, check_positive_ints, validate_ppo
from agents.core.distributed import world_size
from agents.core.objectives import Clip, uses_critic
from agents.runs.config import ObjectiveSubcommand, RunConfig, validate_run
from agents.walkers.gaussian import ACTIVATIONS
from agents.walkers.presets import PRESETS, TUNED, with_settings


@dataclass(frozen=True)
class MujocoEnvConfig:
    """A Gymnasium MuJoCo task (any v5 id, or another Box-action MuJoCo id) and how it is sampled."""

    env_id: str = "Hopper-v5"
    """Gymnasium id, e.g. Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5, Humanoid-v5, InvertedPendulum-v5."""
    num_envs: int = 1
    """Parallel environments stepped in each process; the paper uses 1."""
    env_threads: int = 0
    """Threads stepping the environments when --num-envs > 1 (mujoco.batch, bit-identical to Gymnasium's envs at any
    count); 0: the CPUs this process may use, shared among torchrun's processes on the machine. Tasks without a
    batched form step Gymnasium's environments one by one."""
    num_steps: int = 2048
    """Steps per environment per iteration (paper's horizon T); batch = num_steps x num_envs x processes."""
    normalize_observations: bool = True
    """Running mean/var observation normalisation, clipped to +-10 (saved with the policy)."""
    scale_rewards: bool = True
    """Divide rewards by the std of a running discounted return, clipped to +-10."""


@dataclass(frozen=True)
class GaussianPolicyConfig:
    """The Gaussian MLP actor-critic."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and of the value MLP."""
    initial_log_std: float = 0.0
    """Initial state-independent log standard deviation of the Gaussian policy."""
    activation: str = "tanh"
    """Nonlinearity of the hidden layers: tanh (the paper, CleanRL) or relu (rl-baselines3-zoo's tuned MuJoCo
    recipes, activation_fn=nn.ReLU)."""
    orthogonal_init: bool = True
    """Orthogonal weights (gain sqrt(2) hidden, 0.01 action mean, 1 value) and zero biases (Huang et al. 2022,
    detail 2); --no-orthogonal-init keeps torch's default nn.Linear init (SB3's ortho_init=False, the zoo's tuned
    recipes)."""


@dataclass(frozen=True)
class TrainConfig:
    """Train a PPO agent on a MuJoCo walker; `ppo train text` trains a language model instead (see its --help)."""

    kind: ClassVar[str] = "mujoco"

    preset: str = "paper"
    """Settings per task, paper or tuned: paper = the PPO paper's (the defaults shown without --preset); tuned = the
    published recipe for --env-id in agents/walkers/presets.py, pending our sweep. Options given here override
    either."""
    env: MujocoEnvConfig = MujocoEnvConfig()
    """The environment."""
    objective: ObjectiveSubcommand = Clip()
    """The policy objective: a name of the core's registry (``ppo train --help`` lists them)."""
    ppo: PPOConfig = PPOConfig()
    """PPO hyperparameters."""
    policy: GaussianPolicyConfig = GaussianPolicyConfig()
    """The policy network."""
    run: RunConfig = RunConfig()
    """Run bookkeeping."""


def validate_config(config: TrainConfig) -> None:
    """Raise ``ConfigError`` for the first impossible value, before anything is built or written."""
    env, ppo = config.env, config.ppo
    validate_ppo(ppo)
    config.objective.validate()
    if config.objective.advantage_estimator == "gigpo":
        raise ConfigError(
            "gigpo groups the turns of multi-turn text games that reached the same state, and a walker's continuous "
            "states never repeat: train it with ppo train text on a game, or use grpo on walkers"
        )
    if not uses_critic(config.objective) and ppo.recompute_advantages:
        raise ConfigError(
            f"--recompute-advantages recomputes the critic's advantages, and {config.objective.name} has no critic: "
            "drop it"
        )
    if not uses_critic(config.objective) and env.num_envs != 1:
        raise ConfigError(
            f"{config.objective.name} steps --group-size environments side by side (one group of episodes); "
            f"drop --num-envs {env.num_envs}"
        )
    validate_run(config.run)
    check_positive_ints({"--num-envs": env.num_envs, "--num-steps": env.num_steps})
    if env.env_threads < 0:
        raise ConfigError(f"--env-threads must be >= 0 (0: the CPUs there are), got {env.env_threads}")
    if any(size < 1 for size in config.policy.hidden_sizes) or not config.policy.hidden_sizes:
        raise ConfigError(f"--hidden-sizes must be one or more positive widths, got {config.policy.hidden_sizes}")
    if config.policy.activation not in ACTIVATIONS:
        raise ConfigError(f"--activation must be one of {', '.join(ACTIVATIONS)}, got {config.policy.activation!r}")
    if config.preset not in PRESETS:
        raise ConfigError(f"--preset must be one of {', '.join(PRESETS)}, got {config.preset!r}")
    if config.preset == "tuned" and env.env_id not in TUNED:
        raise ConfigError(
            f"--preset tuned has no settings for {env.env_id}; tasks with tuned settings: {', '.join(TUNED)} "
            "(or --preset paper)"
        )
    processes = world_size()
    batch = env.num_steps * env.num_envs * processes
    batch_flags = "num_steps x num_envs" + (f" x {processes} processes" if processes > 1 else "")
    check_batch(batch, batch_flags, ppo)
    if ppo.total_steps < batch:
        raise ConfigError(f"--total-steps {ppo.total_steps} is less than one batch ({batch} = {batch_flags}); raise it")


def preset_config(preset: str, env_id: str) -> TrainConfig:
    """The defaults ``--preset`` chooses for ``env_id``, which the command line's options then override: the paper's
    (``TrainConfig()`` on ``env_id``), or the paper's with the task's tuned settings. An unknown name, or a task
    without tuned settings, gets the paper's values under its name, which ``validate_config`` then rejects."""
    config = replace(TrainConfig(), env=replace(TrainConfig().env, env_id=env_id))
    tuned = TUNED.get(env_id) if preset == "tuned" else None
    return with_settings(replace(config, preset=preset), tuned.settings if tuned else ())
