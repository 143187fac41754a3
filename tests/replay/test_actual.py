"""The actual update (--next-checkpoint) against independent forwards of θ_{t+1}, its
linear term against finite differences along θ_{t+1} − θ_t, --lr auto, and µ fidelity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from replay_helpers import one_step_checkpoint, plain_logprobs, sample_rows
from safetensors.torch import load_file

from pdm_replay.math import divergence as dv
from pdm_replay.math.support import (ReducedPair, build_support, gather_support_logprobs,
                                     reduce_logprobs)
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.commands.replay import run_replay
from tolerances import LOGPROB_ATOL

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")
# Recomputed (chunked LM head, padded micro-batches) vs one unpadded full-vocabulary
# forward: float32 logits through different kernels (derivation in tests/tolerances.py).
FORWARD_ATOL = LOGPROB_ATOL
SMALL = dict(seeds=2, batch_size=6, micro_batch_size=4, lr=1e-3, chunk_tokens=16)


def load(path: Path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, replay_log, model_dir) -> Path:
    return one_step_checkpoint(model_dir, tmp_path_factory.mktemp("next") / "next", replay_log)


@pytest.fixture(scope="module")
def actual_run(tmp_path_factory, replay_log, model_dir, behavior_dir, pair):
    out = tmp_path_factory.mktemp("runs") / "actual"
    return run_replay(ReplayConfig(log=replay_log, checkpoint=model_dir, out=out,
                                   behavior_checkpoint=behavior_dir, next_checkpoint=pair,
                                   trainer_mask="dppo_topk_kl", update_masks=("none",),
                                   **SMALL))


def tables(run: Path, seed: int = 0) -> tuple[dict, dict]:
    """tokens rows and updates rows by (update_mask) of ``seed``, as Python lists."""
    tok = pq.read_table(run / "tokens" / f"seed={seed}" / "part-0.parquet").to_pydict()
    upd = pq.read_table(run / "updates" / f"seed={seed}" / "part-0.parquet").to_pylist()
    by_mask: dict[str, list[dict]] = {}
    for row in upd:
        by_mask.setdefault(row["update_mask"], []).append(row)
    return tok, by_mask


def logged_pair(row: dict, pos: int, lp: torch.Tensor):
    """µ (from the log) and π = exp(lp) (a (V,) float64 log-softmax) on the token's support."""
    support = build_support(torch.tensor([row["response_ids"][pos]]),
                            torch.tensor([row["topk_ids"][pos]]))
    mu = reduce_logprobs(gather_support_logprobs(
        support, torch.tensor([row["behavior_logprobs"][pos]], dtype=torch.float64),
        torch.tensor([row["topk_logprobs"][pos]], dtype=torch.float64)))
    ids = torch.where(support.valid, support.ids, support.ids[:, :1])
    lp_s = lp[None].gather(1, ids).masked_fill(~support.valid, -math.inf)
    tail = lp.exp()[None].scatter(1, ids, 0.0).sum(-1)
    pi = reduce_logprobs(lp_s)
    pi = type(pi)(p=pi.p, logp=pi.logp, tail=tail, log_tail=tail.log(), mass=pi.mass)
    return ReducedPair(support, mu, pi), ids[0]


def kl_at(model, rows: dict, keys: list[tuple[str, int]]) -> np.ndarray:
    """kl_topk (logged µ vs ``model``'s π) at every (sample_id, pos), from plain forwards."""
    cache: dict[str, torch.Tensor] = {}
    out = []
    for sid, pos in keys:
        row = rows[sid]
        if sid not in cache:
            cache[sid] = plain_logprobs(model, row["prompt_ids"], row["response_ids"])
        out.append(float(dv.kl_topk(logged_pair(row, pos, cache[sid][pos])[0])[0]))
    return np.array(out)


