"""What both training loops do around their rollout and update, written once: identical starting weights on
every process, the annealed learning rate, the progress bar, the clock of an iteration's two phases, and the
metrics every iteration logs about its update.
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from agents import PROCESS_STARTED
from agents.core.config import PPOConfig
from agents.core.distributed import broadcast_, rank
from agents.core.kl import KLController
from agents.core.update import UpdateResult, UpdateSchedule
from agents.runs.config import RunConfig


def broadcast_trainable(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's trainable tensors by name, made identical on every process (the first one's values)."""
    params = {name: p.detach() for name, p in module.named_parameters() if p.requires_grad}
    broadcast_(list(params.values()))
    return params


def update_schedule(ppo: PPOConfig, done_fraction: float, penalty: KLController) -> UpdateSchedule:
    """This iteration's learning rate, annealed linearly to 0 over the run with ``--anneal-lr`` (Huang et al.
    2022, detail 4; ``done_fraction`` of the run is behind), and the objective's current beta."""
    fraction_left = 1.0 - done_fraction if ppo.anneal_lr else 1.0
    return UpdateSchedule(learning_rate=fraction_left * ppo.learning_rate, beta=penalty.beta)


class IterationClock:
    """Wall-clock marks of one iteration: its start, the end of its sampling (text), the end of its rollout, the
    end of its update."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.sampled: float | None = None
        self.collected = self.finished = self.started

    def sampling_done(self) -> None:
        """Text: the completions are sampled and scored; the no-grad forwards of the batch come next."""
        self.sampled = time.perf_counter()

    def rollout_done(self) -> None:
        self.collected = time.perf_counter()

    def update_done(self) -> None:
        self.finished = time.perf_counter()

    def metrics(self, steps: int) -> dict[str, float]:
        """``sps`` (environment steps or generated tokens per second of the whole iteration), each phase's seconds,
        and ``elapsed_seconds``: the process's wall clock at the end of the update, from its start (imports,
        set-up and compilation included: what a user waits for a score)."""
        phases = {
            "sps": steps / (self.finished - self.started),
            "elapsed_seconds": self.finished - PROCESS_STARTED,
            "rollout_seconds": self.collected - self.started,
            "update_seconds": self.finished - self.collected,
        }
        if self.sampled is not None:
            phases["sampling_seconds"] = self.sampled - self.started
            phases["batch_forward_seconds"] = self.collected - self.sampled
        return phases


def update_metrics(schedule: UpdateSchedule, penalty: KLController, result: UpdateResult) -> dict[str, float]:
    """What the update used and measured: its learning rate and beta, the beta the next one gets (after
    ``penalty.update``), and ``result.stats``."""
    return {
        "learning_rate": schedule.learning_rate,
        "beta": schedule.beta,
        "beta_next": penalty.beta,
        **result.stats,
    }


class RunProgress:
    """The progress bar of a run, on the first process only and when ``--progress`` is on."""

    def __init__(self, run: RunConfig, total: int, initial: int, unit: str) -> None:
        self.bar = tqdm(
            total=total, initial=initial, unit=unit, disable=not run.progress or rank() != 0, dynamic_ncols=True
        )

    def advance(self, steps: int, **postfix: str) -> None:
        """``steps`` more (never past the total), and the figures shown beside the bar."""
        self.bar.update(min(steps, self.bar.total - self.bar.n))
        self.bar.set_postfix(postfix, refresh=False)

    def close(self) -> None:
        self.bar.close()
