"""``ppo train text``: PPO fine-tuning of a causal LM on a text task, top to bottom, on the same PPO core as
the walkers; with a group-relative objective (grpo, dr-grpo, rloo, dapo) each prompt is sampled G times and
no critic is built.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from transformers.utils.logging import disable_progress_bar

from agents.core.distributed import (
    all_reduce_sum,
    full_from_shards,
    gather_objects,
    local_shard,
    rank,
    shard_of,
    world_size,
)
from agents.core.kl import FixedPenalty, KLController, ProportionalKL
from agents.core.minibatch_step import make_minibatch_step
from agents.core.objectives import uses_critic
from agents.core.optimizer import AdamState
from agents.core.update import ppo_update
from agents.runs.checkpoint import (
    CheckpointError,
    checkpoint_path,
    global_rng_state,
    restore_global_rng_state,
    to_storable,
)
from agents.runs.iteration import IterationClock, RunProgress, broadcast_trainable, update_metrics, update_schedule
from agents.runs.memory import largest_peaks, peak_memory_gb, reset_peak_memory
from agents.runs.session import checkpoint_due, open_run_folder, prepare_run, save_loop_state
from agents.text.actor_critic import POLICY_DIR, LMActorCritic, build_policy, save_policy_directory
from agents.text.config import (
    TextEnvConfig,
    TextTrainConfig,
    reference_kl_coef,
    reference_kl_placement,
    validate_text_config,
)
from agents.text.dialogue import DialogueSettings, GameGroups, heldout_game_metrics
from agents.text.evaluate import heldout_metrics
from agents.text.metrics import (
    group_metrics,
    mean_over_processes,
    reference_kl_metrics,
    sampler_metrics,
    sampling_metrics,
    score_metrics,
    text_diagnostics,
    turn_metrics,
)
from agents.text.proxy import PROXY_REPORT_FILE, run_task
from agents.text.rollout import PromptDraws, PromptGroups, TextBatchSettings, build_text_batch, sample_batch
from agents.text.sharding import gathered_weights, shard_policy, unsharded_copy
from envs.text.games import game_factory, is_game_config
from envs.text.tasks import Task, checked_scores


@dataclass
class ScoreNormalizer:
    """``--normalize-scores``: task scores become ``(score - shift) / scale``, where the first batch it sees
    (sampled by the starting policy, i.e. the reference) fixes shift and scale to give that batch mean 0 and
    std 1 (reward normalisation of Ziegler et al. 2019). Saved in checkpoints, so a resumed run keeps them."""

    shift: float = 0.0
    scale: float = 1.0
    calibrated: bool = True
    """False until the first batch has fixed shift and scale."""

    def __call__(self, rewards: list[float]) -> list[float]:
        if not self.calibrated:
            raw = torch.tensor([r for part in gather_objects(rewards) for r in part])  # every process's batch
            self.shift, self.scale = float(raw.mean()), float(raw.std().clamp(min=1e-6)) if len(raw) > 1 else 1.0
            self.calibrated = True
        return [(r - self.shift) / self.scale for r in rewards]


def make_reference_controller(config: TextTrainConfig) -> KLController:
    """beta_ref: Ziegler's proportional controller for a KL in the reward with a target, else fixed (in the loss,
    GRPO's beta is a constant; with the KL nowhere it is 0)."""
    text, coef = config.text, reference_kl_coef(config)
    if text.ref_kl_target is None or reference_kl_placement(config) != "reward":
        return FixedPenalty(beta=coef)
    return ProportionalKL(beta=coef, kl_target=text.ref_kl_target, horizon=text.ref_kl_horizon)


MOMENTS = ("exp_avg", "exp_avg_sq")
"""The Adam state's per-parameter tensors, sharded like the parameters under --fsdp."""