def test_actual_rows_equal_an_independent_forward_of_the_next_checkpoint(
        actual_run, replay_log, pair, behavior_dir):
    tok, upd = tables(actual_run.run_dir)
    rows, nxt, mu_model = sample_rows(replay_log), load(pair), load(behavior_dir)
    actual = upd["actual"]
    assert [(r["sample_id"], r["pos"]) for r in actual] == list(zip(tok["sample_id"], tok["pos"]))
    assert [r["kept"] for r in actual] == tok["keep_dppo_topk_kl"]  # the trainer's mask
    for i, r in enumerate(actual):
        row = rows[r["sample_id"]]
        lp = plain_logprobs(nxt, row["prompt_ids"], row["response_ids"])[r["pos"]]
        pair_, ids = logged_pair(row, r["pos"], lp)
        assert r["logp_post"] == pytest.approx(float(lp[row["response_ids"][r["pos"]]]),
                                               abs=FORWARD_ATOL)
        assert np.allclose(r["support_logp_post"], lp[ids[pair_.support.valid[0]]].numpy(),
                           atol=FORWARD_ATOL)
        assert r["kl_topk_post"] == pytest.approx(float(dv.kl_topk(pair_)[0]),
                                                  abs=2 * FORWARD_ATOL)
        assert r["delta_kl_topk"] == pytest.approx(r["kl_topk_post"] - tok["kl_topk"][i],
                                                   abs=1e-12)
        logp_behavior = plain_logprobs(mu_model, row["prompt_ids"], row["response_ids"])[r["pos"]]
        assert r["kl_exact_post"] == pytest.approx(float(dv.kl_exact(logp_behavior[None], lp[None])[0]),
                                                   abs=2 * FORWARD_ATOL)
        assert r["delta_kl_self"] is None and r["delta_kl_cross"] is None
    assert actual_run.manifest["updates"] == ["actual", "none"]
    assert actual_run.manifest["trainer_mask"] == {"mask": "dppo_topk_kl"}


def test_actual_linear_term_is_the_derivative_along_the_real_step(actual_run, replay_log,
                                                                   model_dir, pair):
    """delta_kl_lin = ⟨∇D, θ_{t+1} − θ_t⟩ against central differences of D along the step,
    θ(h) = θ_t + h·Δθ, from plain forwards. fd(h) = lin + c·h² + O(h⁴) + noise, so
    Richardson's (4·fd(½) − fd(1))/3 leaves O(h⁴); |fd(1) − fd(½)| ≈ ¾·c estimates the
    unextrapolated error and bounds the extrapolated one. The noise: D from float32 logits
    (≤ FORWARD_ATOL per D, over 2h)."""
    tok, upd = tables(actual_run.run_dir)
    keys = list(zip(tok["sample_id"], tok["pos"]))
    rows = sample_rows(replay_log)
    theta, step = load(model_dir), load(pair)
    delta = {n: q.detach() - p.detach() for (n, p), (_, q) in
             zip(theta.named_parameters(), step.named_parameters())}

    def moved(h: float):
        m = load(model_dir)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.add_(h * delta[n])
        return m
    fd = {h: (kl_at(moved(h), rows, keys) - kl_at(moved(-h), rows, keys)) / (2 * h)
          for h in (1.0, 0.5)}
    richardson = (4 * fd[0.5] - fd[1.0]) / 3
    lin = np.array([r["delta_kl_lin"] for r in upd["actual"]])
    bound = np.abs(fd[1.0] - fd[0.5]) + 2 * FORWARD_ATOL / 0.5
    assert np.all(np.abs(lin - richardson) <= bound)
    assert np.abs(lin).max() > 10 * bound.max()  # the step moved D: the check has teeth
    curv = np.array([r["delta_kl_curv"] for r in upd["actual"]])
    realized = np.array([r["delta_kl_topk"] for r in upd["actual"]])
    assert np.allclose(lin + curv, realized, atol=1e-12)


