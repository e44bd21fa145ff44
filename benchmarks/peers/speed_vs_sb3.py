"""Steps/s of this PPO against Stable-Baselines3 PPO and raw env stepping, on the same machine in the same run.

Identical hyperparameters (PPO paper Table 3: 1 env, 2048 steps, 10 epochs, minibatch 64, 64-64 tanh
networks, separate value net), both with 1 torch thread. Each contender runs in its own subprocess,
one after another, and is timed over ``--iterations`` PPO iterations after one warm-up iteration
(SB3's first call and our torch.compile are excluded, and reported separately).

    python -m benchmarks.peers.speed_vs_sb3 --env-id Hopper-v5 --iterations 10
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks.harness import child_result, iteration_times, machine_header, module_command, read_metrics
from envs.mujoco import raw_stepping_speed

STEPS = 2048


def stable_baselines3(env_id: str, iterations: int) -> dict:
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    model = PPO(
        "MlpPolicy",
        env_id,
        n_steps=STEPS,
        batch_size=64,
        n_epochs=10,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        device="cpu",
        seed=0,
        verbose=0,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh},
    )
    start = time.perf_counter()
    model.learn(STEPS)
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    model.learn(STEPS * iterations, reset_num_timesteps=False)
    return {"steps_per_second": STEPS * iterations / (time.perf_counter() - start), "warmup_seconds": warmup}


def this_ppo(env_id: str, iterations: int, compile: bool, threads: int = 1) -> dict:
    import tempfile
    from pathlib import Path

    from agents.core.config import PPOConfig
    from agents.runs.config import RunConfig
    from agents.walkers.config import MujocoEnvConfig, TrainConfig
    from agents.walkers.train import train

    with tempfile.TemporaryDirectory() as runs:
        config = TrainConfig(
            env=MujocoEnvConfig(env_id=env_id),
            ppo=PPOConfig(total_steps=STEPS * (iterations + 1)),
            run=RunConfig(
                runs_dir=Path(runs),
                run_name="bench",
                compile=compile,
                progress=False,
                checkpoint_every=10_000,
                torch_threads=threads,
            ),
        )
        start = time.perf_counter()
        run_dir = train(config)
        total = time.perf_counter() - start
        records = read_metrics(run_dir)
    times = iteration_times(records)
    return {
        "steps_per_second": STEPS * times.iterations / times.seconds,
        "warmup_seconds": records[0]["rollout_seconds"] + records[0]["update_seconds"],
        "rollout_seconds_per_iteration": times.rollout_seconds,
        "update_seconds_per_iteration": times.update_seconds,
        "wall_seconds_including_setup": total,
    }


def in_subprocess(name: str, args: argparse.Namespace) -> dict:
    return child_result(
        module_command(__spec__.name, "--only", name, "--env-id", args.env_id, "--iterations", str(args.iterations))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Hopper-v5")
    parser.add_argument("--iterations", type=int, default=10, help="timed PPO iterations of 2048 steps each")
    parser.add_argument(
        "--only", choices=["raw", "sb3", "ours", "ours-eager", "ours-2-threads"], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.only:
        result = {
            "raw": lambda: {"steps_per_second": raw_stepping_speed(args.env_id, STEPS * args.iterations)},
            "sb3": lambda: stable_baselines3(args.env_id, args.iterations),
            "ours": lambda: this_ppo(args.env_id, args.iterations, compile=True),
            "ours-eager": lambda: this_ppo(args.env_id, args.iterations, compile=False),
            "ours-2-threads": lambda: this_ppo(args.env_id, args.iterations, compile=True, threads=2),
        }[args.only]()
        print(json.dumps(result))
        return
    results = {name: in_subprocess(name, args) for name in ("raw", "sb3", "ours", "ours-eager", "ours-2-threads")}
    raw, sb3 = results["raw"]["steps_per_second"], results["sb3"]["steps_per_second"]
    print(machine_header())
    print(f"{args.env_id}, {args.iterations} timed iterations of {STEPS} steps, 1 torch thread")
    print(f"{'contender':<34}{'steps/s':>10}{'vs SB3':>9}{'vs raw env':>12}")
    labels = {
        "raw": "raw env, random actions",
        "sb3": "Stable-Baselines3 PPO",
        "ours": "this PPO (torch.compile)",
        "ours-eager": "this PPO (--no-compile)",
        "ours-2-threads": "this PPO (--torch-threads 2)",
    }
    for name, result in results.items():
        sps = result["steps_per_second"]
        print(f"{labels[name]:<34}{sps:>10.0f}{sps / sb3:>8.2f}x{sps / raw:>11.0%}")
    ours = results["ours"]
    print(
        f"this PPO per iteration: rollout {ours['rollout_seconds_per_iteration']:.3f} s, "
        f"update {ours['update_seconds_per_iteration']:.3f} s; "
        f"first iteration (compile) {ours['warmup_seconds']:.1f} s; "
        f"SB3 first iteration {results['sb3']['warmup_seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
