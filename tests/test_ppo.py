"""The shared update: Adam and grad clipping against torch's own, compiled step against eager, the update loop."""

import copy

import pytest
import torch

from agents.core.batch import Minibatch, minibatch_indices
from agents.core.config import PPOConfig
from agents.core.minibatch_step import STAT_NAMES, make_minibatch_step
from agents.core.objectives import Clip, NoClip, Penalty
from agents.core.optimizer import AdamState, adam_step, clip_by_global_norm
from agents.core.update import NonFiniteLossError, UpdateSchedule, explained_variance, ppo_update
from agents.walkers.gaussian import GaussianActorCritic


def test_adam_step_matches_torch_adam():
    torch.manual_seed(0)
    reference = [torch.randn(5, 3, requires_grad=True), torch.randn(3, requires_grad=True)]
    ours = {str(i): p.detach().clone() for i, p in enumerate(reference)}
    optimizer = torch.optim.Adam(reference, lr=3e-4, eps=1e-5)
    state = AdamState(ours)
    for _ in range(5):
        grads = [torch.randn_like(p) for p in reference]
        for p, g in zip(reference, grads):
            p.grad = g.clone()
        optimizer.step()
        adam_step(ours, {str(i): g for i, g in enumerate(grads)}, state, torch.tensor(3e-4), 1e-5)
    for i, p in enumerate(reference):
        torch.testing.assert_close(ours[str(i)], p.detach(), rtol=1e-6, atol=1e-7)
    assert state.step.item() == 5


def test_clip_by_global_norm_matches_clip_grad_norm():
    torch.manual_seed(1)
    params = [torch.randn(4, 4, requires_grad=True), torch.randn(4, requires_grad=True)]
    grads = [torch.randn(4, 4) * 3, torch.randn(4) * 3]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    expected_norm = torch.nn.utils.clip_grad_norm_(params, 0.5)
    clipped, norm = clip_by_global_norm({"a": grads[0], "b": grads[1]}, 0.5)
    torch.testing.assert_close(norm, expected_norm)
    torch.testing.assert_close(clipped["a"], params[0].grad)
    small, _ = clip_by_global_norm({"a": torch.full((2,), 1e-3)}, 0.5)
    assert torch.equal(small["a"], torch.full((2,), 1e-3))


def make_batch(policy: GaussianActorCritic, n: int = 256, seed: int = 0) -> Minibatch:
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=generator)
    actions = policy.action_mean(obs) + torch.randn(n, 2, generator=generator)
    record = policy.rollout_record(obs, actions)
    return Minibatch(
        inputs={"obs": obs, "actions": actions, "old_mean": record["old_mean"], "old_log_std": record["old_log_std"]},
        old_logp=record["old_logp"],
        advantages=torch.randn(n, generator=generator),
        returns=torch.randn(n, generator=generator),
        old_values=record["values"],
        mask=torch.ones(n),
    )


def stats_of_first_step(objective, cfg):
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    params = {k: p.detach() for k, p in policy.named_parameters()}
    step = make_minibatch_step(policy, objective, cfg, compile=False)
    batch = make_batch(policy)
    stats = step(params, AdamState(params), batch, torch.arange(64), torch.tensor(3e-4), torch.tensor(1.0))
    return dict(zip(STAT_NAMES, stats.tolist(), strict=True))


@pytest.mark.parametrize("objective", [Clip(), Penalty(), NoClip()])
def test_first_minibatch_sees_ratio_one(objective):
    stats = stats_of_first_step(objective, PPOConfig())
    assert stats["approx_kl_k1"] == 0.0 and stats["approx_kl_k3"] == 0.0 and stats["kl_exact"] == 0.0
    assert stats["clip_fraction"] == 0.0


def test_step_changes_parameters_in_place_and_policy_follows():
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    before = copy.deepcopy(policy.state_dict())
    params = {k: p.detach() for k, p in policy.named_parameters()}
    step = make_minibatch_step(policy, Clip(), PPOConfig(), compile=False)
    batch = make_batch(policy)
    step(params, AdamState(params), batch, torch.arange(64), torch.tensor(1e-2), torch.tensor(0.0))
    assert not torch.equal(before["actor_mean.0.weight"], policy.state_dict()["actor_mean.0.weight"])
    assert torch.equal(before["obs_mean"], policy.state_dict()["obs_mean"])


def test_compiled_step_matches_eager_step():
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        policy = GaussianActorCritic(4, 2)
        params = {k: p.detach() for k, p in policy.named_parameters()}
        adam = AdamState(params)
        step = make_minibatch_step(policy, Penalty(), PPOConfig(value_clip=0.2, ent_coef=0.01), compile=compiled)
        batch = make_batch(policy)
        for index in minibatch_indices(batch.size, 64, torch.Generator().manual_seed(3)):
            stats = step(params, adam, batch, index, torch.tensor(1e-3), torch.tensor(0.5))
        results.append((stats, {k: v.clone() for k, v in params.items()}))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-4, atol=1e-6)
    for name in results[0][1]:
        torch.testing.assert_close(results[0][1][name], results[1][1][name], rtol=1e-4, atol=1e-6)


