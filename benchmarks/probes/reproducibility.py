"""Which part of a seeded walker run depends on the processor.

A seeded run repeats exactly on one machine and can end elsewhere at another return. The parts that could differ
are MuJoCo (C code, the same wheel everywhere, libm's exp/sin/cos chosen by glibc at load time), torch's eager CPU
kernels (picked at run time by instruction set: AVX-512, AVX2 or none) and the step ``torch.compile`` generates (its
C++ is vectorised for the instruction set it finds). This script fingerprints each part separately, in fresh
processes that see the instruction sets another x86 processor would offer, and prints which fingerprints change:

- ``mujoco``: 5,000 Hopper-v5 steps under fixed random actions, hash of every observation;
- ``torch eager``: the Gaussian policy's means and values on fixed inputs, hash of the outputs;
- ``train eager`` / ``train compiled``: 3 Hopper iterations of ``ppo train --seed 1``, hash of the metrics (timings
  left out) and the final return.

    python -m benchmarks.probes.reproducibility
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

from benchmarks.harness import child_result, machine_header, module_command, ppo_command, read_metrics

TIMING_KEYS = {"sps", "rollout_seconds", "update_seconds", "elapsed_seconds"}
ISA_SETTINGS = {
    "this processor": {},
    "AVX2 only (torch, MKL, oneDNN)": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "no SIMD dispatch (torch default kernels)": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
    "glibc without AVX2/FMA (libm variants)": {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F"},
}
"""Environment variables under which torch (``ATEN_CPU_CAPABILITY``, read by eager dispatch and by inductor), MKL,
oneDNN and glibc (``GLIBC_TUNABLES``) behave as on a processor with fewer instructions."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def fingerprint_parts() -> dict[str, str]:
    """The mujoco and torch-eager fingerprints, in this process."""
    import gymnasium as gym
    import numpy as np
    import torch

    from agents.walkers.gaussian import GaussianActorCritic

    env = gym.make("Hopper-v5")
    observation, _ = env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(5000, 3))
    trajectory = [observation]
    for action in actions:
        observation, _, terminated, truncated, _ = env.step(action)
        trajectory.append(observation)
        if terminated or truncated:
            observation, _ = env.reset()
            trajectory.append(observation)
    torch.manual_seed(0)
    policy = GaussianActorCritic(11, 3, (64, 64), 0.0, False)
    inputs = torch.randn(2048, 11, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outputs = torch.cat([policy.actor_mean(inputs), policy.critic(inputs)], dim=1)
    return {
        "mujoco": digest(np.stack(trajectory).tobytes()),
        "torch eager": digest(outputs.numpy().tobytes()),
        "torch capability": torch.backends.cpu.get_cpu_capability(),
    }


def train_fingerprint(environment: dict[str, str], compiled: bool, runs: Path) -> str:
    """Hash of the metrics of 3 seeded Hopper iterations, and the last return, in a fresh process."""
    name = f"{'compiled' if compiled else 'eager'}-{len(list(runs.iterdir()))}"
    command = ppo_command("train", "--seed", "1", "--total-steps", "6144", "--no-progress", "--runs-dir", str(runs),
                          "--run-name", name, *([] if compiled else ["--no-compile"]))  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, env=environment)
    records = read_metrics(runs / name)
    kept = [{key: value for key, value in record.items() if key not in TIMING_KEYS} for record in records]
    last_return = next((r["episode_return"] for r in reversed(records) if "episode_return" in r), float("nan"))
    return f"{digest(json.dumps(kept, sort_keys=True).encode())} (return {last_return:.6f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(fingerprint_parts()))
        return
    print(machine_header())
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for setting, overrides in ISA_SETTINGS.items():
            # a fresh inductor cache per setting: compiled code must be generated for the instruction set in force
            cache = Path(folder) / f"inductor-{len(rows)}"
            environment = {**os.environ, **overrides, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
            parts = child_result(module_command(__spec__.name, "--child"), environment)
            runs = Path(folder) / f"runs-{len(rows)}"
            runs.mkdir()
            parts["train eager"] = train_fingerprint(environment, compiled=False, runs=runs)
            parts["train compiled"] = train_fingerprint(environment, compiled=True, runs=runs)
            rows[setting] = parts
            print(f"{setting}: {json.dumps(parts)}", flush=True)
    reference = rows["this processor"]
    columns = ["torch capability", "mujoco", "torch eager", "train eager", "train compiled"]
    print("\n| setting | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for setting, parts in rows.items():
        same = {c: " (same)" if parts[c] == reference[c] else " (differs)" for c in columns}
        cells = [parts[c] if c == "torch capability" else parts[c] + same[c] for c in columns]
        print(f"| {setting} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
