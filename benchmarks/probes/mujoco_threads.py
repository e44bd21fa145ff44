"""Raw MuJoCo stepping in one process, with random actions: how much do threads give?

For each task and each number of environments N, environment steps per second (N per vector step) of:

- ``one env``: one ``gym.make`` env stepped in a loop, reset when its episode ends: one core's physics limit;
- ``gymnasium sync``: ``make_vector_env``'s ``FinalObsSyncVectorEnv`` of N envs (what training steps today);
- ``gymnasium thread pool``: the same N Gymnasium envs split among T Python threads (pays only where ``mj_step``
  releases the GIL; the script first checks that it does);
- ``batched``: ``BatchedMujocoVectorEnv`` of N envs, ``mujoco.batch.Batch`` on T threads (the caller's included);
- ``gymnasium async`` and ``sb3 subproc``: Gymnasium's ``AsyncVectorEnv`` and Stable-Baselines3's ``SubprocVecEnv``,
  N envs in N worker processes (forked), the multi-process way peers step many envs.

Every contender takes the same pre-drawn uniform random actions, has a short untimed warm-up and steps about
``--steps`` environment steps. The ratio is against ``one env`` of the same run. Tasks without a batched path print
the factory's fallback line and only Gymnasium's rows. Figures need a quiet machine: run nothing else meanwhile.

    python -m benchmarks.probes.mujoco_threads --env-ids Hopper-v5 HalfCheetah-v5 --num-envs 2 8 64 --threads 1 2
    python -m benchmarks.probes.mujoco_threads --env-ids Hopper-v5 --num-envs 16 64 --threads 2 --worker-processes
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import mujoco
import numpy as np
from stable_baselines3.common.vec_env import SubprocVecEnv

from benchmarks.harness import machine_header
from envs.mujoco import make_vector_env
from envs.mujoco_batch import BATCHED_TASKS

WARMUP_VECTOR_STEPS = 20  # untimed steps first: caches, lazy allocations, the thread pool's start
ACTION_BLOCKS = 64  # distinct random action blocks, cycled: drawing actions stays out of the timed loop
GIL_PROBE_SUBSTEPS = 4000  # one mj_step call of this many substeps: about 0.1-0.3 s of physics
GIL_PROBE_ITERATIONS = 1000  # main-loop turns within that call that only a released GIL allows (it makes ~10^5)


def mj_step_releases_the_gil(env_id: str = "Hopper-v5") -> bool:
    """Whether the main thread runs Python while another thread is inside one long ``mj_step`` call. The worker reads
    the main thread's loop counter just before and just after the call: a call that holds the GIL lets the main
    thread run no bytecode in between (the switch interval preempts only between bytecodes), so the two readings are
    equal or nearly; a call that releases it lets the main loop run all through it."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    counter, readings = [0], []

    def long_call() -> None:
        readings.append(counter[0])
        mujoco.mj_step(env.model, env.data, nstep=GIL_PROBE_SUBSTEPS)
        readings.append(counter[0])

    worker = threading.Thread(target=long_call)
    worker.start()
    while worker.is_alive():
        counter[0] += 1
    env.close()
    return readings[1] - readings[0] > GIL_PROBE_ITERATIONS


def action_blocks(env_id: str, num_envs: int, seed: int) -> np.ndarray:
    """``(ACTION_BLOCKS, num_envs, nu)`` float32 uniform random actions within the task's bounds."""
    space = gym.make(env_id).action_space
    rng = np.random.default_rng(seed)
    return rng.uniform(space.low, space.high, size=(ACTION_BLOCKS, num_envs, *space.shape)).astype(np.float32)


def timed(step: Callable[[np.ndarray], object], actions: np.ndarray, vector_steps: int) -> float:
    """Seconds for ``vector_steps`` calls of ``step`` (after the warm-up), cycling through ``actions``."""
    for t in range(WARMUP_VECTOR_STEPS):
        step(actions[t % ACTION_BLOCKS])
    start = time.perf_counter()
    for t in range(vector_steps):
        step(actions[t % ACTION_BLOCKS])
    return time.perf_counter() - start


def one_env(env_id: str, steps: int, seed: int) -> float:
    """Steps/s of one Gymnasium env in a loop, reset when an episode ends."""
    env = gym.make(env_id)
    env.reset(seed=seed)

    def step(action: np.ndarray) -> None:
        _, _, terminated, truncated, _ = env.step(action[0])
        if terminated or truncated:
            env.reset()

    seconds = timed(step, action_blocks(env_id, 1, seed), steps)
    env.close()
    return steps / seconds


