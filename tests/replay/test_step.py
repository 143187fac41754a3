"""The simulated step: gradients of the surrogate, a real parameter change, exact restore."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pdm_replay.math.support import build_support
from pdm_replay.replay.batching import micro_batches
from pdm_replay.replay.checkpoint import load_policy
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import LossInputs, PassConfig, accumulate_gradients, forward_stats
from pdm_replay.replay.step import ParamSnapshot, make_optimizer, simulated_step


@pytest.fixture(scope="module")
def setup(model_dir: Path, replay_log: Path):
    policy = load_policy(model_dir)
    sb = seed_batch(LogIndex.of(RolloutLog.open(replay_log)), 8, 1, policy.vocab_size)
    f = sb.flat
    inputs = LossInputs(torch.from_numpy(f.token_id), torch.from_numpy(f.logp_behavior),
                        torch.from_numpy(f.advantage))
    return policy, sb, inputs


def grads_of(policy, batches, inputs, weight, n) -> list[torch.Tensor]:
    params = list(policy.model.parameters())
    for p in params:
        p.grad = None
    accumulate_gradients(policy, batches, inputs, weight, n, PassConfig(chunk_tokens=5))
    out = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    return out


def test_gradient_equals_naive_surrogate_and_is_micro_batch_invariant(setup):
    policy, sb, inputs = setup
    n = len(sb.flat)
    weight = (torch.arange(n) % 3 != 0).double()  # a mask dropping every third token
    g1 = grads_of(policy, micro_batches(sb.prompts, sb.responses, 1), inputs, weight, n)
    g8 = grads_of(policy, micro_batches(sb.prompts, sb.responses, 8), inputs, weight, n)
    # Naive: full logits of each unpadded sample, the SPEC §6 loss written out directly.
    params = list(policy.model.parameters())
    logps = []
    for p, r in zip(sb.prompts, sb.responses):
        z = policy.model(input_ids=torch.tensor([p + r])).logits[0, len(p) - 1:-1]
        logps.append(torch.log_softmax(z, -1).gather(1, torch.tensor(r)[:, None])[:, 0])
    r_t = torch.exp(torch.cat(logps).double() - inputs.logp_behavior)
    loss = -(weight * r_t * inputs.advantage).sum() / n
    g_ref = torch.autograd.grad(loss, params, allow_unused=True)
    for a, b, ref in zip(g1, g8, g_ref):
        ref = torch.zeros_like(a) if ref is None else ref
        assert torch.allclose(a, b, atol=1e-7, rtol=1e-4)
        assert torch.allclose(a, ref, atol=1e-7, rtol=1e-4)
    assert max(g.abs().max() for g in g1) > 0


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_weights_restored_bit_identically(setup, optimizer):
    policy, sb, inputs = setup
    params = list(policy.model.parameters())
    before = [p.detach().clone() for p in params]
    snap = ParamSnapshot(params)
    batches = micro_batches(sb.prompts, sb.responses, 4)
    n = len(sb.flat)
    changed = simulated_step(
        params, snap, lambda: accumulate_gradients(policy, batches, inputs,
                                                   torch.ones(n, dtype=torch.float64), n,
                                                   PassConfig()),
        optimizer=optimizer, lr=1e-2,
        measure=lambda s: sum(int((d != 0).sum()) for d in s.delta()))
    assert changed > 0  # the step really moved θ
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before))
    assert snap.matches()
    assert all(p.grad is None for p in params)


def test_snapshot_moves_a_mapped_checkpoint_into_memory_torch_owns(model_dir: Path):
    """transformers loads CPU safetensors weights as views of the file's private mapping
    (storage not resizable); after the snapshot every parameter has storage of its own,
    with the same values, and a step no longer writes into the mapping."""
    policy = load_policy(model_dir)
    params = list(policy.model.parameters())
    mapped = [p.detach() for p in params]
    assert not any(m.untyped_storage().resizable() for m in mapped)  # else this tests nothing
    snap = ParamSnapshot(params)
    assert all(p.untyped_storage().resizable() for p in params)
    assert all(torch.equal(p.detach(), m) for p, m in zip(params, mapped))
    assert all(p.data_ptr() != m.data_ptr() for p, m in zip(params, mapped))
    before = [m.clone() for m in mapped]
    with torch.no_grad():
        for p in params:
            p.add_(1.0)
    assert all(torch.equal(m, b) for m, b in zip(mapped, before))
    snap.restore()
    assert snap.matches()


def test_snapshot_leaves_parameters_torch_allocated_in_place():
    w = torch.nn.Parameter(torch.ones(3))
    ptr = w.data_ptr()
    ParamSnapshot([w])
    assert w.data_ptr() == ptr


def test_restore_happens_even_when_measuring_fails(setup):
    policy, sb, inputs = setup
    params = list(policy.model.parameters())
    snap = ParamSnapshot(params)
    n = len(sb.flat)
    batches = micro_batches(sb.prompts, sb.responses, 8)

    def boom(_):
        raise RuntimeError("measure failed")
    with pytest.raises(RuntimeError):
        simulated_step(params, snap, lambda: accumulate_gradients(
            policy, batches, inputs, torch.ones(n, dtype=torch.float64), n, PassConfig()),
            optimizer="sgd", lr=1.0, measure=boom)
    assert snap.matches()


def test_step_is_real_sgd_raises_logp_of_positive_advantage_tokens(setup):
    """Under the `none` update, mean(sign(Â)·Δlog π_k) > 0."""
    policy, sb, inputs = setup
    params = list(policy.model.parameters())
    snap = ParamSnapshot(params)
    batches = micro_batches(sb.prompts, sb.responses, 8)
    f = sb.flat
    support = build_support(torch.from_numpy(f.token_id), torch.from_numpy(f.topk_ids))
    pre = forward_stats(policy, batches, support, PassConfig())
    n = len(f)
    post = simulated_step(
        params, snap, lambda: accumulate_gradients(policy, batches, inputs,
                                                   torch.ones(n, dtype=torch.float64), n,
                                                   PassConfig()),
        optimizer="sgd", lr=0.5,
        measure=lambda s: forward_stats(policy, batches, support, PassConfig()))
    delta = post.logp_k - pre.logp_k
    assert (torch.sign(inputs.advantage) * delta).mean() > 0


def test_grad_reduce_hook_sees_every_gradient(setup):
    policy, sb, inputs = setup
    params = list(policy.model.parameters())
    snap = ParamSnapshot(params)
    seen = []

    def reduce(ps):  # what an all-reduce would be handed
        seen.extend(p.grad is not None for p in ps)
        for p in ps:
            p.grad.mul_(0.0)  # "other ranks" cancel everything: no step at all
    n = len(sb.flat)
    batches = micro_batches(sb.prompts, sb.responses, 8)
    moved = simulated_step(params, snap, lambda: accumulate_gradients(
        policy, batches, inputs, torch.zeros(n, dtype=torch.float64), n, PassConfig()),
        optimizer="sgd", lr=1.0, grad_reduce=reduce,
        measure=lambda s: max(float(d.abs().max()) for d in s.delta()))
    assert seen and all(seen) and moved == 0.0


def test_unknown_optimizer():
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer("lion", [torch.nn.Parameter(torch.zeros(1))], 0.1)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_target_norm_step_has_that_norm_and_equals_an_explicit_lr_step(optimizer):
    """--lr auto: the step taken at the lr TargetNorm chose is that lr's ordinary step
    (bit for bit), and its realized ‖Δθ‖ is the target up to the rounding of θ + Δθ to
    float32: at most ‖½ ulp‖ over the weights (twice θ's ulp where a weight crosses a
    binade). Adam's first step moves every weight by ±lr almost exactly, so the rounding
    errors of one binade align and the staircase is coarse; SGD's reach rtol."""
    from pdm_replay.replay.step import StepInfo, TargetNorm

    g = torch.Generator().manual_seed(0)
    start = torch.randint(-512, 512, (64, 8), generator=g).float() / 1024
    grad = torch.randn(64, 8, generator=g)
    w = torch.nn.Parameter(start.clone())
    snap = ParamSnapshot([w])

    def backward():
        (w * grad).sum().backward()
    info = StepInfo()
    moved = simulated_step([w], snap, backward, optimizer=optimizer, lr=TargetNorm(0.0123),
                           measure=lambda s: s.delta()[0].clone(), info=info)
    assert torch.equal(w.detach(), start)  # restored
    ulp = torch.nextafter(start.abs(), torch.full_like(start, 1.0)) - start.abs()
    assert abs(info.step_norm - 0.0123) <= float(ulp.double().norm())  # 2 × ‖½ ulp‖
    if optimizer == "sgd":
        assert info.step_norm == pytest.approx(0.0123, rel=1e-7)
    again = simulated_step([w], snap, backward, optimizer=optimizer, lr=info.lr,
                           measure=lambda s: s.delta()[0].clone())
    assert torch.equal(moved, again)