@dataclass
class TextLoopState:
    """Everything that decides the rest of a text run: trainable weights, optimiser, controllers, RNGs, score scale."""

    shared_keys: ClassVar[frozenset[str]] = frozenset(
        {"trainable", "adam", "penalty", "reference_kl", "score_shift", "score_scale", "global_step", "iteration"}
    )

    params: dict[str, torch.Tensor]
    """The trainable tensors (all weights and the value head, or LoRA adapters and the value head)."""
    adam: AdamState
    penalty: KLController
    """The objective's KL coefficient (PPO-Penalty's beta)."""
    reference_kl: KLController
    """beta_ref of the per-token KL leash to the reference."""
    sampling_generator: torch.Generator
    minibatch_generator: torch.Generator
    prompt_rng: np.random.Generator
    prompt_draws: PromptDraws
    """Which training prompts come next (reads ``prompt_rng``); games draw their seeds from ``prompt_rng``."""
    score_normalizer: ScoreNormalizer
    device: torch.device
    global_step: int = 0
    iteration: int = 0

    def state_dict(self) -> dict:
        return {
            "trainable": self.whole({name: local_shard(p) for name, p in self.params.items()}),
            "adam": {**self.adam.state_dict(), **{key: self.whole(getattr(self.adam, key)) for key in MOMENTS}},
            "penalty": self.penalty.state_dict(),
            "reference_kl": self.reference_kl.state_dict(),
            "sampling_rng": self.sampling_generator.get_state(),
            "minibatch_rng": self.minibatch_generator.get_state(),
            "prompt_rng": to_storable(self.prompt_rng.bit_generator.state),
            "prompt_pass": {"order": self.prompt_draws.order, "position": self.prompt_draws.position},
            **global_rng_state(),
            "score_shift": self.score_normalizer.shift,
            "score_scale": self.score_normalizer.scale,
            "global_step": self.global_step,
            "iteration": self.iteration,
        }

    def whole(self, shards: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Whole tensors from this process's shards of trainable tensors (or of their Adam moments) under
        ``--fsdp``, gathered from every process; the tensors themselves otherwise."""
        return {name: full_from_shards(shard, self.params[name]) for name, shard in shards.items()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of ``state_dict``; a ``CheckpointError`` if the checkpoint's weights do not fit this model."""
        missing = set(self.params) - set(state.get("trainable", {}))
        if missing:
            raise CheckpointError(
                f"checkpoint does not fit this model ({len(missing)} trainable tensors missing); start a new run"
            )
        with torch.no_grad():
            for name, tensor in self.params.items():
                local_shard(tensor).copy_(shard_of(state["trainable"][name], tensor))
        adam = state["adam"]
        shards = {key: {name: shard_of(t, self.params[name]) for name, t in adam[key].items()} for key in MOMENTS}
        self.adam.load_state_dict({**adam, **shards})
        self.penalty.load_state_dict(state["penalty"])
        self.reference_kl.load_state_dict(state["reference_kl"])
        self.sampling_generator.set_state(state["sampling_rng"])
        self.minibatch_generator.set_state(state["minibatch_rng"])
        self.prompt_rng.bit_generator.state = state["prompt_rng"]
        prompt_pass = state.get("prompt_pass", {"order": [], "position": 0})  # checkpoints before it: none taken
        self.prompt_draws.order, self.prompt_draws.position = list(prompt_pass["order"]), prompt_pass["position"]
        restore_global_rng_state(state, self.device)
        self.score_normalizer = ScoreNormalizer(state["score_shift"], state["score_scale"])
        self.global_step, self.iteration = state["global_step"], state["iteration"]


def task_scores(task: Task, normaliser: ScoreNormalizer, prompts: list[str], completions: list[str]):
    """Checked task scores, normalised when --normalize-scores is on, and the task's metrics."""
    scores = checked_scores(task, prompts, completions)
    return normaliser(scores.rewards), scores.metrics


def precision(text: TextEnvConfig, device: torch.device):
    """bf16 autocast on the run's device when asked (weights, value head and optimiser stay fp32); else fp32."""
    bf16 = text.dtype == "bf16"
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def evaluate(policy: LMActorCritic, heldout: Callable, config: TextTrainConfig, device) -> dict[str, float]:
    """Held-out scores of the policy as it is now (``--eval-every``), with the same noise every time:
    ``heldout(lm, seed)`` is the task's ``heldout_metrics`` or the game's ``heldout_game_metrics``."""
    policy.eval()
    reset_peak_memory(device)
    with precision(config.text, device), gathered_weights(policy):
        metrics = heldout(policy.lm, seed=config.run.seed)
    return {**metrics, **largest_peaks({"eval_peak_gb": peak_memory_gb(device)})}


def train_text(config: TextTrainConfig) -> Path:
    """PPO on a text task as ``config`` says; returns the run folder."""
    config, device, checkpoint = prepare_run(config, validate_text_config)
    text, ppo_cfg, run_cfg, objective = config.text, config.ppo, config.run, config.objective
    plan = objective.sampling_plan()  # plan.group_size completions per prompt
    placement = reference_kl_placement(config)

    # Model and reference first (a wrong --model fails before a reward model is trained), then the task
    disable_progress_bar()  # the console shows our progress bar only; weights load from local files
    torch.manual_seed(run_cfg.seed)
    policy, reference, tokenizer = build_policy(config, device)
    process_seed = run_cfg.seed + rank()  # every process samples its own prompts and completions
    playing = is_game_config(text.task)  # a multi-turn game instead of a single-turn task
    # a proxy reward is fitted to the starting policy's samples, before any update or sharding
    task = None if playing else run_task(text, starting_model=lambda: (policy.lm, tokenizer))
    new_game = game_factory(text.task) if playing else None  # a game that cannot be built fails here
    params = broadcast_trainable(policy)  # identical initial weights on every process
    if text.fsdp:
        shard_policy(policy, reference, device)  # each process keeps its shard of the weights it was given
        params = {name: p.detach() for name, p in policy.named_parameters() if p.requires_grad}
    critic_params = {name: p for name, p in params.items() if name in policy.critic_parameter_names()}
    prompt_rng = np.random.default_rng(process_seed)
    train_prompts = [] if playing else task.prompts("train")
    state = TextLoopState(
        params=params,
        adam=AdamState({name: local_shard(p) for name, p in params.items()}),
        penalty=objective.kl_controller(),
        reference_kl=make_reference_controller(config),
        sampling_generator=torch.Generator().manual_seed(process_seed),
        minibatch_generator=torch.Generator().manual_seed(process_seed + 1),
        prompt_rng=prompt_rng,
        prompt_draws=PromptDraws(len(train_prompts), prompt_rng, text.prompts_without_replacement),
        score_normalizer=ScoreNormalizer(calibrated=not text.normalize_scores),
        device=device,
    )
    run_dir, logger = open_run_folder(config, f"text-{text.task.name}", objective.name, state, checkpoint)
    if text.reward == "proxy" and rank() == 0:
        (run_dir / PROXY_REPORT_FILE).write_text(json.dumps(task.report._asdict(), indent=1) + "\n")
    loss_kl_coef = reference_kl_coef(config) if placement == "loss" else 0.0
    minibatch_step = make_minibatch_step(
        policy,
        objective,
        ppo_cfg,
        run_cfg.compile,
        reference_kl_coef=loss_kl_coef,
        sharded=text.fsdp,
        reference_kl_estimator=text.ref_kl_estimator,
    )
    settings = TextBatchSettings.from_config(config)
    if playing:  # episodes of the game, G of each seed side by side
        sample_groups = GameGroups(
            policy, tokenizer, new_game, settings, DialogueSettings.from_text(text), state.prompt_rng,
            state.sampling_generator,
        )  # fmt: skip
        heldout = functools.partial(heldout_game_metrics, tokenizer=tokenizer, new_game=new_game, text=text)
    else:
        score = functools.partial(task_scores, task, state.score_normalizer)
        sample_groups = PromptGroups(
            policy, tokenizer, train_prompts, text.chat_template, score, settings, state.prompt_draws,
            state.sampling_generator,
        )  # fmt: skip
        heldout = functools.partial(heldout_metrics, tokenizer=tokenizer, task=task, text=text)
    groups_wanted = text.prompts_per_iteration // world_size() // plan.group_size

    progress = RunProgress(run_cfg, ppo_cfg.total_steps, min(state.global_step, ppo_cfg.total_steps), unit="tok")
    try:
        if text.eval_every and state.iteration == 0:  # the starting policy, before any update
            logger.log({"iteration": 0, "global_step": 0, **evaluate(policy, heldout, config, device)})
        while state.global_step < ppo_cfg.total_steps:
            state.iteration += 1
            iteration = state.iteration
            clock = IterationClock()
            warming_up = iteration <= text.critic_warmup
            schedule = update_schedule(ppo_cfg, state.global_step / ppo_cfg.total_steps, state.penalty)

            reset_peak_memory(device)
            with precision(text, device), gathered_weights(policy):
                sampled = sample_batch(sample_groups, groups_wanted, plan)
            clock.sampling_done()
            with precision(text, device):  # under --fsdp on shards: every process runs the same number of forwards
                rollout = build_text_batch(
                    policy, reference, tokenizer, sampled.samples, settings, state.reference_kl.beta
                )
            tokens = int(all_reduce_sum(torch.tensor(sampled.generated_tokens)))  # every process's, dropped too
            state.global_step += tokens
            clock.rollout_done()
            rollout_peak = peak_memory_gb(device)
            reset_peak_memory(device)

            policy.train(False)  # dropout stays off during updates: the ratio must start at 1 (lm-human-preferences)
            with precision(text, device):
                result = ppo_update(
                    policy,
                    critic_params if warming_up else params,
                    state.adam,
                    minibatch_step,
                    rollout.batch,
                    ppo_cfg,
                    schedule,
                    state.minibatch_generator,
                    evaluation_chunk=text.forward_batch,
                )
            state.penalty.update(result.kl_after_update, rollout.batch.size * world_size())
            mean_ref_kl = None  # no reference is run where its KL weighs nothing
            if rollout.ref_kl is not None:
                mean_ref_kl = mean_over_processes(rollout.ref_kl)
                state.reference_kl.update(mean_ref_kl, text.prompts_per_iteration)
            clock.update_done()
            update_peak = peak_memory_gb(device)

            metrics = {
                "iteration": iteration,
                "global_step": state.global_step,
                **score_metrics(rollout),
                **reference_kl_metrics(mean_ref_kl, state.reference_kl.beta, placement),
                "eos_rate": mean_over_processes(rollout.ended.float()),
                **text_diagnostics(rollout),
                **turn_metrics(rollout, critic=uses_critic(objective)),
                **sampler_metrics(rollout),
                **group_metrics(rollout, plan.group_size),
                **sampling_metrics(sampled, plan),
                "critic_warmup": float(warming_up),
                **update_metrics(schedule, state.penalty, result),
                **clock.metrics(tokens),
                **largest_peaks({"rollout_peak_gb": rollout_peak, "update_peak_gb": update_peak}),
            }
            last = state.global_step >= ppo_cfg.total_steps
            if text.eval_every and (iteration % text.eval_every == 0 or last):
                metrics.update(evaluate(policy, heldout, config, device))
            logger.log(metrics)
            rows = sample_groups.logged_rows(rollout, text.samples_to_log)
            if rows:
                logger.log_samples(iteration, state.global_step, rows)
            shown = {} if mean_ref_kl is None else {"kl": f"{mean_ref_kl:.2f}"}
            progress.advance(tokens, reward=f"{metrics['reward']:.2f}", **shown)

            if checkpoint_due(iteration, run_cfg, last=last) and (text.keep_checkpoint or not last):
                save_loop_state(config, run_dir, state)
        exported = unsharded_copy(policy) if text.fsdp else policy
        if rank() == 0:
            save_policy_directory(exported, tokenizer, run_dir / POLICY_DIR)
            if not text.keep_checkpoint:
                checkpoint_path(run_dir).unlink(missing_ok=True)  # an earlier iteration's; policy/ has the final one
    finally:
        progress.close()
        logger.close()
    return run_dir
