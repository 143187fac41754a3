"""First-order attribution of realized ΔD: the KL functional, the JVP linear term against
finite differences, lr → 0, the self term (per-token gradients) and the updates columns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.io.reader import read_meta
from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.masks import Thresholds
from pdm_replay.math import divergence as dv
from pdm_replay.math.attribution import kl_topk_weights
from pdm_replay.math.support import (ReducedPair, build_support, gather_support_logprobs,
                                     reduce_logprobs)
from pdm_replay.replay.attribution_pass import attribution_sample, disagreement_tokens, shard_sample
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import forward_stats
from pdm_replay.replay.head_tangents import (chunk_logprobs, chunk_tangents,
                                             linear_chunk_tangents)
from pdm_replay.replay.probe import ProbedStep, probe_step
from pdm_replay.commands.replay import run_replay
from pdm_replay.replay.outputs import post_columns
from pdm_replay.replay.tangent import TangentPass, current_params, sequence_batches
from pdm_replay.tokens import log_stats

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
# torch's first forward-mode AD call of a process loads its jvp decompositions through
# torch.jit.script, which torch 2.13 itself flags as deprecated: not this project's code.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")
F64 = torch.float64


# --- the KL functional (pure math) ------------------------------------------------------

def _kl_of_logits(z: torch.Tensor, support, mu) -> tuple[torch.Tensor, ...]:
    """kl_topk of µ against softmax(z) (N, V) on ``support``, built as replay builds it."""
    lp = torch.log_softmax(z, -1)
    ids = torch.where(support.valid, support.ids, support.ids[:, :1])
    lp_s = lp.gather(1, ids).masked_fill(~support.valid, -math.inf)
    tail = lp.exp().scatter(1, ids, 0.0).sum(-1)
    pi = reduce_logprobs(lp_s)
    pi = type(pi)(p=pi.p, logp=pi.logp, tail=tail, log_tail=tail.log(), mass=pi.mass)
    return dv.kl_topk(ReducedPair(support, mu, pi)), lp_s, tail.log()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), v=st.integers(3, 30), k=st.integers(1, 5),
       seed=st.integers(0, 2**16), mu_scale=st.sampled_from([0.5, 2.0, 5.0]))
def test_kl_weights_give_the_directional_derivative(n, v, k, seed, mu_scale):
    """Σ w·d log π equals a central finite difference of kl_topk along a random dz."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, v, generator=g, dtype=F64) * 2
    dz = torch.randn(n, v, generator=g, dtype=F64)
    support = build_support(torch.randint(0, v, (n,), generator=g),
                            torch.randint(-1, v, (n, k), generator=g))
    logp_behavior = torch.log_softmax(torch.randn(n, v, generator=g, dtype=F64) * mu_scale, -1)
    ids = torch.where(support.valid, support.ids, support.ids[:, :1])
    mu = reduce_logprobs(gather_support_logprobs(support, logp_behavior.gather(1, ids[:, :1])[:, 0],
                                                 logp_behavior.gather(1, ids[:, 1:])))
    _, lp_s, log_tail = _kl_of_logits(z, support, mu)
    w = kl_topk_weights(mu, lp_s, log_tail)
    h = 1e-6
    fd = (_kl_of_logits(z + h * dz, support, mu)[0]
          - _kl_of_logits(z - h * dz, support, mu)[0]) / (2 * h)
    _, (_, d_s, d_tail) = torch.func.jvp(lambda x: _kl_of_logits(x, support, mu), (z,), (dz,))
    got = w.apply(d_s, d_tail)
    assert torch.allclose(got, fd, atol=1e-7, rtol=1e-5)


def test_kl_weights_zero_where_floored_or_invalid():
    mu = reduce_logprobs(torch.tensor([[math.log(0.5), math.log(0.3), -math.inf]], dtype=F64))
    # slot 2 invalid (-inf); π_1 = e^-40 below the 1e-12 floor
    lp_s = torch.tensor([[math.log(0.4), -40.0, -math.inf]], dtype=F64)
    w = kl_topk_weights(mu, lp_s, torch.tensor([math.log(0.6)], dtype=F64))
    assert w.w_s.tolist() == [[-0.5, 0.0, 0.0]]
    assert w.w_tail.item() == pytest.approx(-0.2)
    nan = torch.tensor([[1.0, float("nan"), float("inf")]], dtype=F64)
    assert w.apply(nan, torch.tensor([1.0], dtype=F64)).item() == pytest.approx(-0.7)