def test_lr_auto_matches_the_actual_step_norm(tmp_path, replay_log, model_dir, pair):
    res = run_replay(ReplayConfig(log=replay_log, checkpoint=model_dir, out=tmp_path / "auto",
                                  next_checkpoint=pair, trainer_mask="none",
                                  update_masks=("none", "pdm_kl_agg"), attribution=False,
                                  **{**SMALL, "seeds": 1, "lr": "auto"}))
    a, b = load_file(model_dir / "model.safetensors"), load_file(pair / "model.safetensors")
    target = math.sqrt(sum(float((b[k].double() - a[k].double()).square().sum()) for k in a))
    # ‖½ ulp(θ)‖: the realized norm may differ from the intended one by the rounding of
    # θ + Δθ to float32 (replay.step, take_step); ulps of θ_{t+1} can be twice
    # θ_t's where a weight crosses a binade, hence the factor 2.
    ulp = math.sqrt(sum(float(((torch.nextafter(v.abs(), torch.full_like(v, math.inf))
                                - v.abs()).double() / 2).square().sum()) for v in a.values()))
    (group,) = res.manifest["update_steps"]["0"]
    assert group["actual_step_norm"] == pytest.approx(target, rel=1e-12)
    for name in ("none", "pdm_kl_agg"):
        got = group["updates"][name]
        assert abs(got["step_norm"] - target) <= 2 * ulp
        assert abs(got["step_norm"] - target) <= 1e-6 * target  # the requirement
        assert got["lr"] > 0
    assert group["updates"]["none"]["lr"] != group["updates"]["pdm_kl_agg"]["lr"]


def test_behavior_fidelity_gaps(actual_run, replay_log, behavior_dir):
    """behavior_logp_gap = reloaded log µ(k) − logged log µ(k), from a plain forward of the
    behavior checkpoint; the manifest pools |gap| beside float32's unit roundoff."""
    tok, _ = tables(actual_run.run_dir)
    rows, mu_model = sample_rows(replay_log), load(behavior_dir)
    gaps = []
    for sid, pos, gap, worst in zip(tok["sample_id"], tok["pos"], tok["behavior_logp_gap"],
                                    tok["behavior_logp_gap_max"]):
        row = rows[sid]
        logp_behavior = plain_logprobs(mu_model, row["prompt_ids"], row["response_ids"])[pos]
        want = float(logp_behavior[row["response_ids"][pos]]) - row["behavior_logprobs"][pos]
        assert gap == pytest.approx(want, abs=FORWARD_ATOL)
        pair_, ids = logged_pair(row, pos, logp_behavior)
        valid = pair_.support.valid[0]
        want_max = (logp_behavior[ids] - pair_.mu.logp[0]).abs()[valid].max()
        assert worst == pytest.approx(float(want_max), abs=FORWARD_ATOL)
        assert worst >= abs(gap) - 1e-12
        gaps.append(abs(gap))
    fid = actual_run.manifest["behavior_fidelity"]
    assert fid["dtype"] == "float32" and fid["unit_roundoff"] == 2.0 ** -24
    assert fid["gap_k"]["max"] >= max(gaps)  # pooled over both seeds


def test_report_of_an_actual_run_shows_it_first_with_mu_fidelity(actual_run) -> None:
    from pdm_replay.report.build import build_report
    from pdm_replay.report.db import connect
    # only `none` was simulated: the own-update basis is absent, `actual` leads
    bases = [r["basis"] for r in actual_run.summary]
    assert bases and bases[0] == "actual" and set(bases) == {"actual", "none"}
    with connect(actual_run.run_dir) as db:
        report = build_report(db, bootstrap_samples=50)
    assert report.headline["basis"][0] == "actual"
    fid = {r["scope"]: r for r in report.behavior_fidelity.to_dicts()}
    assert fid["all"]["n_tokens"] == actual_run.manifest["tokens"]
    assert 0.0 <= fid["all"]["within_one_rounding"] <= 1.0
    assert "disagreement" in set(report.estimator_accuracy["scope"])
    assert "actual" in set(report.sign_accuracy["basis"])
