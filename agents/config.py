"""Command-line configuration: small frozen dataclasses, one per concern (tyro turns them into ``--help``).

Defaults reproduce the PPO paper's MuJoCo settings (Schulman et al. 2017, Table 3) plus the
implementation details of Huang et al. 2022; see docs/implementation_details.md.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro

from envs.text.models import DEFAULT_MODEL
from envs.text.tasks import ArithmeticTaskConfig, CustomTaskConfig, SentimentTaskConfig


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


TaskConfig = Union[
    Annotated[SentimentTaskConfig, tyro.conf.subcommand("sentiment")],
    Annotated[ArithmeticTaskConfig, tyro.conf.subcommand("arithmetic")],
    Annotated[CustomTaskConfig, tyro.conf.subcommand("custom")],
]

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
    """Environment steps to train for: MuJoCo steps summed over envs; for text, generated tokens."""
    num_steps: int = 2048
    """MuJoCo: steps per environment per iteration (paper's horizon T); batch = num_steps x num_envs. Text: unused."""
    epochs: int = 10
    """Passes over each batch (paper: 10)."""
    minibatch_size: int = 64
    """Items per gradient step, must divide the batch: MuJoCo transitions (paper: 64); text sequences."""
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
    value_clip: float | None = 0.2
    """Clip the value update to +-this around the old value (baselines ppo2, CleanRL: 0.2; measured better on Hopper); None = off."""
    vf_coef: float = 0.5
    """Weight of the value loss (separate networks: it scales the critic's gradient and its share of the grad-norm clip)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (paper: none)."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm to this value."""
    target_kl: float | None = None
    """Early stopping: skip the remaining epochs once the mean k3 KL of an epoch exceeds this; None = off."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """MuJoCo: hidden layer widths of the policy and of the value MLP (tanh)."""
    initial_log_std: float = 0.0
    """MuJoCo: initial state-independent log standard deviation of the Gaussian policy."""


@dataclass(frozen=True)
class RunConfig:
    """Where the run goes, how it is seeded, and what it runs on."""

    seed: int = 1
    """Seeds torch, numpy and the environments."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto = cuda when available, else cpu. Networks live there; environments stay on the CPU."""
    torch_threads: int = 1
    """torch.set_num_threads; 0 = every core. 1 is fastest for small MLPs on a 2-core CPU, big LMs want every core (docs/results.md)."""
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


@dataclass(frozen=True)
class TextEnvConfig:
    """Token-level text generation: the language model, the task, sampling and the reference-KL leash."""

    model: str = DEFAULT_MODEL
    """A model directory, a GGUF file (path or <package>/<file>.gguf), 'tiny' (random, for smoke tests) or a Hugging Face id."""
    task: TaskConfig = SentimentTaskConfig()
    """The task: sentiment (default), arithmetic or custom."""
    prompts_per_iteration: int = 16
    """Prompts sampled per iteration (one completion each): the PPO batch in sequences."""
    max_new_tokens: int = 24
    """Token limit of a completion; reaching it ends the episode like EOS does."""
    max_prompt_tokens: int = 64
    """Longest prompt accepted, in tokens; longer prompts are an error."""
    temperature: float = 1.0
    """Sampling temperature, also applied to the log-probs PPO trains on (they must match)."""
    chat_template: bool = False
    """Wrap each prompt in the tokenizer's chat template as a user turn (for instruction-tuned models)."""
    forward_batch: int = 8
    """Sequences per sampling / reference / value forward pass: bounds memory whatever the batch size."""
    ref_kl_coef: float = 0.2
    """Initial beta_ref of the per-token penalty -beta_ref * (log pi - log pi_ref) (Ziegler et al.: 0.15-0.2)."""
    ref_kl_target: float | None = 6.0
    """Target summed KL to the reference per completion for the adaptive beta_ref (Ziegler: 6 nats); None = fixed."""
    ref_kl_horizon: int = 10_000
    """Horizon of the adaptive beta_ref controller, in sequences (Ziegler et al.: 10,000)."""
    eos_penalty: float | None = None
    """The "EOS trick": score given to a completion that never emits EOS; None = off."""
    normalize_scores: bool = False
    """Rescale task scores so the starting policy's (the reference's) first batch has mean 0, std 1."""
    whiten_advantages: bool = True
    """Whiten advantages over the whole batch with the response mask (before minibatching)."""
    critic_warmup: int = 0
    """Value-only updates for this many first iterations, before the policy starts to move."""
    separate_critic: bool = False
    """Give the critic its own copy of the LM instead of a head on the policy's last hidden state (2x memory)."""
    lora_rank: int = 0
    """Train LoRA adapters of this rank (peft) instead of all weights; the reference is the base with adapters off. 0 = full."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator (effective scale alpha / rank)."""
    dtype: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast for the LM on a CUDA device; the CPU always runs fp32."""
    samples_to_log: int = 4
    """Completions written to samples.jsonl and TensorBoard's text tab each iteration."""


TEXT_PPO_DEFAULTS = PPOConfig(
    total_steps=16 * 24 * 20,  # 20 iterations of 16 completions of 24 tokens: about 15 minutes on 2 CPU cores
    epochs=4,  # RLHF practice (reference.md: 4 PPO epochs)
    minibatch_size=4,
    learning_rate=1e-5,
    gamma=1.0,
    gae_lambda=0.95,
    normalize_advantages=False,  # whitened once over the batch instead (TextEnvConfig.whiten_advantages)
    value_clip=0.2,
    vf_coef=0.1,
    max_grad_norm=1.0,
)


@dataclass(frozen=True)
class TextTrainConfig:
    """Fine-tune a causal language model with PPO on a text task (ppo train text)."""

    text: TextEnvConfig = TextEnvConfig()
    """The model, the task and the text environment."""
    objective: Objective = Clip()
    """The policy objective: clip, penalty (adaptive KL), fixed-kl, no-clip."""
    ppo: PPOConfig = TEXT_PPO_DEFAULTS
    """PPO hyperparameters (text defaults: gamma 1, 4 epochs, vf coef 0.1, value clip 0.2)."""
    run: RunConfig = RunConfig(compile=False, torch_threads=0)
    """Run bookkeeping (text: eager, every core)."""


NAMED_CONFIGS = {
    "clip": Clip,
    "penalty": AdaptiveKL,
    "fixed-kl": FixedKL,
    "no-clip": NoClip,
    "sentiment": SentimentTaskConfig,
    "arithmetic": ArithmeticTaskConfig,
    "custom": CustomTaskConfig,
}
CONFIG_KINDS = {"mujoco": TrainConfig, "text": TextTrainConfig}


def config_kind(config: TrainConfig | TextTrainConfig) -> str:
    """'mujoco' or 'text'."""
    return "text" if isinstance(config, TextTrainConfig) else "mujoco"


def _to_json(value):
    if dataclasses.is_dataclass(value):
        data = {field.name: _to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
        names = [name for name, cls in NAMED_CONFIGS.items() if type(value) is cls]
        return {"name": names[0], **data} if names else data
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def config_to_dict(config: TrainConfig | TextTrainConfig) -> dict:
    """A JSON-ready dict of the config; unions record their member's name so ``config_from_dict`` can rebuild it."""
    return {"kind": config_kind(config), **_to_json(config)}


def _from_json(annotation, value):
    if value is None:
        return None
    if isinstance(value, dict) and "name" in value and value["name"] in NAMED_CONFIGS:
        fields = dict(value)
        return _dataclass_from_json(NAMED_CONFIGS[fields.pop("name")], fields)
    if dataclasses.is_dataclass(annotation):
        return _dataclass_from_json(annotation, value)
    is_union = typing.get_origin(annotation) in (Union, types.UnionType)
    members = [arg for arg in typing.get_args(annotation) if arg is not type(None)] if is_union else [annotation]
    if Path in members:
        return Path(value)
    if any(typing.get_origin(member) is tuple for member in members):
        return tuple(value)
    return value


def _dataclass_from_json(cls, data: dict):
    hints = typing.get_type_hints(cls)
    names = {field.name for field in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise KeyError(f"unknown field(s) {sorted(unknown)} for {cls.__name__}")
    return cls(**{name: _from_json(hints[name], item) for name, item in data.items()})


def config_from_dict(data: dict) -> TrainConfig | TextTrainConfig:
    """Inverse of ``config_to_dict``; raises ValueError naming the first unknown or missing piece."""
    try:
        fields = dict(data)
        return _dataclass_from_json(CONFIG_KINDS[fields.pop("kind", "mujoco")], fields)
    except (KeyError, TypeError) as error:
        raise ValueError(f"config.json does not match this version of ppo ({error!r}); start a new run") from error


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says which and what to use instead."""


def _check_positive_ints(values: dict[str, int]) -> None:
    for flag, value in values.items():
        if value < 1:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")


def _check_batch(batch: int, batch_flags: str, ppo: PPOConfig) -> None:
    if ppo.minibatch_size > batch:
        raise ConfigError(f"--minibatch-size {ppo.minibatch_size} is larger than the batch ({batch_flags} = {batch}); lower it")
    if batch % ppo.minibatch_size:
        raise ConfigError(f"--minibatch-size {ppo.minibatch_size} does not divide the batch of {batch}; pick a divisor of {batch}")


def _check_ppo_and_objective(ppo: PPOConfig, objective, run: RunConfig) -> None:
    _check_positive_ints({"--epochs": ppo.epochs, "--minibatch-size": ppo.minibatch_size, "--total-steps": ppo.total_steps, "--checkpoint-every": run.checkpoint_every})
    if run.torch_threads < 0:
        raise ConfigError(f"--torch-threads must be >= 0 (0 = every core), got {run.torch_threads}")
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


def validate_config(config: TrainConfig) -> None:
    """Raise ``ConfigError`` for the first impossible value, before anything is built or written."""
    env, ppo = config.env, config.ppo
    _check_ppo_and_objective(ppo, config.objective, config.run)
    _check_positive_ints({"--num-envs": env.num_envs, "--num-steps": ppo.num_steps})
    if any(size < 1 for size in ppo.hidden_sizes) or not ppo.hidden_sizes:
        raise ConfigError(f"--hidden-sizes must be one or more positive widths, got {ppo.hidden_sizes}")
    batch = ppo.num_steps * env.num_envs
    _check_batch(batch, "num_steps x num_envs", ppo)
    if ppo.total_steps < batch:
        raise ConfigError(f"--total-steps {ppo.total_steps} is less than one batch ({batch} = num_steps x num_envs); raise it")


def validate_text_config(config: TextTrainConfig) -> None:
    """``validate_config`` for text runs."""
    text, ppo = config.text, config.ppo
    _check_ppo_and_objective(ppo, config.objective, config.run)
    _check_positive_ints({"--prompts-per-iteration": text.prompts_per_iteration, "--max-new-tokens": text.max_new_tokens,
                          "--max-prompt-tokens": text.max_prompt_tokens, "--forward-batch": text.forward_batch, "--ref-kl-horizon": text.ref_kl_horizon})
    _check_batch(text.prompts_per_iteration, "--prompts-per-iteration", ppo)
    if not text.temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {text.temperature}")
    if not text.ref_kl_coef >= 0:
        raise ConfigError(f"--ref-kl-coef must be >= 0, got {text.ref_kl_coef}")
    if text.ref_kl_target is not None and not text.ref_kl_target > 0:
        raise ConfigError(f"--ref-kl-target must be > 0 (or None for a fixed coefficient), got {text.ref_kl_target}")
    if ppo.ent_coef != 0:
        raise ConfigError("--ent-coef must be 0 for text runs: the language model's entropy is logged but carries no gradient")
    if text.lora_rank < 0 or text.critic_warmup < 0:
        raise ConfigError(f"--lora-rank and --critic-warmup must be >= 0, got {text.lora_rank} and {text.critic_warmup}")
