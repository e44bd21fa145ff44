"""Gaussian MLP actor-critic for continuous actions (the PPO paper's MuJoCo policy)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from agents.core.distributed import merge_moments
from agents.core.kl import gaussian_kl
from agents.core.moments import combine_moments
from agents.core.policy import Evaluation

# clip normalised observations to +-10 (Huang et al. 2022, continuous detail 7; CleanRL's TransformObservation)
OBSERVATION_CLIP = 10.0
NORMALIZER_EPS = 1e-8  # variance floor of the observation normaliser (gymnasium NormalizeObservation)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
"""Hidden-layer nonlinearities: tanh (the paper, CleanRL), relu (rl-baselines3-zoo's tuned MuJoCo recipes)."""


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` elementwise, keeping ``x``'s dtype."""
    return np.maximum(x, 0.0)


NUMPY_ACTIVATIONS = {"tanh": np.tanh, "relu": relu}
"""The same nonlinearities in numpy, for ``NumpyActor``."""


def mlp(sizes: list[int], output_gain: float, activation: str = "tanh", orthogonal_init: bool = True) -> nn.Sequential:
    """MLP with ``activation`` between its layers. With ``orthogonal_init`` its weights are orthogonal (gain sqrt(2)
    hidden, ``output_gain`` last) and its biases zero (Huang et al. 2022, detail 2); without, every layer keeps
    torch's default ``nn.Linear`` init (Stable-Baselines3's ``ortho_init=False``).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = nn.Linear(fan_in, fan_out)
        is_last = index == len(sizes) - 2
        if orthogonal_init:
            nn.init.orthogonal_(linear.weight, gain=output_gain if is_last else math.sqrt(2.0))
            nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not is_last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class GaussianActorCritic(nn.Module):
    """Separate MLPs (tanh by default) for the action mean and the value, a state-independent log std, and an
    observation normaliser kept as buffers so it travels with ``state_dict``.

    Inputs are raw observations ``(N, obs_dim)``; the module normalises them with its frozen
    statistics, which the training loop refreshes once per iteration with ``update_normalizer``.
    With ``critic=False`` (the group-relative objectives) there is no value MLP and every value is 0.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: tuple[int, ...] = (64, 64),
        initial_log_std: float = 0.0,
        normalize_observations: bool = True,
        critic: bool = True,
        activation: str = "tanh",
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        self.normalize_observations = normalize_observations
        self.activation = activation
        self.actor_mean = mlp([obs_dim, *hidden_sizes, action_dim], 0.01, activation, orthogonal_init)
        self.critic = mlp([obs_dim, *hidden_sizes, 1], 1.0, activation, orthogonal_init) if critic else None
        self.actor_log_std = nn.Parameter(torch.full((action_dim,), float(initial_log_std)))
        self.register_buffer("obs_mean", torch.zeros(obs_dim, dtype=torch.float64))
        self.register_buffer("obs_var", torch.ones(obs_dim, dtype=torch.float64))
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("obs_scale", torch.ones(obs_dim))
        self.register_buffer("obs_shift", torch.zeros(obs_dim))

    def critic_parameter_names(self) -> frozenset[str]:
        """The value MLP's parameters (the actor's mean MLP and log std are the policy's)."""
        return frozenset(name for name, _ in self.named_parameters() if name.startswith("critic."))

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """``clip((obs - mean) / sqrt(var + eps), -10, 10)`` with the frozen statistics; ``(N, obs_dim)``."""
        if not self.normalize_observations:
            return obs
        return torch.clamp((obs - self.obs_shift) * self.obs_scale, -OBSERVATION_CLIP, OBSERVATION_CLIP)

    @torch.no_grad()
    def update_normalizer(self, obs: np.ndarray) -> None:
        """Merge a batch of raw observations ``(N, obs_dim)`` (of every process) into the running mean/var
        (Chan et al. parallel update).
        """
        if not self.normalize_observations or len(obs) == 0:
            return
        batch = torch.as_tensor(obs, dtype=torch.float64, device=self.obs_mean.device)
        batch_mean, batch_var, batch_count = batch.mean(0), batch.var(0, unbiased=False), float(batch.shape[0])
        batch_mean, batch_var, batch_count = merge_moments(batch_mean, batch_var, batch_count)  # every process's
        mean, var, count = combine_moments(
            self.obs_mean, self.obs_var, self.obs_count, batch_mean, batch_var, batch_count
        )
        self.obs_mean.copy_(mean)
        self.obs_var.copy_(var)
        self.obs_count.copy_(count)
        self.obs_shift.copy_(self.obs_mean.to(self.obs_shift.dtype))
        self.obs_scale.copy_(torch.rsqrt(self.obs_var + NORMALIZER_EPS).to(self.obs_scale.dtype))

    @torch.no_grad()
    def action_mean(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action ``mu(s)`` for raw observations ``(N, obs_dim)``; returns ``(N, action_dim)``."""
        return self.actor_mean(self.normalize(obs))

    @torch.no_grad()
    def numpy_actor(self) -> NumpyActor:
        """A CPU numpy copy of the current actor for stepping environments (see ``NumpyActor``)."""
        linears = [layer for layer in self.actor_mean if isinstance(layer, nn.Linear)]
        return NumpyActor(
            weights=[layer.weight.detach().cpu().numpy().T.copy() for layer in linears],
            biases=[layer.bias.detach().cpu().numpy().copy() for layer in linears],
            std=torch.exp(self.actor_log_std).detach().cpu().numpy().copy(),
            obs_shift=self.obs_shift.cpu().numpy().copy(),
            obs_scale=self.obs_scale.cpu().numpy().copy(),
            normalize_observations=self.normalize_observations,
            activation=self.activation,
        )

    def critic_value(self, normalized: torch.Tensor) -> torch.Tensor:
        """The value MLP on normalised observations ``(..., obs_dim)``, or zeros without a critic; ``(...)``."""
        if self.critic is None:
            return normalized.new_zeros(normalized.shape[:-1])
        return self.critic(normalized).squeeze(-1)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)`` for raw observations ``(N, obs_dim)``; returns ``(N,)``."""
        return self.critic_value(self.normalize(obs))

    @torch.no_grad()
    def rollout_record(self, obs: torch.Tensor, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the update needs from the behaviour policy, for a whole rollout at once: ``old_logp``, the
        old action mean (for the exact KL), ``values``; every tensor ``(N,)`` or ``(N, action_dim)``."""
        normalized = self.normalize(obs)
        mean = self.actor_mean(normalized)
        log_std = self.actor_log_std.expand_as(mean)
        return {
            "old_logp": diagonal_gaussian_log_prob(actions, mean, log_std),
            "old_mean": mean,
            "old_log_std": log_std.clone(),
            "values": self.critic_value(normalized),
        }

    def forward(self, inputs: dict[str, torch.Tensor]) -> Evaluation:
        """Evaluate a minibatch of transitions: ``inputs`` holds ``obs (N, obs_dim)``, ``actions (N, action_dim)``,
        ``old_mean (N, action_dim)`` and ``old_log_std (N, action_dim)``; every output is ``(N,)``. A minibatch of
        whole episodes, ``(E, T, ...)`` each, gives ``(E, T)``."""
        normalized = self.normalize(inputs["obs"])
        mean = self.actor_mean(normalized)
        log_std = self.actor_log_std.expand_as(mean)
        return Evaluation(
            logp=diagonal_gaussian_log_prob(inputs["actions"], mean, log_std),
            entropy=(0.5 + LOG_SQRT_2PI + log_std).sum(-1),
            value=self.critic_value(normalized),
            kl=gaussian_kl(inputs["old_mean"], inputs["old_log_std"], mean, log_std),
        )


class NumpyActor:
    """The actor's forward pass in numpy, frozen at the parameters it was made from.

    Acting needs one batch-1 MLP call per environment step; numpy does that in about 7 us where
    torch's per-op dispatch takes about 40 us (measured; docs/results.md), and the
    environments are on the CPU anyway. The update never uses it: log-probs and values of the
    rollout are recomputed by the torch module in one batched call, so PPO's ratio starts at 1.
    A test pins ``mean`` to ``GaussianActorCritic.action_mean``.
    """

    def __init__(
        self, weights, biases, std, obs_shift, obs_scale, normalize_observations: bool, activation: str = "tanh"
    ) -> None:
        self.weights, self.biases, self.std = weights, biases, std
        self.obs_shift, self.obs_scale, self.normalize_observations = obs_shift, obs_scale, normalize_observations
        self.activation = NUMPY_ACTIVATIONS[activation]

    def mean(self, obs: np.ndarray) -> np.ndarray:
        """``mu(s)`` for raw float32 observations ``(N, obs_dim)``; returns ``(N, action_dim)``."""
        hidden = obs
        if self.normalize_observations:
            hidden = np.clip((obs - self.obs_shift) * self.obs_scale, -OBSERVATION_CLIP, OBSERVATION_CLIP)
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            hidden = hidden @ weight + bias
            if index < last:
                hidden = self.activation(hidden)
        return hidden

    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``a ~ N(mu(s), std^2)``, unclipped; ``(N, obs_dim) -> (N, action_dim)`` float32."""
        mean = self.mean(obs)
        return (mean + self.std * rng.standard_normal(mean.shape, dtype=np.float32)).astype(np.float32, copy=False)


def diagonal_gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``sum_i [-(a_i - mu_i)^2 / (2 s_i^2) - log s_i - log sqrt(2 pi)]``: independent action dims
    (Huang et al. 2022); ``(N, D) -> (N,)``.
    """
    return (-0.5 * ((actions - mean) * torch.exp(-log_std)) ** 2 - log_std - LOG_SQRT_2PI).sum(-1)
