"""icepop_pdm_kl: a composed mask added by its registration alone (issue 16).

IcePop's band (π/µ outside [icepop_low, icepop_high] is out of region) with PDM's
predictive KL direction. It shares the proximity "icepop" with ``icepop_ratio``, so the
registry pairs the two, and as it declares the family "kl" the pair is a comparison of
``report`` and of the dashboard, on its own band (not on kl_topk > δ_kl).

A hand-built run, seed 0, one sample, δ_kl = 0.1, band [0.5, 5.0]; keep columns follow the
registry's rule (masked iff outside and sign(Â)·slope > 0; ratio slope r − 1, predictive
slope dkl_agg); ΔD is delta_kl_topk under the basis `none` (every token kept):

  pos  Â    r    kl    dkl_agg | band: keep ratio / pred | kl_topk > δ: keep ratio / pred | ΔD
  0   +1   6.0  0.05  -0.1     | out: F T (pred-kept)    | in                             | +0.02
  1   +1   0.3  0.05  +0.2     | out: T F (ratio-kept)   | in                             | -0.01
  2   -1   8.0  0.3   -0.05    | out: T F (ratio-kept)   | out: T F (ratio-kept)          | +0.03
  3   +1   1.5  0.3   +0.1     | in                      | out: F F                       | 0
  4   +1   1.2  0.4   -0.2     | in                      | out: F T (pred-kept)           | -0.02
  5   -1   0.2  0.02  -0.3     | out: F F                | in                             | 0
  6   +1   2.0  0.01  +0.1     | in                      | in                             | 0

Band pair: 4 out of region {0, 1, 2, 5}, 3 disagreements; ratio-kept {1, 2}: unsafe 1/2;
predictive-kept {0}: unsafe 1/1. The KL pair keeps its own region: 3 out {2, 3, 4},
2 disagreements. Had the band pair been given kl_topk > δ, it would count 3 out of region.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdm_replay.masks.kinds import Criterion
from pdm_replay.masks import MASK_SPECS, Thresholds, mask_pairs
from pdm_replay.report import api
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.db import connect
from pdm_replay.schema import UPDATES_V1, tokens_schema

PAIR = "icepop_ratio vs icepop_pdm_kl"
KL_PAIR = "dppo_topk_kl vs pdm_kl_agg"
MASK_NAMES = ["none", "dppo_topk_kl", "pdm_kl_agg", "icepop_ratio", "icepop_pdm_kl"]
T, F = True, False
# pos, A, r, kl_topk, dkl_agg, keep (MASK_NAMES order), ΔD under `none`
TOKENS = [
    (0, 1.0, 6.0, 0.05, -0.1, (T, T, T, F, T), 0.02),
    (1, 1.0, 0.3, 0.05, 0.2, (T, T, T, T, F), -0.01),
    (2, -1.0, 8.0, 0.3, -0.05, (T, T, F, T, F), 0.03),
    (3, 1.0, 1.5, 0.3, 0.1, (T, F, F, T, T), 0.0),
    (4, 1.0, 1.2, 0.4, -0.2, (T, F, T, T, T), -0.02),
    (5, -1.0, 0.2, 0.02, -0.3, (T, T, T, F, F), 0.0),
    (6, 1.0, 2.0, 0.01, 0.1, (T, T, T, T, T), 0.0),
]
THRESHOLDS = {"delta_kl": 0.1, "delta_tv": 0.2, "icepop_low": 0.5, "icepop_high": 5.0}


def _tokens() -> pa.Table:
    rows = [{"seed": 0, "sample_id": "s", "step": 0, "pos": pos, "token_id": 10 + pos,
             "advantage": a, "logp_behavior": -1.0, "logp_train": -1.0 + math.log(r),
             "ratio": r, "support_size": 5, "mu_tail": 0.01, "pi_tail": 0.01, "kl_topk": kl,
             "tv_topk": 0.01, "kl_binary": kl / 2, "tv_binary": 0.005, "dkl_local": 0.0,
             "dkl_agg": agg, "dkl_uniform": agg, "dtv_agg": 0.0, "dtv_uniform": 0.0,
             "mass_overflow": False, **{f"keep_{m}": k for m, k in zip(MASK_NAMES, keep)}}
            for pos, a, r, kl, agg, keep, _ in TOKENS]
    full = tokens_schema(MASK_NAMES, replay=True)
    schema = pa.schema([f if f.name in rows[0] else f.with_nullable(True) for f in full],
                       metadata={**full.metadata,
                                 b"pdm_replay.thresholds": json.dumps(THRESHOLDS).encode()})
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type)
                     for f in schema}, schema=schema)


def _updates() -> pa.Table:
    rows = [{"seed": 0, "update_mask": "none", "sample_id": "s", "pos": pos, "kept": True,
             "logp_post": -0.9, "kl_topk_post": kl + dd, "tv_topk_post": 0.01,
             "delta_kl_topk": dd, "delta_tv_topk": 0.0, "delta_logp": 0.1}
            for pos, _, _, kl, _, _, dd in TOKENS]
    return pa.Table.from_pylist(rows, schema=UPDATES_V1)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    for sub, table in (("tokens", _tokens()), ("updates", _updates())):
        (tmp_path / "run" / sub / "seed=0").mkdir(parents=True)
        pq.write_table(table, tmp_path / "run" / sub / "seed=0" / "part-0000.parquet")
    return tmp_path / "run"


def test_the_registry_pairs_it_and_builds_its_band() -> None:
    spec = MASK_SPECS["icepop_pdm_kl"]
    assert (spec.family, spec.direction, spec.estimator, spec.proximity) == \
        ("kl", "predictive", "agg", "icepop")
    assert spec.build(Thresholds()) == Criterion("ratio", 0.5, 5.0, direction="predictive",
                                                 slope="dkl_agg")
    assert PAIR in [p.label for p in mask_pairs(None) if p.family == "kl"]


def test_report_compares_the_pair_on_its_own_band(run: Path) -> None:
    with connect(run) as db:
        (c,) = [c for c in db.layout.comparisons if c.pair == PAIR]
        head = {r["pair"]: r for r in api.headline(db, n_resamples=20).to_dicts()
                if r["basis"] == "none"}
        dis = api.disagreements(db, pair=PAIR, limit=None)
        outside = dict(api.mask_summary(db).select("mask", "n_out_of_region").rows())
    assert (c.stat, c.low, c.high, c.slope, c.region) == \
        ("ratio", 0.5, 5.0, "dkl_agg", "ratio ∉ [0.5, 5.0]")
    band, kl = head[PAIR], head[KL_PAIR]
    assert (band["family"], band["estimator"], band["region"]) == \
        ("kl", "agg", "ratio ∉ [0.5, 5.0]")
    assert (band["out_of_region_per_seed"], band["disagreement_per_seed"]) == (4.0, 3.0)
    assert (band["unsafe_ratio_pooled"], band["unsafe_predictive_pooled"]) == (0.5, 1.0)
    assert (kl["out_of_region_per_seed"], kl["disagreement_per_seed"]) == (3.0, 2.0)
    assert dict(zip(dis["pos"], dis["kept_by"])) == {0: "predictive", 1: "ratio",
                                                     2: "ratio"}
    # the mask summary counts each family mask's own region too
    assert (outside["icepop_pdm_kl"], outside["pdm_kl_agg"]) == (4, 3)


def test_dashboard_offers_the_pair_and_filters_by_it(run: Path) -> None:
    assert PAIR in dapi.pair_options()
    db, _ = dapi.connect_dashboard(run)
    with db:
        n = dapi.disagreement_count(db, dapi.DisagreementFilter(pair=PAIR))
        unsafe = dapi.disagreement_page(db, dapi.DisagreementFilter(
            pair=PAIR, update="none", delta_sign=1))
    assert n == 3
    assert sorted(unsafe["pos"]) == [0, 2] and set(unsafe["region"]) == {"ratio ∉ [0.5, 5.0]"}
