"""One gradient step on one minibatch, shared by every policy: forward, loss, gradients, the average over
processes, the global-norm clip and Adam.

The step is a pure function of the parameters and the optimiser state, so ``torch.compile`` can fuse it into
one graph; eagerly it is the same code. ``make_minibatch_step`` picks one of three ways to get the gradients
(``torch.func`` for the compiled step, plain autograd eagerly, ``loss.backward()`` under FSDP2) and one of two
ways to apply them, and binds them to the run's policy and settings. The policy is only ever called as
``policy(minibatch.inputs) -> Evaluation``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.func import functional_call, grad_and_value

from agents.core.advantages import masked_mean, whiten
from agents.core.batch import Minibatch
from agents.core.config import PPOConfig
from agents.core.distributed import all_reduce_mean_, local_shard, world_size
from agents.core.kl import ReferenceKLEstimator, kl_k1, kl_k2, kl_k3, kl_k3_ratio
from agents.core.losses import SurrogateInputs, aggregate, clip_fraction, entropy_bonus, value_loss
from agents.core.objectives import Objective, uses_critic
from agents.core.optimizer import AdamState, adam_step, clip_by_global_norm, fused_adam_step
from agents.core.policy import ActorCritic, Evaluation

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
"""The step's statistics, in the order of the 1-D tensor it returns."""

