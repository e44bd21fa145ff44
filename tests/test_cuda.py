"""The GPU path (``--device cuda``) for both worlds and bf16 autocast; skipped where torch sees no CUDA device.

benchmarks/gpu_check.sh runs these on a GPU machine (``pytest -m cuda``).
"""

from dataclasses import replace

import pytest
import torch

from agents.runs.config import RunConfig
from agents.runs.logger import METRICS_FILE, read_jsonl
from agents.text.config import TEXT_PPO_DEFAULTS, TextEnvConfig, TextTrainConfig
from agents.text.train import train_text
from agents.walkers.evaluate import load_policy
from agents.walkers.train import train
from envs.text.tasks import ArithmeticTaskConfig
from tests.conftest import tiny_config

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device: the GPU path is checked on a GPU machine"
    ),
]


def test_a_walker_trains_on_the_gpu(tmp_path):
    run_dir = train(tiny_config(tmp_path, "gpu", device="cuda"))
    records = read_jsonl(run_dir / METRICS_FILE)
    assert records and all(r["policy_loss"] == r["policy_loss"] for r in records)  # finite, not NaN
    checkpoint = torch.load(run_dir / "checkpoints" / "latest.pt", map_location="cpu", weights_only=True)
    assert checkpoint["config"]["run"]["device"] == "cuda"
    policy, _ = load_policy(run_dir, device="cuda")
    assert next(policy.parameters()).is_cuda


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_language_model_trains_on_the_gpu(tmp_path, dtype):
    config = TextTrainConfig(
        text=TextEnvConfig(
            model="tiny", task=ArithmeticTaskConfig(), prompts_per_iteration=8, max_new_tokens=8, dtype=dtype
        ),
        ppo=replace(TEXT_PPO_DEFAULTS, total_steps=128),
        run=RunConfig(runs_dir=tmp_path, run_name=dtype, device="cuda", progress=False),
    )
    run_dir = train_text(config)
    records = read_jsonl(run_dir / METRICS_FILE)
    assert records and all(abs(r["ref_kl"]) < 1e3 and r["value_loss"] == r["value_loss"] for r in records)
    assert (run_dir / "policy" / "config.json").is_file()