def vector_env(env_id: str, num_envs: int, threads: int | None, steps: int, seed: int) -> float:
    """Steps/s of ``make_vector_env(env_id, num_envs, threads=threads)``: Gymnasium's sync envs without threads."""
    envs = make_vector_env(env_id, num_envs, threads=threads)
    envs.reset(seed=seed)
    vector_steps = max(1, steps // num_envs)
    seconds = timed(envs.step, action_blocks(env_id, num_envs, seed), vector_steps)
    envs.close()
    return vector_steps * num_envs / seconds


def gymnasium_thread_pool(env_id: str, num_envs: int, threads: int, steps: int, seed: int) -> float:
    """Steps/s of ``num_envs`` Gymnasium envs split into ``threads`` chunks, each stepped by a pool thread."""
    envs = [gym.make(env_id) for _ in range(num_envs)]
    for index, env in enumerate(envs):
        env.reset(seed=seed + index)
    chunks = [chunk for chunk in np.array_split(np.arange(num_envs), threads) if len(chunk)]

    def step_chunk(chunk: np.ndarray, actions: np.ndarray) -> None:
        for index in chunk:
            _, _, terminated, truncated, _ = envs[index].step(actions[index])
            if terminated or truncated:
                envs[index].reset()

    vector_steps = max(1, steps // num_envs)
    with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        seconds = timed(
            lambda actions: list(pool.map(step_chunk, chunks, [actions] * len(chunks))),
            action_blocks(env_id, num_envs, seed),
            vector_steps,
        )
    for env in envs:
        env.close()
    return vector_steps * num_envs / seconds


def worker_processes(kind: str, env_id: str, num_envs: int, steps: int, seed: int) -> float:
    """Steps/s of ``num_envs`` Gymnasium envs, one per forked worker process: ``kind`` "gymnasium async"
    (``AsyncVectorEnv``) or "sb3 subproc" (``SubprocVecEnv``); each steps its envs' resets itself."""
    makers = [lambda: gym.make(env_id)] * num_envs
    if kind == "gymnasium async":
        envs = gym.vector.AsyncVectorEnv(makers, context="fork")
        envs.reset(seed=seed)
    else:
        envs = SubprocVecEnv(makers, start_method="fork")
        envs.seed(seed)
        envs.reset()
    vector_steps = max(1, steps // num_envs)
    seconds = timed(envs.step, action_blocks(env_id, num_envs, seed), vector_steps)
    envs.close()
    return vector_steps * num_envs / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-ids", nargs="+", default=["Hopper-v5", "HalfCheetah-v5"], help="MuJoCo v5 tasks")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[2, 8, 64], help="environments per vector env")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="thread counts of the threaded rows")
    parser.add_argument("--steps", type=int, default=100_000, help="environment steps per contender (timed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker-processes", action="store_true", help="add the async and subproc rows")
    args = parser.parse_args()
    print(machine_header())
    print(f"mj_step releases the GIL: {'yes' if mj_step_releases_the_gil() else 'no'}")
    print("| task | N | contender | threads (processes) | steps/s | against one env |")
    print("|---|---|---|---|---|---|")
    for env_id in args.env_ids:
        if env_id not in BATCHED_TASKS:
            make_vector_env(env_id, 1, threads=1).close()  # the factory's one line: no batched rows for this task
        base = one_env(env_id, args.steps, args.seed)
        print(f"| {env_id} | 1 | one env | 1 | {base:,.0f} | 1.00x |")
        for num_envs in args.num_envs:
            rows = [("gymnasium sync", 1, vector_env(env_id, num_envs, None, args.steps, args.seed))]
            for threads in args.threads:
                pool = gymnasium_thread_pool(env_id, num_envs, threads, args.steps, args.seed)
                rows.append(("gymnasium thread pool", threads, pool))
            for threads in args.threads if env_id in BATCHED_TASKS else []:
                rows.append(("batched", threads, vector_env(env_id, num_envs, threads, args.steps, args.seed)))
            for kind in ("gymnasium async", "sb3 subproc") if args.worker_processes else ():
                rows.append((kind, num_envs, worker_processes(kind, env_id, num_envs, args.steps, args.seed)))
            for contender, threads, speed in rows:
                print(f"| {env_id} | {num_envs} | {contender} | {threads} | {speed:,.0f} | {speed / base:.2f}x |")


if __name__ == "__main__":
    main()