MinibatchStep = Callable[
    [dict[str, torch.Tensor], AdamState, Minibatch, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
]
"""``step(params, adam_state, batch, index, lr, beta) -> stats``."""


@dataclass(frozen=True)
class LossSettings:
    """What the loss reads besides the minibatch: the objective, PPO's settings and the reference-KL coefficient."""

    objective: Objective
    cfg: PPOConfig
    reference_kl_coef: float = 0.0
    """Weight of the estimate of KL(pi || pi_ref) in the loss, where the minibatch carries ``ref_logp``."""
    reference_kl_estimator: ReferenceKLEstimator = "k3"
    """Which estimate of KL(pi || pi_ref) the loss carries: k3 (GRPO), k2 or k3-ratio."""

    @property
    def aggregation(self):
        """How the policy loss is aggregated over tokens: ``cfg.loss_aggregation``, else the objective's recipe."""
        return self.cfg.loss_aggregation or self.objective.recipe_aggregation


def zeroed_off_the_mask(evaluation: Evaluation, mb: Minibatch) -> tuple[Evaluation, Minibatch]:
    """Every per-token entry where ``mb.mask`` is 0 (padding, a dialogue's environment tokens) set to 0 on both sides
    of every ratio, so what the loss never reads cannot make it non-finite: ``inf * 0`` is NaN, and a token the policy
    finds very unlikely (``log pi < -88`` in float32) makes ``exp(-log pi)`` overflow in the k3 estimates."""
    valid = mb.mask.bool()

    def zeroed(x: torch.Tensor) -> torch.Tensor:
        return torch.where(valid, x, torch.zeros_like(x))

    evaluation = Evaluation(*(zeroed(x) for x in evaluation))
    mb = mb._replace(
        old_logp=zeroed(mb.old_logp),
        advantages=zeroed(mb.advantages),
        returns=zeroed(mb.returns),
        old_values=zeroed(mb.old_values),
        ref_logp=None if mb.ref_logp is None else zeroed(mb.ref_logp),
    )
    return evaluation, mb


def reference_kl_estimate(estimator: ReferenceKLEstimator, mb: Minibatch, logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) on the policy's samples by ``estimator`` (the log ratio is ref - pi)."""
    if estimator == "k3-ratio":
        return kl_k3_ratio(mb.ref_logp, logp, mb.old_logp)
    return (kl_k2 if estimator == "k2" else kl_k3)(mb.ref_logp, logp)


def minibatch_loss(
    evaluation: Evaluation, mb: Minibatch, beta: torch.Tensor, settings: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """``loss = surrogate + vf_coef * value_loss - ent_coef * entropy + reference_kl_coef * k(pi || pi_ref)`` and
    the first eight ``STAT_NAMES`` as one 1-D tensor.

    The surrogate is the objective's, aggregated as ``settings.aggregation`` says; the value loss only for
    objectives with a critic; the reference KL (GRPO's KL in the loss; DeepSeekMath eq. 4), estimated by
    ``settings.reference_kl_estimator`` (k3, k2 or k3-ratio) and aggregated like the surrogate, only where the minibatch
    carries ``ref_logp``.
    """
    objective, cfg, how = settings.objective, settings.cfg, settings.aggregation
    evaluation, mb = zeroed_off_the_mask(evaluation, mb)
    critic = uses_critic(objective)
    # group-relative advantages are already normalised within their group: whitening them again would shift them
    whitened = cfg.normalize_advantages and critic
    advantages = whiten(mb.advantages, mb.mask) if whitened else mb.advantages
    surrogate_inputs = SurrogateInputs(evaluation.logp, mb.old_logp, advantages, evaluation.kl, mb.mask)
    policy_loss = objective.surrogate(surrogate_inputs, beta, how)
    zero = torch.zeros((), device=policy_loss.device)
    v_loss = value_loss(evaluation.value, mb.old_values, mb.returns, mb.mask, cfg.value_clip) if critic else zero
    entropy = entropy_bonus(evaluation.entropy, mb.mask)
    reference_kl = (
        aggregate(reference_kl_estimate(settings.reference_kl_estimator, mb, evaluation.logp), mb.mask, how)
        if mb.ref_logp is not None and settings.reference_kl_coef > 0
        else zero
    )
    loss = policy_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy + settings.reference_kl_coef * reference_kl
    logp, old_logp = evaluation.logp.detach(), mb.old_logp
    stats = torch.stack(
        [
            policy_loss.detach(),
            v_loss.detach(),
            entropy.detach(),
            masked_mean(kl_k1(logp, old_logp), mb.mask),
            masked_mean(kl_k3(logp, old_logp), mb.mask),
            masked_mean(evaluation.kl.detach(), mb.mask),
            clip_fraction(logp, old_logp, mb.mask, objective.diagnostic_clip_coef),
            reference_kl.detach(),
        ]
    )
    return loss, stats


Gradients = tuple[dict[str, torch.Tensor], torch.Tensor]
"""Gradients by parameter name, and the loss's statistics."""


def functional_gradients(
    policy: ActorCritic,
    settings: LossSettings,
    params: dict[str, torch.Tensor],
    batch: Minibatch,
    index: torch.Tensor,
    beta: torch.Tensor,
) -> Gradients:
    """torch.func: the parameters are inputs, so torch.compile can trace backward and Adam into one graph."""
    mb = batch.select(index)

    def loss_of(p):
        return minibatch_loss(functional_call(policy, p, (mb.inputs,)), mb, beta, settings)

    grads, (_, stats) = grad_and_value(loss_of, has_aux=True)(params)
    return grads, stats


def autograd_gradients(
    policy: ActorCritic,
    settings: LossSettings,
    params: dict[str, torch.Tensor],
    batch: Minibatch,
    index: torch.Tensor,
    beta: torch.Tensor,
) -> Gradients:
    """Plain autograd on the module's own parameters: faster than torch.func when nothing is compiled
    (0.75 vs 1.6 ms for the MuJoCo MLP, 10 vs 13-20 s for a 135M LM step, measured)."""
    mb = batch.select(index)
    module_parameters = dict(policy.named_parameters())
    with torch.enable_grad():
        loss, stats = minibatch_loss(policy(mb.inputs), mb, beta, settings)
        grads = torch.autograd.grad(loss, [module_parameters[name] for name in params])
    return dict(zip(params, grads)), stats


def backward_gradients(
    policy: ActorCritic,
    settings: LossSettings,
    params: dict[str, torch.Tensor],
    batch: Minibatch,
    index: torch.Tensor,
    beta: torch.Tensor,
) -> Gradients:
    """FSDP2: ``loss.backward()``, whose hooks reduce-scatter the gradients (averaged over processes);
    ``torch.autograd.grad`` does not run them (measured). Returns this process's shards."""
    mb = batch.select(index)
    module_parameters = dict(policy.named_parameters())
    with torch.enable_grad():
        loss, stats = minibatch_loss(policy(mb.inputs), mb, beta, settings)
        loss.backward()
    grads = {}
    for name in params:
        grads[name] = local_shard(module_parameters[name].grad)
        module_parameters[name].grad = None
    return grads, stats


def clip_and_adam(
    cfg: PPOConfig,
    params: dict[str, torch.Tensor],
    grads: dict[str, torch.Tensor],
    adam: AdamState,
    lr: torch.Tensor,
) -> torch.Tensor:
    """Global-norm clip and the written-out Adam (compilable); returns the norm before clipping."""
    grads, grad_norm = clip_by_global_norm(grads, cfg.max_grad_norm)
    adam_step(params, grads, adam, lr, cfg.adam_eps)
    return grad_norm


@torch.no_grad()
def clip_and_fused_adam(
    cfg: PPOConfig,
    sharded: bool,
    params: dict[str, torch.Tensor],
    grads: dict[str, torch.Tensor],
    adam: AdamState,
    lr: torch.Tensor,
) -> torch.Tensor:
    """Global-norm clip and torch's fused Adam kernel (eager); returns the norm before clipping. Sharded: on
    this process's shards, clipped by the norm over every process's."""
    grads, grad_norm = clip_by_global_norm(grads, cfg.max_grad_norm, sharded=sharded)
    fused_adam_step({name: local_shard(p) for name, p in params.items()}, grads, adam, lr, cfg.adam_eps)
    return grad_norm


def gradient_step(
    gradients: Callable[..., Gradients],
    apply: Callable[..., torch.Tensor],
    average: bool,
    params: dict[str, torch.Tensor],
    adam: AdamState,
    batch: Minibatch,
    index: torch.Tensor,
    lr: torch.Tensor,
    beta: torch.Tensor,
) -> torch.Tensor:
    """A step: the minibatch's gradients, averaged over processes before the clip (CleanRL multi-GPU; the identity
    in one process) unless ``gradients`` averaged them already, then clipped and applied; returns every
    ``STAT_NAMES`` entry."""
    grads, stats = gradients(params, batch, index, beta)
    if average:
        all_reduce_mean_(list(grads.values()))
    return torch.cat([stats, apply(params, grads, adam, lr).reshape(1)])


class EagerFallback:
    """The compiled step, or the eager one if compiling fails on this machine: the first call tries the compiled
    step and, on any compiler error, warns once and runs (and keeps running) the eager one."""

    def __init__(self, compiled: MinibatchStep, eager: MinibatchStep) -> None:
        self.step, self.eager, self.tried = compiled, eager, False

    def __call__(self, *args) -> torch.Tensor:
        if self.tried:
            return self.step(*args)
        self.tried = True
        try:
            return self.step(*args)
        except Exception as error:  # noqa: BLE001 - any compiler failure means: run eagerly instead
            print(
                f"warning: torch.compile failed ({type(error).__name__}); "
                "running the PPO step eagerly (pass --no-compile to skip trying)"
            )
            self.step = self.eager
            return self.step(*args)


def make_minibatch_step(
    policy: ActorCritic,
    objective: Objective,
    cfg: PPOConfig,
    compile: bool,
    reference_kl_coef: float = 0.0,
    sharded: bool = False,
    reference_kl_estimator: ReferenceKLEstimator = "k3",
) -> MinibatchStep:
    """Build ``step(params, adam_state, batch, index, lr, beta) -> stats``: one gradient step on the
    minibatch ``batch.select(index)`` that updates ``params`` in place; the loss is ``minibatch_loss``'s.

    ``stats`` is a 1-D tensor in ``STAT_NAMES`` order (one tensor, so a compiled step returns without
    per-scalar overhead). With ``compile`` the step is wrapped in ``torch.compile`` and falls back
    to eager, with a warning, if compilation fails on this machine (``EagerFallback``).

    ``sharded``: the policy is sharded with FSDP2 (``fully_shard``) over the processes: the step runs eagerly,
    gradients come from ``loss.backward()`` already averaged and sharded, and each process clips with the global
    norm and applies Adam to its own shard (``params`` and the Adam state hold shards; see ``local_shard``).
    """
    settings = LossSettings(objective, cfg, reference_kl_coef, reference_kl_estimator)
    fused_adam = functools.partial(clip_and_fused_adam, cfg, sharded)
    if sharded:  # FSDP2's backward averaged the gradients already
        backward = functools.partial(backward_gradients, policy, settings)
        return functools.partial(gradient_step, backward, fused_adam, False)
    eager = functools.partial(gradient_step, functools.partial(autograd_gradients, policy, settings), fused_adam, True)
    if not compile:
        return eager
    # size_asserts off: the shapes are fixed per run, and the 65 stride checks per call cost ~12 % of a step (measured)
    options = {"size_asserts": False}
    gradients = functools.partial(functional_gradients, policy, settings)
    adam = functools.partial(clip_and_adam, cfg)
    if world_size() == 1:  # one graph: forward, backward, clip and Adam fused
        fused = functools.partial(gradient_step, gradients, adam, True)
        compiled = torch.compile(fused, dynamic=False, options=options)
    else:  # a graph holds no collective: two graphs around the all-reduce
        compiled = functools.partial(
            gradient_step,
            torch.compile(gradients, dynamic=False, options=options),
            torch.compile(adam, dynamic=False, options=options),
            True,
        )
    return EagerFallback(compiled, eager)
