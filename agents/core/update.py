"""The PPO update, shared by every policy: epochs x shuffled minibatches of one functional step.

The step (forward, loss, gradient, global-norm clip, Adam) is a pure function of the parameters
and the optimiser state, so ``torch.compile`` can fuse it into one graph; eagerly it is the same
code. The policy is only ever called as ``policy(minibatch.inputs) -> Evaluation``: the
``ActorCritic`` annotation below is the whole contract between the core and a policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.func import functional_call, grad_and_value

from agents.core.advantages import masked_mean, whiten
from agents.core.batch import Minibatch, minibatch_indices
from agents.core.config import PPOConfig
from agents.core.distributed import all_reduce_mean_, all_reduce_sum, local_shard, world_size
from agents.core.kl import kl_k1, kl_k3
from agents.core.losses import SurrogateInputs, aggregate, clip_fraction, entropy_bonus, value_loss
from agents.core.objectives import Objective, uses_critic
from agents.core.optimizer import AdamState, adam_step, clip_by_global_norm, fused_adam_step
from agents.core.policy import ActorCritic, Evaluation


class NonFiniteLossError(RuntimeError):
    """A PPO step produced a NaN or infinite loss; the run stops without touching its last checkpoint."""


STAT_NAMES = (
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl_k1",
    "approx_kl_k3",
    "kl_exact",
    "clip_fraction",
    "reference_kl_loss",
    "grad_norm",
)


def make_minibatch_step(
    policy: ActorCritic,
    objective: Objective,
    cfg: PPOConfig,
    compile: bool,
    reference_kl_coef: float = 0.0,
    sharded: bool = False,
) -> Callable[[dict[str, torch.Tensor], AdamState, Minibatch, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """Build ``step(params, adam_state, batch, index, lr, beta) -> stats``: one gradient step on the
    minibatch ``batch.select(index)`` that updates ``params`` in place.

    The loss is the objective's surrogate, aggregated over tokens as ``cfg.loss_aggregation`` says (or the
    objective's recipe), plus ``vf_coef`` times the value loss for objectives with a critic, minus the entropy
    bonus, plus ``reference_kl_coef`` times the aggregated k3 estimate of KL(pi || pi_ref) where the minibatch
    carries ``ref_logp`` (GRPO's KL in the loss; DeepSeekMath eq. 4).

    ``stats`` is a 1-D tensor in ``STAT_NAMES`` order (one tensor, so a compiled step returns without
    per-scalar overhead). With ``compile`` the step is wrapped in ``torch.compile`` and falls back
    to eager, with a warning, if compilation fails on this machine.

    ``sharded``: the policy is sharded with FSDP2 (``fully_shard``) over the processes: the step runs eagerly,
    gradients come from ``loss.backward()`` already averaged and sharded, and each process clips with the global
    norm and applies Adam to its own shard (``params`` and the Adam state hold shards; see ``local_shard``).
    """
    fraction_coef = objective.diagnostic_clip_coef
    how = cfg.loss_aggregation or objective.recipe_aggregation
    critic = uses_critic(objective)

    def loss_and_stats(evaluation: Evaluation, mb: Minibatch, beta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # group-relative advantages are already normalised within their group: whitening them again would shift them
        whitened = cfg.normalize_advantages and critic
        advantages = whiten(mb.advantages, mb.mask) if whitened else mb.advantages
        surrogate_inputs = SurrogateInputs(evaluation.logp, mb.old_logp, advantages, evaluation.kl, mb.mask)
        policy_loss = objective.surrogate(surrogate_inputs, beta, how)
        zero = torch.zeros((), device=policy_loss.device)
        v_loss = value_loss(evaluation.value, mb.old_values, mb.returns, mb.mask, cfg.value_clip) if critic else zero
        entropy = entropy_bonus(evaluation.entropy, mb.mask)
        reference_kl = (
            aggregate(kl_k3(mb.ref_logp, evaluation.logp), mb.mask, how)  # k3 of KL(pi || pi_ref): log ratio ref - pi
            if mb.ref_logp is not None and reference_kl_coef > 0
            else zero
        )
        loss = policy_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy + reference_kl_coef * reference_kl
        logp, old_logp = evaluation.logp.detach(), mb.old_logp
        stats = torch.stack(
            [
                policy_loss.detach(),
                v_loss.detach(),
                entropy.detach(),
                masked_mean(kl_k1(logp, old_logp), mb.mask),
                masked_mean(kl_k3(logp, old_logp), mb.mask),
                masked_mean(evaluation.kl.detach(), mb.mask),
                clip_fraction(logp, old_logp, mb.mask, fraction_coef),
                reference_kl.detach(),
            ]
        )
        return loss, stats

    def functional_gradients(
        params: dict[str, torch.Tensor], batch: Minibatch, index: torch.Tensor, beta: torch.Tensor
    ):
        """torch.func: the parameters are inputs, so torch.compile can trace backward and Adam into one graph."""
        mb = batch.select(index)

        def loss_of(p):
            return loss_and_stats(functional_call(policy, p, (mb.inputs,)), mb, beta)

        grads, (_, stats) = grad_and_value(loss_of, has_aux=True)(params)
        return grads, stats

    module_parameters = dict(policy.named_parameters())

    def autograd_gradients(params: dict[str, torch.Tensor], batch: Minibatch, index: torch.Tensor, beta: torch.Tensor):
        """Plain autograd on the module's own parameters: faster than torch.func when nothing is compiled
        (0.75 vs 1.6 ms for the MuJoCo MLP, 10 vs 13-20 s for a 135M LM step, measured)."""
        mb = batch.select(index)
        with torch.enable_grad():
            loss, stats = loss_and_stats(policy(mb.inputs), mb, beta)
            leaves = [module_parameters[name] for name in params]
            grads = torch.autograd.grad(loss, leaves)
        return dict(zip(params, grads)), stats

    def backward_gradients(params: dict[str, torch.Tensor], batch: Minibatch, index: torch.Tensor, beta: torch.Tensor):
        """FSDP2: ``loss.backward()``, whose hooks reduce-scatter the gradients (averaged over processes);
        ``torch.autograd.grad`` does not run them (measured). Returns this process's shards."""
        mb = batch.select(index)
        with torch.enable_grad():
            loss, stats = loss_and_stats(policy(mb.inputs), mb, beta)
            loss.backward()
        grads = {}
        for name in params:
            grads[name] = local_shard(module_parameters[name].grad)
            module_parameters[name].grad = None
        return grads, stats

    def clip_and_adam(
        params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], adam: AdamState, lr: torch.Tensor
    ):
        """Global-norm clip and the written-out Adam (compilable); returns the norm before clipping."""
        grads, grad_norm = clip_by_global_norm(grads, cfg.max_grad_norm)
        adam_step(params, grads, adam, lr, cfg.adam_eps)
        return grad_norm

    @torch.no_grad()
    def clip_and_fused_adam(
        params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], adam: AdamState, lr: torch.Tensor
    ):
        """Global-norm clip and torch's fused Adam kernel (eager); returns the norm before clipping. Sharded: on
        this process's shards, clipped by the norm over every process's."""
        grads, grad_norm = clip_by_global_norm(grads, cfg.max_grad_norm, sharded=sharded)
        fused_adam_step({name: local_shard(p) for name, p in params.items()}, grads, adam, lr, cfg.adam_eps)
        return grad_norm

    def chain(gradients: Callable, apply: Callable, average: bool = True) -> Callable:
        """A step: the minibatch's gradients, averaged over processes before the clip (CleanRL multi-GPU; the
        identity in one process) unless ``gradients`` averaged them already, then clipped and applied."""

        def step(
            params: dict[str, torch.Tensor],
            adam: AdamState,
            batch: Minibatch,
            index: torch.Tensor,
            lr: torch.Tensor,
            beta: torch.Tensor,
        ) -> torch.Tensor:
            grads, stats = gradients(params, batch, index, beta)
            if average:
                all_reduce_mean_(list(grads.values()))
            return torch.cat([stats, apply(params, grads, adam, lr).reshape(1)])

        return step

    if sharded:
        return chain(backward_gradients, clip_and_fused_adam, average=False)  # FSDP2's backward averaged them
    if not compile:
        return chain(autograd_gradients, clip_and_fused_adam)
    # size_asserts off: the shapes are fixed per run, and the 65 stride checks per call cost ~12 % of a step (measured)
    options = {"size_asserts": False}
    if world_size() == 1:  # one graph: forward, backward, clip and Adam fused
        compiled = torch.compile(chain(functional_gradients, clip_and_adam), dynamic=False, options=options)
    else:  # a graph holds no collective: two graphs around the all-reduce
        gradients = torch.compile(functional_gradients, dynamic=False, options=options)
        compiled = chain(gradients, torch.compile(clip_and_adam, dynamic=False, options=options))
    chosen: list[Callable] = []

    def compiled_or_eager(*args):
        if chosen:
            return chosen[0](*args)
        try:
            result = compiled(*args)
            chosen.append(compiled)
        except Exception as error:  # noqa: BLE001 - any compiler failure means: run eagerly instead
            print(
                f"warning: torch.compile failed ({type(error).__name__}); "
                "running the PPO step eagerly (pass --no-compile to skip trying)"
            )
            eager = make_minibatch_step(policy, objective, cfg, compile=False, reference_kl_coef=reference_kl_coef)
            result = eager(*args)
            chosen.append(eager)
        return result

    return compiled_or_eager


