"""``--reward proxy``: train on a learned stand-in for the task's checker instead of the checker itself, the
over-optimisation experiment of Gao et al. 2022 with a program as the gold reward.

The starting policy samples ``--proxy-completions`` completions of the training prompts (noise from
``--proxy-seed``, the run's sampling settings), the checker labels them, and ``envs.text.tasks.proxy.fit_proxy``
fits a MiniLM + logistic head to the labels. The head is cached under ``PPO_CACHE_DIR`` with a fingerprint of
everything it depends on, so the runs of one experiment share one proxy. Under torchrun the first process fits it
and hands it to the others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agents.core.distributed import gather_objects, rank
from agents.text.config import TextEnvConfig
from agents.text.rollout import heldout_completions
from envs.text.models import resolve_gguf
from envs.text.tasks import Task, checked_scores, default_cache_dir, task_from_config
from envs.text.tasks.base import read_fingerprinted, settings_fingerprint, write_atomically
from envs.text.tasks.minilm import MiniLMEncoder
from envs.text.tasks.proxy import ProxyHead, ProxyReport, ProxyRewardTask, fit_proxy

PROXY_CACHE_FORMAT = 1  # bump when the cache file's layout or the fitting recipe changes
PROXY_REPORT_FILE = "proxy_reward.json"
"""The run folder's record of its proxy: held-out accuracy on checker labels and the cache file."""


def model_files(spec: str) -> list[str]:
    """``name:size`` of the model's files (a GGUF file, or a directory's files); none for a hub id or 'tiny'."""
    path = resolve_gguf(spec) or Path(spec)
    if path.is_file():
        return [f"{path.name}:{path.stat().st_size}"]
    if path.is_dir():
        return sorted(f"{file.name}:{file.stat().st_size}" for file in path.iterdir() if file.is_file())
    return []


def task_files(task_config) -> dict[str, str]:
    """The sha256 of each file the task's settings name (a prompts file, a reward ``file.py:function``), so editing
    one fits a new proxy. (A reward given as an importable module name is known by its name only.)"""
    digests = {}
    for value in dataclasses.asdict(task_config).values():
        for candidate in (str(value), str(value).rpartition(":")[0]):
            if value is not None and candidate and Path(candidate).is_file():
                digests[candidate] = hashlib.sha256(Path(candidate).read_bytes()).hexdigest()
    return digests


def proxy_settings(text: TextEnvConfig, encoder: MiniLMEncoder) -> dict:
    """Everything the fitted proxy depends on (as JSON values); its hash names the cache file."""
    settings = {
        "cache_format": PROXY_CACHE_FORMAT,
        "model": [text.model, *model_files(text.model)],
        "task": [text.task.name, dataclasses.asdict(text.task), task_files(text.task)],
        "completions": text.proxy_completions,
        "seed": text.proxy_seed,
        "sampling": [text.max_new_tokens, text.max_prompt_tokens, text.temperature, text.chat_template],
        "encoder": model_files(str(encoder.folder)),
    }
    return json.loads(json.dumps(settings, default=str))  # paths as strings


def fit_on_starting_policy(gold: Task, text: TextEnvConfig, starting_model: Callable, encoder: MiniLMEncoder):
    """Sample the labelled completions from the starting policy and fit the proxy on them."""
    lm, tokenizer = starting_model()
    train = gold.prompts("train")
    prompts = [train[i % len(train)] for i in range(text.proxy_completions)]  # each prompt in turn, then again
    print(
        f"fitting the proxy reward once: {len(prompts)} completions of the starting policy labelled by the "
        f"{gold.name} checker; it will be cached under {default_cache_dir()}",
        file=sys.stderr,
    )
    started = time.perf_counter()
    completions = heldout_completions(lm, tokenizer, prompts, text, text.proxy_seed).completions
    scores = checked_scores(gold, prompts, completions).rewards
    head = fit_proxy(prompts, completions, scores, encoder)
    return head, time.perf_counter() - started


def proxy_reward_task(gold: Task, text: TextEnvConfig, starting_model: Callable) -> ProxyRewardTask:
    """``gold`` scored by its proxy, read from the cache or fitted now (``starting_model()`` -> ``(lm, tokenizer)``
    is called only then). Every process must call this together."""
    encoder = MiniLMEncoder()
    settings = proxy_settings(text, encoder)
    fingerprint = settings_fingerprint(settings)
    cache_file = default_cache_dir() / f"proxy_reward_{fingerprint[:16]}.json"
    cached = None
    if rank() == 0:
        cached = read_fingerprinted(cache_file, fingerprint)
        if cached is None:
            head, seconds = fit_on_starting_policy(gold, text, starting_model, encoder)
            cached = {"fingerprint": fingerprint, "settings": settings, "fit_seconds": seconds, **head._asdict()}
            cached["report"] = head.report._asdict()
            write_atomically(cache_file, cached)
    cached = gather_objects(cached)[0]  # the first process's, on every process
    head = ProxyHead(cached["weight"], cached["bias"], ProxyReport(**cached["report"]))
    return ProxyRewardTask(gold, head, encoder)


def run_task(text: TextEnvConfig, starting_model: Callable) -> Task:
    """The task a run trains and is evaluated on: ``text.task``, scored by its proxy under ``--reward proxy``
    (``proxy_reward_task``; ``starting_model`` is called only to fit a proxy that is not cached)."""
    task = task_from_config(text.task)
    return proxy_reward_task(task, text, starting_model) if text.reward == "proxy" else task