def run_update(cfg: PPOConfig, learning_rate: float = 3e-4, spoil=None):
    """One ppo_update of a fresh policy on a random batch (optionally altered by ``spoil``)."""
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    params = {k: p.detach() for k, p in policy.named_parameters()}
    step = make_minibatch_step(policy, Clip(), cfg, compile=False)
    batch = make_batch(policy)
    batch = spoil(batch) if spoil else batch
    return ppo_update(
        policy,
        params,
        AdamState(params),
        step,
        batch,
        cfg,
        UpdateSchedule(learning_rate, 0.0),
        torch.Generator().manual_seed(0),
    )


def test_ppo_update_runs_all_epochs_and_reports_kl():
    result = run_update(PPOConfig(epochs=3, minibatch_size=64))
    assert result.stats["epochs_run"] == 3.0
    assert result.kl_after_update > 0.0
    assert result.kl_after_update == result.stats["kl_after_update"]


@pytest.mark.parametrize("reshuffle", [True, False])
def test_minibatches_are_reshuffled_each_epoch_unless_switched_off(reshuffle):
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    params = {k: p.detach() for k, p in policy.named_parameters()}
    cfg = PPOConfig(epochs=3, minibatch_size=64, reshuffle_each_epoch=reshuffle)
    step = make_minibatch_step(policy, Clip(), cfg, compile=False)
    seen = []

    def recording_step(params, adam, batch, index, lr, beta):
        seen.append(index.clone())
        return step(params, adam, batch, index, lr, beta)

    batch = make_batch(policy)
    ppo_update(policy, params, AdamState(params), recording_step, batch, cfg, UpdateSchedule(3e-4, 0.0),
               torch.Generator().manual_seed(0))  # fmt: skip
    per_epoch = len(seen) // 3
    epochs = [torch.cat(seen[e * per_epoch : (e + 1) * per_epoch]) for e in range(3)]
    assert all(sorted(order.tolist()) == list(range(batch.size)) for order in epochs)
    assert all(torch.equal(epochs[0], order) for order in epochs[1:]) == (not reshuffle)


def test_refresh_runs_before_every_epoch_after_the_first_and_its_batch_is_trained_on():
    torch.manual_seed(0)
    policy = GaussianActorCritic(4, 2)
    params = {k: p.detach() for k, p in policy.named_parameters()}
    cfg = PPOConfig(epochs=3, minibatch_size=64)
    step = make_minibatch_step(policy, Clip(), cfg, compile=False)
    seen, refreshed = [], []

    def recording_step(params, adam, batch, index, lr, beta):
        seen.append(float(batch.advantages.sum()))
        return step(params, adam, batch, index, lr, beta)

    def refresh(batch):
        refreshed.append(batch)
        return batch._replace(advantages=batch.advantages + 1.0, returns=batch.old_values)  # a perfect critic

    batch = make_batch(policy)
    result = ppo_update(policy, params, AdamState(params), recording_step, batch, cfg, UpdateSchedule(3e-4, 0.0),
                        torch.Generator().manual_seed(0), refresh=refresh)  # fmt: skip
    assert len(refreshed) == 2 and refreshed[0] is batch  # before epochs 2 and 3, each on the latest batch
    per_epoch = len(seen) // 3
    first = float(batch.advantages.sum())
    assert seen[0] == pytest.approx(first)
    assert seen[per_epoch] == pytest.approx(first + batch.size)
    assert seen[-1] == pytest.approx(first + 2 * batch.size)
    assert result.stats["epochs_run"] == 3.0
    # the rollout critic's explained variance (about 0 on random returns), not the refreshed batch's (1)
    assert result.stats["explained_variance"] == explained_variance(batch.old_values, batch.returns, batch.mask) < 0.5


def test_target_kl_stops_after_the_first_epoch():
    result = run_update(PPOConfig(epochs=10, minibatch_size=64, target_kl=1e-9), learning_rate=1e-2)
    assert result.stats["epochs_run"] == 1.0


def test_non_finite_loss_raises():
    with pytest.raises(NonFiniteLossError, match="value_loss"):
        run_update(
            PPOConfig(epochs=1, minibatch_size=64),
            spoil=lambda batch: batch._replace(returns=torch.full_like(batch.returns, float("nan"))),
        )


def test_minibatch_indices_cover_every_item_once_per_epoch():
    indices = list(minibatch_indices(12, 4, torch.Generator().manual_seed(0)))
    assert len(indices) == 3
    assert sorted(torch.cat(indices).tolist()) == list(range(12))


def test_fused_adam_step_matches_the_written_out_adam():
    from agents.core.optimizer import fused_adam_step

    torch.manual_seed(0)
    ours = {"w": torch.randn(6, 4), "b": torch.randn(4)}
    fused = {k: v.clone() for k, v in ours.items()}
    state_ours, state_fused = AdamState(ours), AdamState(fused)
    for _ in range(4):
        grads = {k: torch.randn_like(v) for k, v in ours.items()}
        adam_step(ours, grads, state_ours, torch.tensor(1e-2), 1e-5)
        fused_adam_step(fused, grads, state_fused, torch.tensor(1e-2), 1e-5)
    for name in ours:
        torch.testing.assert_close(fused[name], ours[name], rtol=1e-5, atol=1e-6)
    assert state_fused.step.item() == state_ours.step.item() == 4
    torch.testing.assert_close(state_fused.exp_avg_sq["w"], state_ours.exp_avg_sq["w"])