class UpdateResult(NamedTuple):
    """Means over the update's minibatches, plus what was measured once after it."""

    stats: dict[str, float]
    """Every name in ``STAT_NAMES`` averaged over minibatches, plus ``epochs_run``, ``kl_after_update`` and
    ``explained_variance``."""
    kl_after_update: float
    """Mean exact (or k3) KL(pi_old || pi) over the whole batch after the last epoch: the ``d`` the adaptive
    penalty reads."""


@dataclass(frozen=True)
class UpdateSchedule:
    """This iteration's learning rate and KL coefficient."""

    learning_rate: float
    beta: float


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var[R - V] / Var[R]`` over valid entries (1 = perfect value function, 0 = no better than a constant)."""
    mask = mask.to(values.dtype)
    count = mask.sum().clamp(min=1.0)
    mean_r = (returns * mask).sum() / count
    var_r = (((returns - mean_r) * mask) ** 2).sum() / count
    residual = (returns - values) * mask
    var_residual = (((residual - residual.sum() / count) * mask) ** 2).sum() / count
    return float("nan") if var_r.item() == 0.0 else float(1.0 - var_residual / var_r)


def ppo_update(
    policy: ActorCritic,
    params: dict[str, torch.Tensor],
    adam: AdamState,
    step: Callable,
    batch: Minibatch,
    cfg: PPOConfig,
    schedule: UpdateSchedule,
    generator: torch.Generator,
    evaluation_chunk: int = 8192,
) -> UpdateResult:
    """``cfg.epochs`` passes of shuffled minibatches of ``cfg.minibatch_size`` items through ``step``.

    ``batch`` is this process's share; with several processes each takes ``minibatch_size / processes`` items
    of its own share per step, and the averaged gradient is that of a ``minibatch_size`` minibatch.

    Stops early after an epoch whose mean k3 KL exceeds ``cfg.target_kl``. Raises
    ``NonFiniteLossError`` after an epoch whose mean statistics are not finite.
    """
    device = next(iter(params.values())).device
    lr = torch.tensor(schedule.learning_rate, device=device)
    beta = torch.tensor(schedule.beta, device=device)
    per_step: list[torch.Tensor] = []
    epochs_run = 0
    for _ in range(cfg.epochs):
        epoch_stats = [
            step(params, adam, batch, index, lr, beta)
            for index in minibatch_indices(batch.size, cfg.minibatch_size // world_size(), generator)
        ]
        per_step.extend(epoch_stats)
        epochs_run += 1
        epoch_mean = torch.stack(epoch_stats).mean(0)
        all_reduce_mean_([epoch_mean])  # every process takes the same early-stopping and non-finite decisions
        if not torch.isfinite(epoch_mean).all():
            bad = [name for name, value in zip(STAT_NAMES, epoch_mean.tolist()) if not math.isfinite(value)]
            raise NonFiniteLossError(
                f"non-finite {', '.join(bad)} in the PPO update; lower --learning-rate or check the rewards"
            )
        if cfg.target_kl is not None and epoch_mean[STAT_NAMES.index("approx_kl_k3")].item() > cfg.target_kl:
            break
    means = dict(zip(STAT_NAMES, torch.stack(per_step).mean(0).tolist()))
    kl_after = kl_over_batch(policy, batch, evaluation_chunk)
    means.update(
        epochs_run=float(epochs_run),
        kl_after_update=kl_after,
        explained_variance=explained_variance(batch.old_values, batch.returns, batch.mask),
    )
    return UpdateResult(means, kl_after)


@torch.no_grad()
def kl_over_batch(policy: ActorCritic, batch: Minibatch, chunk: int) -> float:
    """Mean KL(pi_old || pi) over every valid item of ``batch`` (of every process), ``chunk`` items at a time."""
    total, count = 0.0, 0.0
    for start in range(0, batch.size, chunk):
        part = batch.select(slice(start, start + chunk))
        kl = policy(part.inputs).kl
        total += float((kl * part.mask).sum())
        count += float(part.mask.sum())
    total, count = all_reduce_sum(torch.tensor([total, count], dtype=torch.float64)).tolist()
    return total / max(count, 1.0)
