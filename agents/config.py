"""Command-line configuration: small frozen dataclasses, one per concern (tyro turns them into ``--help``).

Defaults reproduce the PPO paper's MuJoCo settings (Schulman et al. 2017, Table 3) plus the
implementation details of Huang et al. 2022; see docs/implementation_details.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro


@dataclass(frozen=True)
class Clip:
    """PPO-Clip: the clipped surrogate objective (paper eq. 7)."""

    clip_coef: float = 0.2
    """Clipping range epsilon: ratios outside [1 - eps, 1 + eps] get no gradient (paper: 0.2)."""


@dataclass(frozen=True)
class AdaptiveKL:
    """PPO-Penalty: KL-penalised surrogate with the paper's adaptive coefficient (section 4)."""

    kl_target: float = 0.01
    """d_targ: the KL(pi_old || pi) per update that the coefficient steers towards (paper's best: 0.01)."""
    initial_beta: float = 1.0
    """Starting penalty coefficient beta (paper: 1; it adapts within a few iterations)."""
    clip_fraction_reference: float = 0.2
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""


@dataclass(frozen=True)
class FixedKL:
    """KL-penalised surrogate with a constant coefficient (the paper's "fixed KL" ablation)."""

    beta: float = 3.0
    """Constant penalty coefficient (paper's best fixed value: 3)."""
    clip_fraction_reference: float = 0.2
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""


@dataclass(frozen=True)
class NoClip:
    """Plain importance-sampled surrogate, no clipping or penalty (the paper's first ablation)."""

    clip_fraction_reference: float = 0.2
    """Only for the logged clip fraction: the epsilon the diagnostic counts against."""


Objective = Union[
    Annotated[Clip, tyro.conf.subcommand("clip")],
    Annotated[AdaptiveKL, tyro.conf.subcommand("penalty")],
    Annotated[FixedKL, tyro.conf.subcommand("fixed-kl")],
    Annotated[NoClip, tyro.conf.subcommand("no-clip")],
]


def objective_name(objective: Clip | AdaptiveKL | FixedKL | NoClip) -> str:
    """The short name used on the command line and in run names."""
    return {Clip: "clip", AdaptiveKL: "penalty", FixedKL: "fixed-kl", NoClip: "no-clip"}[type(objective)]


@dataclass(frozen=True)
class MujocoEnvConfig:
    """A Gymnasium MuJoCo task (any v5 id, or another Box-action MuJoCo id)."""

    env_id: str = "Hopper-v5"
    """Gymnasium id, e.g. Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5, Humanoid-v5, InvertedPendulum-v5."""
    num_envs: int = 1
    """Parallel environments stepped in one process (SyncVectorEnv); the paper uses 1."""
    normalize_observations: bool = True
    """Running mean/var observation normalisation, clipped to +-10 (saved with the policy)."""
    scale_rewards: bool = True
    """Divide rewards by the std of a running discounted return, clipped to +-10."""


