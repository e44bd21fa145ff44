"""``ppo train text``: PPO fine-tuning of a causal LM on a text task, top to bottom, on the same PPO core as the walkers."""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers.utils.logging import disable_progress_bar

from agents.checkpoint import LATEST, CheckpointError, load_checkpoint, save_checkpoint, to_storable
from agents.config import NAMED_CONFIGS, TextTrainConfig, config_from_dict, config_to_dict, objective_name, validate_text_config
from agents.kl import FixedPenalty, ProportionalKL
from agents.lm import LMActorCritic, ReferencePolicy
from agents.logger import RunLogger, read_config, write_config
from agents.ppo import AdamState, UpdateSchedule, make_minibatch_step, ppo_update
from agents.text_rollout import TextBatchSettings, collect_text
from agents.train import make_penalty, new_run_dir, resolve_device
from envs.text.models import load_causal_lm, without_quantization
from envs.text.tasks import checked_scores, task_from_config

POLICY_DIR = "policy"


def task_name(config: TextTrainConfig) -> str:
    return next(name for name, cls in NAMED_CONFIGS.items() if type(config.text.task) is cls)


@dataclass
class ScoreNormaliser:
    """``--normalize-scores``: task scores become ``(score - shift) / scale``, where the first batch it sees
    (sampled by the starting policy, i.e. the reference) fixes shift and scale to give that batch mean 0 and
    std 1 (reference.md: reward normalisation). Saved in checkpoints, so a resumed run keeps them."""

    shift: float = 0.0
    scale: float = 1.0
    calibrated: bool = True
    """False until the first batch has fixed shift and scale."""

    def __call__(self, rewards: list[float]) -> list[float]:
        if not self.calibrated:
            raw = torch.tensor(rewards)
            self.shift, self.scale = float(raw.mean()), float(raw.std().clamp(min=1e-6)) if len(raw) > 1 else 1.0
            self.calibrated = True
        return [(r - self.shift) / self.scale for r in rewards]


def make_reference_controller(config: TextTrainConfig) -> ProportionalKL | FixedPenalty:
    """beta_ref: Ziegler's proportional controller when a target is set, else fixed."""
    text = config.text
    if text.ref_kl_target is None:
        return FixedPenalty(beta=text.ref_kl_coef)
    return ProportionalKL(beta=text.ref_kl_coef, kl_target=text.ref_kl_target, horizon=text.ref_kl_horizon)


def build_policy(config: TextTrainConfig, device: torch.device) -> tuple[LMActorCritic, ReferencePolicy, object]:
    """The trained actor-critic, its frozen reference, and the tokenizer."""
    lm, tokenizer, _ = load_causal_lm(config.text.model)
    if config.text.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(r=config.text.lora_rank, lora_alpha=config.text.lora_alpha, lora_dropout=0.0, target_modules="all-linear"))
    policy = LMActorCritic(lm, temperature=config.text.temperature, separate_critic=config.text.separate_critic).to(device)
    reference = ReferencePolicy(policy.lm, share_base_with_lora=config.text.lora_rank > 0)
    return policy, reference, tokenizer


def format_prompts(tokenizer, prompts: list[str], chat_template: bool) -> list[str]:
    """Optionally wrap each prompt as a user turn of the tokenizer's chat template, ready for the assistant's answer."""
    if not chat_template:
        return prompts
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in prompts]


