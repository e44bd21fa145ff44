"""``ppo train``: the training loop, top to bottom (after CleanRL's ppo_continuous_action.py)."""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from agents.checkpoint import LATEST, CheckpointError, from_storable, load_checkpoint, save_checkpoint, to_storable
from agents.config import AdaptiveKL, FixedKL, RunConfig, TrainConfig, config_from_dict, config_to_dict, objective_name, validate_config
from agents.gaussian import GaussianActorCritic
from agents.kl import AdaptivePenalty, FixedPenalty
from agents.logger import RunLogger, read_config, write_config
from agents.ppo import AdamState, UpdateSchedule, make_minibatch_step, ppo_update
from agents.rollout import EpisodeTracker, RewardScaler, collect_mujoco
from envs.mujoco import make_vector_env, restore_vector_env, snapshot_vector_env

RECENT_EPISODES = 100  # "last 100 episodes" return, as CleanRL and SB3 report


def resolve_device(requested: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; an explicit ``cuda`` without a GPU is an error."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but torch sees no CUDA device; use --device auto or cpu")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def make_penalty(config: TrainConfig) -> AdaptivePenalty | FixedPenalty:
    """The KL coefficient controller of the objective (beta stays 0 for clip and no-clip)."""
    if isinstance(config.objective, AdaptiveKL):
        return AdaptivePenalty(beta=config.objective.initial_beta, kl_target=config.objective.kl_target)
    if isinstance(config.objective, FixedKL):
        return FixedPenalty(beta=config.objective.beta)
    return FixedPenalty(beta=0.0)