@dataclass(frozen=True)
class PPOConfig:
    """The PPO update and its schedule."""

    total_steps: int = 1_000_000
    """Environment steps to train for (summed over envs)."""
    num_steps: int = 2048
    """Steps per environment per iteration (paper's horizon T); batch = num_steps x num_envs."""
    epochs: int = 10
    """Passes over each batch (paper: 10)."""
    minibatch_size: int = 64
    """Transitions per gradient step (paper: 64); must divide the batch."""
    learning_rate: float = 3e-4
    """Adam step size (paper: 3e-4)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    adam_eps: float = 1e-5
    """Adam epsilon (openai/baselines uses 1e-5, torch's default is 1e-8)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    normalize_advantages: bool = True
    """Normalise advantages to mean 0, std 1 within each minibatch."""
    value_clip: float | None = None
    """Clip the value update to +-this around the old value (baselines ppo2 uses 0.2); None = off."""
    vf_coef: float = 0.5
    """Weight of the value loss (separate networks: it scales the critic's gradient and its share of the grad-norm clip)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (paper: none)."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm to this value."""
    target_kl: float | None = None
    """Early stopping: skip the remaining epochs once the mean k3 KL of an epoch exceeds this; None = off."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and of the value MLP (tanh)."""
    initial_log_std: float = 0.0
    """Initial state-independent log standard deviation of the Gaussian policy."""


@dataclass(frozen=True)
class RunConfig:
    """Where the run goes, how it is seeded, and what it runs on."""

    seed: int = 1
    """Seeds torch, numpy and the environments."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto = cuda when available, else cpu. Networks live there; environments stay on the CPU."""
    torch_threads: int = 1
    """torch.set_num_threads: 1 is fastest for small MLPs on a 2-core CPU (measured, docs/results.md)."""
    compile: bool = True
    """torch.compile the minibatch step (forward, backward and Adam in one graph); falls back to eager if it fails."""
    runs_dir: Path = Path("runs")
    """Parent folder of run folders."""
    run_name: str | None = None
    """Run folder name; default <env>__<objective>__s<seed>__<timestamp>."""
    checkpoint_every: int = 10
    """Write checkpoints/latest.pt every this many iterations (and always at the end)."""
    resume: Path | None = None
    """Resume the run in this folder from its latest checkpoint, with its saved config (other options are ignored)."""
    progress: bool = True
    """Show a progress bar with steps/s and the recent return."""


@dataclass(frozen=True)
class TrainConfig:
    """Train a PPO agent."""

    env: MujocoEnvConfig = MujocoEnvConfig()
    """The environment."""
    objective: Objective = Clip()
    """The policy objective: clip, penalty (adaptive KL), fixed-kl, no-clip."""
    ppo: PPOConfig = PPOConfig()
    """PPO hyperparameters."""
    run: RunConfig = RunConfig()
    """Run bookkeeping."""


def config_to_dict(config: TrainConfig) -> dict:
    """A JSON-ready dict of the config, with the objective's name recorded so it can be rebuilt."""
    data = dataclasses.asdict(config)
    data["objective"] = {"name": objective_name(config.objective), **data["objective"]}
    data["run"] = {k: str(v) if isinstance(v, Path) else v for k, v in data["run"].items()}
    data["ppo"]["hidden_sizes"] = list(config.ppo.hidden_sizes)
    return data


def config_from_dict(data: dict) -> TrainConfig:
    """Inverse of ``config_to_dict``; raises ValueError naming the first unknown or missing piece."""
    objectives = {"clip": Clip, "penalty": AdaptiveKL, "fixed-kl": FixedKL, "no-clip": NoClip}
    try:
        objective_fields = dict(data["objective"])
        objective_cls = objectives[objective_fields.pop("name")]
        run = dict(data["run"])
        for key in ("runs_dir", "resume"):
            run[key] = None if run[key] is None else Path(run[key])
        ppo = dict(data["ppo"])
        ppo["hidden_sizes"] = tuple(ppo["hidden_sizes"])
        return TrainConfig(
            env=MujocoEnvConfig(**data["env"]),
            objective=objective_cls(**objective_fields),
            ppo=PPOConfig(**ppo),
            run=RunConfig(**run),
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"config.json does not match this version of ppo ({error!r}); start a new run") from error


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says which and what to use instead."""


def validate_config(config: TrainConfig) -> None:
    """Raise ``ConfigError`` for the first impossible value, before anything is built or written."""
    env, ppo, run, objective = config.env, config.ppo, config.run, config.objective
    positive_ints = {
        "--num-envs": env.num_envs,
        "--num-steps": ppo.num_steps,
        "--epochs": ppo.epochs,
        "--minibatch-size": ppo.minibatch_size,
        "--total-steps": ppo.total_steps,
        "--torch-threads": run.torch_threads,
        "--checkpoint-every": run.checkpoint_every,
    }
    for flag, value in positive_ints.items():
        if value < 1:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    if any(size < 1 for size in ppo.hidden_sizes) or not ppo.hidden_sizes:
        raise ConfigError(f"--hidden-sizes must be one or more positive widths, got {ppo.hidden_sizes}")
    batch = ppo.num_steps * env.num_envs
    if ppo.minibatch_size > batch:
        raise ConfigError(f"--minibatch-size {ppo.minibatch_size} is larger than the batch (num_steps x num_envs = {batch}); lower it")
    if batch % ppo.minibatch_size:
        raise ConfigError(f"--minibatch-size {ppo.minibatch_size} does not divide the batch of {batch}; pick a divisor of {batch}")
    if ppo.total_steps < batch:
        raise ConfigError(f"--total-steps {ppo.total_steps} is less than one batch ({batch} = num_steps x num_envs); raise it")
    positive_floats = {"--learning-rate": ppo.learning_rate, "--adam-eps": ppo.adam_eps, "--max-grad-norm": ppo.max_grad_norm}
    if isinstance(objective, Clip):
        positive_floats["--clip-coef"] = objective.clip_coef
    if isinstance(objective, AdaptiveKL):
        positive_floats.update({"--kl-target": objective.kl_target, "--initial-beta": objective.initial_beta})
    if ppo.value_clip is not None:
        positive_floats["--value-clip"] = ppo.value_clip
    if ppo.target_kl is not None:
        positive_floats["--target-kl"] = ppo.target_kl
    for flag, value in positive_floats.items():
        if not value > 0:
            raise ConfigError(f"{flag} must be > 0, got {value}")
    for flag, value in {"--gamma": ppo.gamma, "--gae-lambda": ppo.gae_lambda}.items():
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{flag} must be in [0, 1], got {value}")
    non_negative = {"--vf-coef": ppo.vf_coef, "--ent-coef": ppo.ent_coef}
    if isinstance(objective, FixedKL):
        non_negative["--beta"] = objective.beta
    for flag, value in non_negative.items():
        if not value >= 0:
            raise ConfigError(f"{flag} must be >= 0, got {value}")
