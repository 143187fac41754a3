"""Chunked recomputation vs naive full-logits computation, on random logits and a real model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.io.reader import iter_flat_tokens
from pdm_replay.math.divergence import kl_exact
from pdm_replay.math.support import Support, build_support
from pdm_replay.replay.batching import micro_batches
from pdm_replay.replay.checkpoint import load_policy
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import PassConfig, behavior_hidden, forward_stats
from pdm_replay.replay.recompute import support_stats, token_logprob

from tolerances import CHUNKING_ATOL, LOGPROB_ATOL, PROB_ATOL


def naive(logits: torch.Tensor, support: Support, temperature: float = 1.0) -> dict:
    """Reference values from the full ``(N, V)`` log-softmax in float64."""
    lp = torch.log_softmax(logits.double() / temperature, -1)
    ids = torch.where(support.valid, support.ids, support.ids[:, :1])
    at_s = lp.gather(1, ids).masked_fill(~support.valid, -math.inf)
    tail = 1.0 - torch.exp(at_s).sum(-1)
    return {"logp_s": at_s, "tail": tail, "sum_pi2": lp.exp().square().sum(-1), "lp": lp}


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), v=st.integers(2, 40), k=st.integers(1, 6),
       chunk=st.integers(1, 10), temp=st.sampled_from([1.0, 0.7, 1.3]),
       scale=st.sampled_from([0.1, 3.0, 12.0]), seed=st.integers(0, 2**16))
def test_support_stats_equal_naive(n, v, k, chunk, temp, scale, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=g) * scale
    topk = torch.randint(-1, v, (n, k), generator=g)  # -1 = padding; repeats allowed
    support = build_support(torch.randint(0, v, (n,), generator=g), topk)
    got = support_stats(logits.clone(), lambda h: h, support, temperature=temp,
                        chunk_tokens=chunk)
    ref = naive(logits, support, temp)
    assert torch.allclose(got.logp_s[support.valid], ref["logp_s"][support.valid], atol=LOGPROB_ATOL)
    assert torch.all(torch.isinf(got.logp_s[~support.valid]))
    assert torch.allclose(got.log_tail.exp(), ref["tail"].clamp(min=0), atol=PROB_ATOL)
    assert torch.allclose(got.sum_pi2, ref["sum_pi2"], rtol=1e-5)


def test_tiny_tail_keeps_relative_precision():
    """A tail of ~1e-12 is summed directly, not obtained as 1 − (something close to 1)."""
    logits = torch.tensor([[0.0, -30.0, -31.0]])
    support = build_support(torch.tensor([0]), torch.tensor([[-1]]))
    got = support_stats(logits.clone(), lambda h: h, support)
    exact = math.log(math.exp(-30.0) + math.exp(-31.0)) - math.log1p(
        math.exp(-30.0) + math.exp(-31.0))
    assert got.log_tail.item() == pytest.approx(exact, rel=1e-6)


@pytest.fixture(scope="module")
def policy(model_dir: Path):
    return load_policy(model_dir)


@pytest.fixture(scope="module")
def behavior(behavior_dir: Path):
    return load_policy(behavior_dir)


@pytest.fixture(scope="module")
def batch(replay_log: Path, policy):
    sb = seed_batch(LogIndex.of(RolloutLog.open(replay_log)), 8, 0, policy.vocab_size)
    support = build_support(torch.from_numpy(sb.flat.token_id), torch.from_numpy(sb.flat.topk_ids))
    return sb, support


def model_logits(policy, sb) -> torch.Tensor:
    """``model(input_ids).logits`` of each unpadded sample at its response positions."""
    out = []
    for p, r in zip(sb.prompts, sb.responses):
        with torch.no_grad():
            z = policy.model(input_ids=torch.tensor([p + r])).logits[0]
        out.append(z[len(p) - 1:len(p) - 1 + len(r)])
    return torch.cat(out)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_recompute_matches_full_logits_of_the_model(policy, batch, temperature):
    sb, support = batch
    got = forward_stats(policy, micro_batches(sb.prompts, sb.responses, 8), support,
                        PassConfig(temperature=temperature, chunk_tokens=7))
    ref = naive(model_logits(policy, sb), support, temperature)
    valid = support.valid
    assert torch.allclose(got.logp_s[valid], ref["logp_s"][valid], atol=LOGPROB_ATOL)
    assert torch.allclose(got.log_tail.exp(), ref["tail"], atol=PROB_ATOL)
    assert torch.allclose(got.sum_pi2, ref["sum_pi2"], atol=PROB_ATOL)


def test_chunked_equals_unchunked(policy, batch):
    sb, support = batch
    batches = micro_batches(sb.prompts, sb.responses, 8)
    one = forward_stats(policy, batches, support, PassConfig(chunk_tokens=100_000))
    many = forward_stats(policy, batches, support, PassConfig(chunk_tokens=3))
    for a, b in [(one.logp_s, many.logp_s), (one.log_tail, many.log_tail),
                 (one.sum_pi2, many.sum_pi2)]:
        assert torch.allclose(a, b, atol=CHUNKING_ATOL, equal_nan=True)


def test_micro_batch_1_equals_8(policy, behavior, batch):
    """Right padding must not leak into real positions (batch size 1 has no padding)."""
    sb, support = batch
    stats = {}
    for size in (1, 8):
        batches = micro_batches(sb.prompts, sb.responses, size)
        mu_h = behavior_hidden(behavior, batches)
        stats[size] = forward_stats(policy, batches, support, PassConfig(chunk_tokens=16),
                                    behavior, mu_h)
    a, b = stats[1], stats[8]
    assert torch.allclose(a.logp_s[support.valid], b.logp_s[support.valid], atol=LOGPROB_ATOL)
    assert torch.allclose(a.sum_pi2, b.sum_pi2, atol=PROB_ATOL)
    assert torch.allclose(a.exact.kl_exact, b.exact.kl_exact, atol=PROB_ATOL)


def test_lengths_vary_so_padding_is_exercised(batch):
    """Guard for the test above: the micro-batch of 8 really pads (ragged samples)."""
    sb, _ = batch
    b = micro_batches(sb.prompts, sb.responses, 8)[0]
    assert (b.attention_mask == 0).float().mean() > 0.2


def test_exact_stats_and_dkl_exact_finite_difference(policy, behavior, batch):
    """dkl_exact equals a central difference of KL(µ ‖ softmax(z + ηv)), v = e_k − π,
    on the model's real logits; kl_exact equals the naive full-vocabulary KL."""
    sb, support = batch
    batches = micro_batches(sb.prompts, sb.responses, 4)
    got = forward_stats(policy, batches, support, PassConfig(chunk_tokens=5), behavior,
                        behavior_hidden(behavior, batches))
    z = model_logits(policy, sb).double()
    logp_behavior = torch.log_softmax(model_logits(behavior, sb).double(), -1)
    k = support.ids[:, 0]
    pi = torch.softmax(z, -1)
    v = torch.nn.functional.one_hot(k, z.shape[1]).double() - pi
    kl = lambda eta: kl_exact(logp_behavior, torch.log_softmax(z + eta * v, -1))  # noqa: E731
    eta = 1e-4
    fd = (kl(eta) - kl(-eta)) / (2 * eta)
    assert torch.allclose(got.dkl_exact(), fd, atol=1e-6, rtol=1e-4)
    assert torch.allclose(got.exact.kl_exact, kl(0.0), atol=PROB_ATOL)
    assert (fd.abs() > 1e-4).any()  # the check is not vacuous