def new_run_dir(run: RunConfig, subject: str, objective: str) -> Path:
    """``runs/<subject>__<objective>__s<seed>__<timestamp>`` unless ``--run-name`` is given; refuses to reuse a run folder."""
    name = run.run_name or f"{subject}__{objective}__s{run.seed}__{datetime.now():%Y%m%d-%H%M%S}"
    run_dir = run.runs_dir / name
    if (run_dir / "checkpoints").exists():
        raise ValueError(f"{run_dir} already holds a run; continue it with --resume {run_dir} or pick another --run-name")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def train(config: TrainConfig) -> Path:
    """Train PPO on a MuJoCo task as ``config`` says; returns the run folder."""
    resume_dir = config.run.resume
    if resume_dir is not None:
        saved = config_from_dict(read_config(resume_dir))
        config = replace(saved, run=replace(saved.run, resume=resume_dir, progress=config.run.progress))
    validate_config(config)
    env_cfg, ppo_cfg, run_cfg = config.env, config.ppo, config.run
    torch.set_num_threads(run_cfg.torch_threads or os.cpu_count() or 1)
    device = resolve_device(run_cfg.device)
    checkpoint = load_checkpoint(resume_dir, map_location=device) if resume_dir is not None else None

    # Environments and agent
    envs = make_vector_env(env_cfg.env_id, env_cfg.num_envs)
    obs_dim = envs.single_observation_space.shape[0]
    action_dim = envs.single_action_space.shape[0]
    torch.manual_seed(run_cfg.seed)
    policy = GaussianActorCritic(obs_dim, action_dim, ppo_cfg.hidden_sizes, ppo_cfg.initial_log_std, env_cfg.normalize_observations).to(device)
    params = {name: parameter.detach() for name, parameter in policy.named_parameters()}
    adam = AdamState(params)
    penalty = make_penalty(config)
    reward_scaler = RewardScaler(ppo_cfg.gamma, env_cfg.num_envs, enabled=env_cfg.scale_rewards)
    tracker = EpisodeTracker(env_cfg.num_envs)
    minibatch_generator = torch.Generator().manual_seed(run_cfg.seed)
    action_rng = np.random.default_rng(run_cfg.seed)
    recent_returns: deque[float] = deque(maxlen=RECENT_EPISODES)
    recent_lengths: deque[int] = deque(maxlen=RECENT_EPISODES)
    obs, _ = envs.reset(seed=run_cfg.seed)
    global_step, start_iteration = 0, 0

    if checkpoint is None:
        run_dir = new_run_dir(run_cfg, config.env.env_id, objective_name(config.objective))
        write_config(run_dir, config_to_dict(config))
    else:
        run_dir = Path(resume_dir)
        restore_training_state(checkpoint, policy, adam, penalty, reward_scaler, tracker, minibatch_generator, action_rng, envs, device)
        obs = from_storable(checkpoint["obs"])
        recent_returns.extend(checkpoint["recent_returns"])
        recent_lengths.extend(checkpoint["recent_lengths"])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"]
    logger = RunLogger(run_dir, start_iteration if checkpoint else None, global_step if checkpoint else None)
    minibatch_step = make_minibatch_step(policy, config.objective, ppo_cfg, run_cfg.compile)

    batch_size = ppo_cfg.num_steps * env_cfg.num_envs
    num_iterations = ppo_cfg.total_steps // batch_size
    progress = tqdm(total=num_iterations * batch_size, initial=global_step, unit="step", disable=not run_cfg.progress, dynamic_ncols=True)
    try:
        for iteration in range(start_iteration + 1, num_iterations + 1):
            started = time.perf_counter()
            # Linear learning-rate annealing to 0 (Huang et al. 2022, detail 4)
            fraction_left = 1.0 - (iteration - 1) / num_iterations if ppo_cfg.anneal_lr else 1.0
            schedule = UpdateSchedule(learning_rate=fraction_left * ppo_cfg.learning_rate, beta=penalty.beta)

            rollout = collect_mujoco(envs, policy, obs, ppo_cfg.num_steps, reward_scaler, tracker, action_rng, ppo_cfg.gamma, ppo_cfg.gae_lambda)
            obs = rollout.next_obs
            global_step += batch_size
            collected = time.perf_counter()

            result = ppo_update(policy, params, adam, minibatch_step, rollout.batch, ppo_cfg, schedule, minibatch_generator)
            penalty.update(result.kl_after_update)  # once per iteration, from the whole update (paper, section 4)
            policy.update_normaliser(rollout.observations)  # after the update, so training saw the rollout's statistics
            finished = time.perf_counter()

            recent_returns.extend(r for r, _ in rollout.finished_episodes)
            recent_lengths.extend(n for _, n in rollout.finished_episodes)
            metrics = {
                "iteration": iteration,
                "global_step": global_step,
                "episode_return": float(np.mean(recent_returns)) if recent_returns else float("nan"),
                "episode_length": float(np.mean(recent_lengths)) if recent_lengths else float("nan"),
                "episode_return_latest": float(np.mean([r for r, _ in rollout.finished_episodes])) if rollout.finished_episodes else float("nan"),
                "episodes_finished": len(rollout.finished_episodes),
                "learning_rate": schedule.learning_rate,
                "beta": schedule.beta,
                "beta_next": penalty.beta,
                "policy_std": float(torch.exp(policy.actor_log_std.detach()).mean()),
                **result.stats,
                "sps": batch_size / (finished - started),
                "rollout_seconds": collected - started,
                "update_seconds": finished - collected,
            }
            logger.log(metrics)
            progress.update(batch_size)
            progress.set_postfix(sps=f"{metrics['sps']:.0f}", ret=f"{metrics['episode_return']:.1f}", refresh=False)

            if iteration % run_cfg.checkpoint_every == 0 or iteration == num_iterations:
                state = training_state(policy, adam, penalty, reward_scaler, tracker, minibatch_generator, action_rng, envs)
                state.update(
                    config=config_to_dict(config),
                    obs=to_storable(obs),
                    recent_returns=to_storable(list(recent_returns)),
                    recent_lengths=to_storable(list(recent_lengths)),
                    global_step=global_step,
                    iteration=iteration,
                    env_id=env_cfg.env_id,
                )
                save_checkpoint(state, run_dir / "checkpoints" / LATEST)
    finally:
        progress.close()
        logger.close()
        envs.close()
    return run_dir


def training_state(policy, adam, penalty, reward_scaler, tracker, generator, action_rng, envs) -> dict:
    """Everything that decides the rest of the run, in storable form."""
    return {
        "policy": policy.state_dict(),
        "adam": adam.state_dict(),
        "penalty": penalty.state_dict(),
        "reward_scaler": to_storable(reward_scaler.state_dict()),
        "episode_tracker": to_storable(tracker.state_dict()),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "minibatch_rng": generator.get_state(),
        "action_rng": to_storable(action_rng.bit_generator.state),
        "envs": to_storable(snapshot_vector_env(envs)),
    }


def restore_training_state(state, policy, adam, penalty, reward_scaler, tracker, generator, action_rng, envs, device) -> None:
    """Inverse of ``training_state``; a ``CheckpointError`` names what does not fit."""
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint policy does not fit this config ({str(error).splitlines()[0]})") from error
    adam.load_state_dict(state["adam"])
    penalty.load_state_dict(state["penalty"])
    reward_scaler.load_state_dict(from_storable(state["reward_scaler"]))
    tracker.load_state_dict(from_storable(state["episode_tracker"]))
    torch.set_rng_state(state["torch_rng"].cpu())
    if state["cuda_rng"] and device.type == "cuda":
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    generator.set_state(state["minibatch_rng"].cpu())
    action_rng.bit_generator.state = state["action_rng"]
    restore_vector_env(envs, from_storable(state["envs"]))