@settings(max_examples=30, deadline=None)
@given(c=st.integers(1, 5), v=st.integers(3, 40), m=st.integers(1, 6), hdim=st.integers(1, 6),
       temp=st.sampled_from([1.0, 0.7, 1.5]), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_head_tangents_equal_jvp_of_chunk_logprobs(c, v, m, hdim, temp, bias, seed):
    """Both head paths (materialised dz, linear contraction) equal forward-mode AD."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=F64)  # noqa: E731
    w, dw, h, dh = r(v, hdim) * 2, r(v, hdim), r(c, hdim), r(c, hdim)
    b, db = (r(v), r(v)) if bias else (None, None)
    ids = torch.randint(0, v, (c, m), generator=g)
    valid = torch.ones(c, m, dtype=torch.bool)
    for j in range(1, m):  # repeats are invalid, as build_support marks them
        valid[:, j] = (ids[:, j:j + 1] != ids[:, :j]).all(-1)
    logits = lambda t: ((h + t * dh) @ (w + t * dw).T  # noqa: E731
                        + (0 if b is None else b + t * db)) / temp
    t0 = (torch.tensor(0.0, dtype=F64),)
    ref_s, ref_tail = torch.func.jvp(lambda t: chunk_logprobs(logits(t), ids), t0,
                                     (torch.tensor(1.0, dtype=F64),))[1]
    z, dz = torch.func.jvp(logits, t0, (torch.tensor(1.0, dtype=F64),))
    got = [chunk_tangents(z.clone(), dz.clone(), ids),
           linear_chunk_tangents(h, dh, w, dw, b, db, ids, valid, temp)]
    tail = ref_tail.isfinite()
    for d_s, d_tail in got:
        assert torch.allclose(d_s[valid].double(), ref_s[valid], atol=1e-5, rtol=1e-4)
        assert torch.allclose(d_tail[tail].double(), ref_tail[tail], atol=1e-5, rtol=1e-4)


# --- model passes on the shipped sample checkpoint ------------------------------------

@pytest.fixture(scope="module")
def sample_step() -> ProbedStep:
    """Eight samples of the sample log (its first rows: step 8; the finite-difference test
    needs > 20 tokens with a non-negligible linear term), their own θ_8 and one real
    SGD step Δθ."""
    torch.set_num_threads(1)
    return probe_step(SAMPLE / "checkpoints" / "step_8", SAMPLE / "rollouts", samples=8)


def _kl_at(s: dict, eps: float) -> torch.Tensor:
    """kl_topk (N,) at θ + eps·Δθ through the production recompute path; θ restored."""
    params = s.snap.params
    with torch.no_grad():
        for p, d in zip(params, s.delta):
            p.add_(d, alpha=eps)
        try:
            post = forward_stats(s.policy, s.batches, s.pre.support, s.cfg)
        finally:
            s.snap.restore()
    return post_columns(s.pre, post)["kl_topk_post"]


def test_jvp_linear_term_equals_finite_differences(sample_step):
    s = sample_step
    lin = s.attr.linear(s.delta)
    assert s.snap.matches()
    big = lin.abs() > 1e-3 * lin.abs().max()
    assert big.sum() > 20
    d0 = _kl_at(s, 0.0)
    central = (_kl_at(s, 0.05) - _kl_at(s, -0.05)) / 0.1
    assert torch.allclose(central[big], lin[big], rtol=2e-2, atol=1e-3 * lin.abs().max())
    # The one-sided quotient (D(θ + εΔθ) − D(θ))/ε converges to it, with error O(ε): by
    # Taylor, (ε/2)·D'' + O(ε²), D'' from the central second difference. (Some tokens are
    # strongly curved: in seed 0's batch the largest |lin| one has a one-sided error of
    # 38% at ε = 0.1, 96% of it that second-order term.)
    errs = [((_kl_at(s, e) - d0) / e - lin)[big].abs().median() for e in (0.4, 0.1)]
    assert errs[1] < 0.5 * errs[0]
    plus, minus = _kl_at(s, 0.1), _kl_at(s, -0.1)
    one_sided, second = (plus - d0) / 0.1, (plus + minus - 2 * d0) / 0.1 ** 2
    err = (one_sided - lin)[big]
    assert torch.allclose(err, 0.05 * second[big], rtol=0.2, atol=1e-2 * lin.abs().max())


def test_gradient_dots_vmap_and_loop_equal_naive_autograd(sample_step):
    s = sample_step
    policy, attr = s.policy, s.attr
    row, positions = sequence_batches(s.batches[0])[1]
    offset = s.batches[0].n_tokens - positions.size  # row 1 follows row 0
    select = torch.tensor([0, 2, positions.size - 1])
    rows = torch.from_numpy(positions[select.numpy()])
    assert int(rows[0]) == offset
    d_fn = lambda lp_s, lp_tail, r: attr.weights.take(r).apply(lp_s, lp_tail)  # noqa: E731
    k_fn = lambda lp_s, lp_tail, r: lp_s[:, 0]  # noqa: E731
    prim = current_params(policy)
    grouped = attr.tangent.gradient_dots(row, rows, select, d_fn, k_fn, prim, 2 ** 31)
    looped = attr.tangent.gradient_dots(row, rows, select, d_fn, k_fn, prim, 1)
    assert torch.allclose(grouped, looped, rtol=1e-5)
    named = dict(policy.model.named_parameters())
    ref, scale = [], []
    for j in range(select.numel()):
        lp_s, lp_tail = attr.tangent._call({f"model.{k}": v for k, v in named.items()}, row,
                                           attr.tangent.ids[rows], select)
        ga = torch.autograd.grad(d_fn(lp_s, lp_tail, rows)[j], list(named.values()),
                                 retain_graph=True)
        gb = torch.autograd.grad(lp_s[j, 0], list(named.values()))
        ref.append(sum(float((x.double() * y.double()).sum()) for x, y in zip(ga, gb)))
        scale.append(sum(float((x.double() * y.double()).abs().sum()) for x, y in zip(ga, gb)))
    # Both sides are dots of float32 gradients. If each gradient entry carries a relative
    # error <= g, the dot's error is <= 2g * sum|x_i y_i| (first order); g = 5e-5 bounds the
    # relative error measured across ATEN_CPU_CAPABILITY=default vs avx2 (the 2,189-size dot
    # moved by 0.09). The rows share one float32 graph, so each is also only known to about
    # one float32 ulp of the largest dot: a near-zero dot (-4.15e-4, a weight near its zero)
    # moved by 2.3e-7 there, 5e-4 of itself but 1e-10 of the largest.
    err = (grouped - torch.tensor(ref, dtype=F64)).abs()
    scale = torch.tensor(scale, dtype=F64)
    bound = 2 * 5e-5 * scale + torch.finfo(torch.float32).eps * scale.max()
    assert bool((err <= bound).all()), (err, bound)
    assert all(p.grad is None for p in policy.model.parameters())


def test_sample_holds_every_disagreement_token():
    meta = read_meta(SAMPLE / "rollouts")
    index = LogIndex.of(RolloutLog.open(SAMPLE / "rollouts"))
    flat = seed_batch(index, 64, 0, meta.vocab_size).flat
    stats, loss = log_stats(flat, meta.vocab_size, meta), flat.loss_mask  # logged π
    thresholds = Thresholds()
    dis = np.flatnonzero(disagreement_tokens(stats, thresholds) & loss)
    assert dis.size > 0
    sample = attribution_sample(stats, loss, thresholds, 5, rng_seed=3)
    assert set(dis) <= set(sample) and sample.size == dis.size + 5
    assert np.array_equal(sample, attribution_sample(stats, loss, thresholds, 5, rng_seed=3))
    assert not np.array_equal(sample, attribution_sample(stats, loss, thresholds, 5, rng_seed=4))


# --- end to end on the tiny test model ------------------------------------------------

def _run(log: Path, ckpt: Path, out: Path, **kw):
    cfg = dict(seeds=1, batch_size=6, micro_batch_size=4, chunk_tokens=16,
               update_masks=("none", "dppo_topk_kl", "pdm_kl_agg"))
    res = run_replay(ReplayConfig(log=log, checkpoint=ckpt, out=out, **{**cfg, **kw}))
    return pq.read_table(res.run_dir / "updates" / "seed=0" / "part-0.parquet").to_pandas()


def test_realized_over_linear_tends_to_one_as_lr_shrinks(tmp_path, replay_log, model_dir):
    # On seed 0's batch max |delta_kl_lin| ≈ 200·lr: these lrs take ΔD from ~2 (far from
    # linear) down to ~0.02, where the relative curvature share is of order 1e-2.
    errs = []
    for lr in (1e-2, 1e-3, 1e-4):
        u = _run(replay_log, model_dir, tmp_path / f"lr{lr}", optimizer="sgd", lr=lr,
                 update_masks=("none",), attribution_sample=0)
        lin, real = u.delta_kl_lin.to_numpy(), u.delta_kl_topk.to_numpy()
        big = np.abs(lin) > np.quantile(np.abs(lin), 0.5)
        errs.append(float(np.median(np.abs(real[big] / lin[big] - 1))))
        assert np.allclose(u.delta_kl_curv, real - lin)
    assert errs[0] > errs[1] > errs[2] and errs[2] < 0.02, errs


def test_one_loss_token_self_term_equals_linear_term(tmp_path, replay_log, model_dir):
    rows = pq.read_table(replay_log).to_pylist()
    row = next(r for r in rows if r["advantages"][1] != 0)
    row["loss_mask"] = [i == 1 for i in range(len(row["response_ids"]))]
    log = write_rollouts(tmp_path / "one.parquet", [row], read_meta(replay_log))
    u = _run(log, model_dir, tmp_path / "one", optimizer="sgd", lr=1e-2)
    assert len(u) == 3 and u.delta_kl_self.notna().all()  # one token x three update masks
    kept = u[u.kept]
    assert len(kept) >= 1 and (kept.delta_kl_self != 0).all()
    assert np.allclose(kept.delta_kl_self, kept.delta_kl_lin, rtol=1e-3, atol=0)
    assert np.allclose(kept.delta_kl_cross, 0, atol=1e-3 * np.abs(kept.delta_kl_lin).max())
    assert (u[~u.kept].delta_kl_self == 0).all() and (u[~u.kept].delta_kl_lin == 0).all()


def test_columns_null_by_optimizer_and_option(tmp_path, replay_log, model_dir):
    sgd = _run(replay_log, model_dir, tmp_path / "sgd", optimizer="sgd", lr=1e-2,
               attribution_sample=4, thresholds=Thresholds(delta_kl=0.05))
    n_tok = len(sgd) // 3
    per_mask = sgd.groupby("update_mask").delta_kl_self.count()
    assert (per_mask == per_mask.iloc[0]).all() and 4 <= per_mask.iloc[0] < n_tok
    assert sgd.delta_kl_lin.notna().all() and sgd.delta_kl_curv.notna().all()
    assert (sgd.delta_kl_cross.notna() == sgd.delta_kl_self.notna()).all()
    adam = _run(replay_log, model_dir, tmp_path / "adam", optimizer="adam", lr=1e-3)
    assert adam.delta_kl_lin.notna().all() and adam.delta_kl_self.isna().all()
    assert adam.delta_kl_cross.isna().all()
    off = _run(replay_log, model_dir, tmp_path / "off", optimizer="sgd", lr=1e-2,
               attribution=False)
    assert off[["delta_kl_lin", "delta_kl_curv", "delta_kl_self"]].isna().all().all()
    assert np.allclose(off.delta_kl_topk, sgd.delta_kl_topk, rtol=0, atol=0)


def test_linear_head_fast_path_equals_generic_jvp_path(sample_step):
    """A head that is not exactly the output embedding takes the per-chunk jvp path."""
    s = sample_step
    policy, attr = s.policy, s.attr
    lin = policy.model.get_output_embeddings()
    scaled = Policy(model=policy.model, head=lambda h: lin(h) * (1 + 2 ** -20),
                    vocab_size=policy.vocab_size, source=policy.source)
    generic = TangentPass(scaled, attr.tangent.ids, attr.tangent.valid, chunk_tokens=7)
    assert attr.tangent._linear_head(torch.zeros(1, lin.in_features)) is not None
    assert generic._linear_head(torch.ones(1, lin.in_features)) is None
    prim = current_params(policy)
    tang = dict(zip(attr.names, s.delta))
    n = s.batches[0].n_tokens
    fast = attr.tangent.directional_logprobs(s.batches[0], slice(0, n), prim, tang)
    slow = generic.directional_logprobs(s.batches[0], slice(0, n), prim, tang)
    valid = attr.tangent.valid[:n]
    assert torch.allclose(fast[0][valid], slow[0][valid], rtol=1e-3, atol=1e-6)
    assert torch.allclose(fast[1], slow[1], rtol=1e-3, atol=1e-6)


def test_cli_attribution_options(tmp_path, replay_log, model_dir):
    from typer.testing import CliRunner

    from pdm_replay.cli import app
    base = ["replay", str(replay_log), "--checkpoint", str(model_dir), "--seeds", "1",
            "--batch-size", "4", "--update-masks", "none", "--chunk-tokens", "16"]
    res = CliRunner().invoke(app, base + ["--out", str(tmp_path / "off"), "--no-attribution"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "off" / "manifest.json").read_text())
    assert manifest["config"]["attribution"] is False
    upd = pq.read_table(tmp_path / "off" / "updates" / "seed=0" / "part-0.parquet")
    assert upd["delta_kl_lin"].null_count == upd.num_rows
    res = CliRunner().invoke(app, base + ["--out", str(tmp_path / "bad"),
                                          "--attribution-sample", "-1"])
    assert res.exit_code == 2 and not (tmp_path / "bad").exists()


@given(st.lists(st.integers(0, 30), min_size=1, max_size=6), st.integers(0, 80),
       st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_sharded_sample_is_the_one_process_sample(counts: list[int], size: int,
                                                  rng_seed: int):
    """Candidates split over ranks in order: the ranks' picks, put back in place, are what
    one process holding every candidate picks, whatever the world size."""
    whole = shard_sample([sum(counts)], 0, size, rng_seed)
    starts = np.cumsum([0] + counts[:-1])
    parts = [start + shard_sample(counts, r, size, rng_seed) for r, start in enumerate(starts)]
    assert np.array_equal(np.concatenate(parts), whole)
    assert len(whole) == min(size, sum(counts))
    for r, part in enumerate(parts):
        assert ((part >= starts[r]) & (part < starts[r] + counts[r])).all()