def test_token_logprob_gradient_matches_unchunked(policy, batch):
    sb, _ = batch
    h = torch.randn(10, 32, dtype=torch.float32, requires_grad=True)
    k = torch.from_numpy(sb.flat.token_id[:10])
    w = policy.model.get_output_embeddings().weight
    chunked = token_logprob(h, policy.head, k, chunk_tokens=3)
    (g_chunk_h, g_chunk_w) = torch.autograd.grad(chunked.sum(), [h, w])
    full = torch.log_softmax(policy.head(h), -1).gather(1, k[:, None])[:, 0]
    (g_h, g_w) = torch.autograd.grad(full.sum(), [h, w])
    assert torch.allclose(chunked, full, atol=CHUNKING_ATOL)
    assert torch.allclose(g_chunk_h, g_h, atol=CHUNKING_ATOL)
    assert torch.allclose(g_chunk_w, g_w, atol=CHUNKING_ATOL)


def test_flat_order_matches_reader(replay_log: Path):
    """Seed batches read every drawn row in log order, like the plain reader."""
    sb = seed_batch(LogIndex.of(RolloutLog.open(replay_log)), 100, 0, 384)
    flat = next(iter_flat_tokens(replay_log))
    assert np.array_equal(sb.flat.token_id, flat.token_id)
    assert list(sb.flat.sample_id) == list(flat.sample_id)


def test_single_chunk_without_checkpoint_is_bit_identical(policy, batch):
    """One chunk skips activation checkpointing: the same values and gradients, bit for bit
    (the checkpointed backward recomputes the same kernels on the same inputs)."""
    from torch.utils.checkpoint import checkpoint

    from pdm_replay.replay.recompute import _logp_k_chunk
    sb, _ = batch
    h = torch.randn(10, 32, dtype=torch.float32, requires_grad=True)
    k = torch.from_numpy(sb.flat.token_id[:10])
    w = policy.model.get_output_embeddings().weight
    plain = token_logprob(h, policy.head, k, chunk_tokens=10)
    g_plain = torch.autograd.grad(plain.sum(), [h, w])
    ckpt = checkpoint(_logp_k_chunk, h, k, policy.head, 1.0, use_reentrant=False)
    g_ckpt = torch.autograd.grad(ckpt.sum(), [h, w])
    assert torch.equal(plain, ckpt)
    assert all(torch.equal(a, b) for a, b in zip(g_plain, g_ckpt))