def text_diagnostics(response_ids: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """Reward-hacking signs: mean length, distinct-token ratio and bigram repetition rate of the completions."""
    lengths = response_mask.sum(-1)
    distinct, repeated = [], []
    for ids, n in zip(response_ids.tolist(), lengths.tolist()):
        tokens = ids[: int(n)]
        if not tokens:
            continue
        distinct.append(len(set(tokens)) / len(tokens))
        bigrams = list(zip(tokens, tokens[1:]))
        counts = Counter(bigrams)
        repeated.append(sum(c - 1 for c in counts.values()) / len(bigrams) if bigrams else 0.0)
    return {
        "response_length": float(lengths.float().mean()),
        "distinct_token_ratio": float(np.mean(distinct)) if distinct else float("nan"),
        "repetition_rate": float(np.mean(repeated)) if repeated else float("nan"),
    }


def save_policy_directory(policy: LMActorCritic, tokenizer, directory: Path) -> None:
    """Write the trained LM as an ordinary Hugging Face folder (``AutoModelForCausalLM.from_pretrained`` loads it),
    with LoRA merged, plus ``value_head.pt``."""
    lm = policy.lm
    if hasattr(lm, "merge_and_unload"):
        import copy

        lm = copy.deepcopy(lm).merge_and_unload()
    if getattr(lm.config, "quantization_config", None) is not None:
        lm = without_quantization(lm)
    directory.mkdir(parents=True, exist_ok=True)
    lm.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    torch.save(policy.value_head.state_dict(), directory / "value_head.pt")


def train_text(config: TextTrainConfig) -> Path:
    """PPO on a text task as ``config`` says; returns the run folder."""
    resume_dir = config.run.resume
    if resume_dir is not None:
        saved = config_from_dict(read_config(resume_dir))
        if not isinstance(saved, TextTrainConfig):
            raise ValueError(f"{resume_dir} is a MuJoCo run; resume it with ppo train --resume")
        config = replace(saved, run=replace(saved.run, resume=resume_dir, progress=config.run.progress))
    validate_text_config(config)
    text, ppo_cfg, run_cfg = config.text, config.ppo, config.run
    torch.set_num_threads(run_cfg.torch_threads or os.cpu_count() or 1)
    device = resolve_device(run_cfg.device)
    if text.dtype == "bf16" and device.type != "cuda":
        raise ValueError("--dtype bf16 needs a CUDA device; on the CPU the model runs in fp32 (drop --dtype)")
    checkpoint = load_checkpoint(resume_dir, map_location=device) if resume_dir is not None else None

    # Model and reference first (a wrong --model fails before a reward model is trained), then the task
    disable_progress_bar()  # the console shows our progress bar only; weights load from local files
    torch.manual_seed(run_cfg.seed)
    policy, reference, tokenizer = build_policy(config, device)
    task = task_from_config(text.task)
    train_prompts = task.prompts("train")
    params = {name: p.detach() for name, p in policy.named_parameters() if p.requires_grad}
    adam = AdamState(params)
    penalty = make_penalty(config)
    reference_kl = make_reference_controller(config)
    sampling_generator = torch.Generator().manual_seed(run_cfg.seed)
    minibatch_generator = torch.Generator().manual_seed(run_cfg.seed + 1)
    prompt_rng = np.random.default_rng(run_cfg.seed)
    normalise_scores = ScoreNormaliser(calibrated=not text.normalize_scores)
    global_step, start_iteration = 0, 0

    if checkpoint is None:
        run_dir = new_run_dir(run_cfg, f"text-{task_name(config)}", objective_name(config.objective))
        write_config(run_dir, config_to_dict(config))
    else:
        run_dir = Path(resume_dir)
        missing = set(params) - set(checkpoint["trainable"])
        if missing or checkpoint.get("kind") != "text":
            raise CheckpointError(f"checkpoint {resume_dir} does not fit this model ({len(missing)} trainable tensors missing); start a new run")
        with torch.no_grad():
            for name, tensor in params.items():
                tensor.copy_(checkpoint["trainable"][name])
        adam.load_state_dict(checkpoint["adam"])
        penalty.load_state_dict(checkpoint["penalty"])
        reference_kl.load_state_dict(checkpoint["reference_kl"])
        sampling_generator.set_state(checkpoint["sampling_rng"])
        minibatch_generator.set_state(checkpoint["minibatch_rng"])
        prompt_rng.bit_generator.state = checkpoint["prompt_rng"]
        torch.set_rng_state(checkpoint["torch_rng"])
        normalise_scores = ScoreNormaliser(checkpoint["score_shift"], checkpoint["score_scale"])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"]
    logger = RunLogger(run_dir, start_iteration if checkpoint else None, global_step if checkpoint else None)
    minibatch_step = make_minibatch_step(policy, config.objective, ppo_cfg, run_cfg.compile)

    def precision():
        """bf16 autocast on CUDA when asked (weights, value head and optimiser stay fp32); fp32 otherwise."""
        return torch.autocast("cuda", dtype=torch.bfloat16) if text.dtype == "bf16" else contextlib.nullcontext()

    settings = TextBatchSettings(text.max_new_tokens, text.max_prompt_tokens, text.temperature, text.forward_batch,
                                 ppo_cfg.gamma, ppo_cfg.gae_lambda, text.eos_penalty, text.whiten_advantages)

    def score(prompts: list[str], completions: list[str]):
        """Checked task scores, normalised when --normalize-scores is on."""
        scores = checked_scores(task, prompts, completions)
        return normalise_scores(scores.rewards), scores.metrics

    progress = tqdm(total=ppo_cfg.total_steps, initial=min(global_step, ppo_cfg.total_steps), unit="tok", disable=not run_cfg.progress, dynamic_ncols=True)
    iteration = start_iteration
    try:
        while global_step < ppo_cfg.total_steps:
            iteration += 1
            started = time.perf_counter()
            fraction_left = 1.0 - global_step / ppo_cfg.total_steps if ppo_cfg.anneal_lr else 1.0
            warming_up = iteration <= text.critic_warmup
            schedule = UpdateSchedule(learning_rate=fraction_left * ppo_cfg.learning_rate, beta=penalty.beta)

            raw_prompts = [train_prompts[i] for i in prompt_rng.integers(len(train_prompts), size=text.prompts_per_iteration)]
            prompts = format_prompts(tokenizer, raw_prompts, text.chat_template)
            with precision():
                rollout = collect_text(policy, reference, tokenizer, prompts, score, settings, reference_kl.beta, sampling_generator)
            global_step += rollout.tokens
            collected = time.perf_counter()

            policy.train(False)  # dropout stays off during updates: the ratio must start at 1 (reference.md)
            update_params = {n: p for n, p in params.items() if n.startswith("value_head") or n.startswith("critic_lm")} if warming_up else params
            with precision():
                result = ppo_update(policy, update_params, adam, minibatch_step, rollout.batch, ppo_cfg, schedule, minibatch_generator, evaluation_chunk=text.forward_batch)
            penalty.update(result.kl_after_update)
            mean_ref_kl = float(rollout.ref_kl.mean())
            reference_kl.update(mean_ref_kl, text.prompts_per_iteration)
            finished = time.perf_counter()

            metrics = {
                "iteration": iteration,
                "global_step": global_step,
                "reward": float(np.mean([s for s in rollout.scores.tolist()])),
                **{f"task_{name}": float(np.mean(values)) for name, values in rollout.task_metrics.items()},
                "ref_kl": mean_ref_kl,
                "ref_kl_coef": reference_kl.beta,
                "non_score_reward": -reference_kl.beta * mean_ref_kl,
                "eos_rate": float(rollout.ended.float().mean()),
                **text_diagnostics(rollout.response_ids, rollout.response_mask),
                "critic_warmup": float(warming_up),
                "learning_rate": schedule.learning_rate,
                "beta": schedule.beta,
                "beta_next": penalty.beta,
                **result.stats,
                "sps": rollout.tokens / (finished - started),
                "rollout_seconds": collected - started,
                "update_seconds": finished - collected,
            }
            logger.log(metrics)
            rows = [{"prompt": p, "completion": c, "score": s} for p, c, s in zip(raw_prompts, rollout.completions, rollout.scores.tolist())][: text.samples_to_log]
            if rows:
                logger.log_samples(iteration, global_step, rows)
            progress.update(min(rollout.tokens, ppo_cfg.total_steps - progress.n))
            progress.set_postfix(reward=f"{metrics['reward']:.2f}", kl=f"{mean_ref_kl:.2f}", refresh=False)

            done = global_step >= ppo_cfg.total_steps
            if iteration % run_cfg.checkpoint_every == 0 or done:
                save_checkpoint(
                    {
                        "kind": "text",
                        "config": config_to_dict(config),
                        "trainable": {name: tensor for name, tensor in params.items()},
                        "adam": adam.state_dict(),
                        "penalty": penalty.state_dict(),
                        "reference_kl": reference_kl.state_dict(),
                        "sampling_rng": sampling_generator.get_state(),
                        "minibatch_rng": minibatch_generator.get_state(),
                        "prompt_rng": to_storable(prompt_rng.bit_generator.state),
                        "torch_rng": torch.get_rng_state(),
                        "score_shift": normalise_scores.shift,
                        "score_scale": normalise_scores.scale,
                        "global_step": global_step,
                        "iteration": iteration,
                    },
                    run_dir / "checkpoints" / LATEST,
                )
        save_policy_directory(policy, tokenizer, run_dir / POLICY_DIR)
    finally:
        progress.close()
        logger.close()
    return run_dir

