"""A hand-built replay run whose every report number is worked out by hand below.

Thresholds: delta_kl = 0.1, delta_tv = 0.2 (tokens footer). Masks: none, dppo_topk_kl,
pdm_kl_agg, pdm_kl_uniform, dppo_topk_tv, pdm_tv_agg (pdm_tv_uniform is absent, so the
tv/uniform comparison is missing). Keep decisions follow SPEC §4: masked iff outside the
region and sign(A)·slope > 0 (ratio slope r - 1, predictive slope dkl_agg / dkl_uniform /
dtv_agg); A = 0 is always kept.

Seed 1 (sample "a"):
  pos A   r    kl   dkl_local agg   uni   | keep r/agg/uni | tv   dtv_agg | keep tvr/tva
  0  +1  1.5  0.3   +0.2     +0.1  +0.15 | F F F          | 0.3  -0.05   | F T  (tv disagree)
  1  +1  1.4  0.25  +0.2     -0.05 +0.05 | F T F          | 0.1  +0.01   | T T
  2  -1  1.3  0.2   +0.1     -0.1  -0.1  | T F F          | 0.25 +0.02   | T T
  3  +1  0.6  0.15  -0.1     +0.05 -0.02 | T F T          | 0.05 0.0     | T T
  4  +1  1.2  0.05  +0.05    -0.01 -0.01 | T T T (in)     | 0.05 0.0     | T T (mass overflow)
  5   0  2.0  0.4   +0.3     -0.2  -0.2  | T T T (A = 0)  | 0.05 0.0     | T T
  KL out of region O = {0,1,2,3,5} (5); disagreements agg {1 pred-kept, 2, 3 ratio-kept};
  uniform {2 ratio-kept}. TV O = {0, 2} (2); tv/agg disagreement {0 pred-kept}.
Seed 2 (sample "b"):
  0  +1  1.6  0.5   +0.3     -0.1  -0.1  | F T T
  1  -1  0.5  0.3   -0.2     +0.1  +0.1  | F T T
  2  +1  0.7  0.2   -0.1     +0.1  +0.1  | T F F
  3  -1  1.1  0.02  +0.05    +0.01 +0.01 | T T T (in)
  tv = 0.01 everywhere (no TV token out of region). KL O = {0,1,2} (3); disagreements for
  both estimators: {0, 1 pred-kept, 2 ratio-kept}.

Realized ΔD (delta_kl_topk / delta_tv_topk; every other update row is 0):
  seed 1: dppo_topk_kl: pos2 +0.02, pos3 -0.01 | pdm_kl_agg: pos1 -0.03
          none (kl): pos0 +0.05, pos1 -0.02, pos2 +0.01, pos3 +0.03, pos5 -0.1
          pdm_tv_agg (tv): pos0 +0.01 | none (tv): pos0 -0.01, pos2 -0.02
  seed 2: dppo_topk_kl: pos2 +0.05 | pdm_kl_agg: pos0 +0.04, pos1 -0.02
          pdm_kl_uniform: pos0 -0.01, pos1 -0.03 | none (kl): pos0 +0.01, pos1 -0.01, pos2 +0.02
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pdm_replay.schema import UPDATES_V1, tokens_schema

MASK_NAMES = ["none", "dppo_topk_kl", "pdm_kl_agg", "pdm_kl_uniform", "dppo_topk_tv",
              "pdm_tv_agg"]
THRESHOLDS = {"eps": 0.2, "eps_low": 0.2, "eps_high": 0.28, "delta_kl": 0.1, "delta_tv": 0.2}
T, F = True, False
# seed, sample, pos, A, r, kl, dkl_local, dkl_agg, dkl_uniform, tv, dtv_agg,
# keep (MASK_NAMES order), mass overflow
TOKENS = [
    (1, "a", 0, 1.0, 1.5, 0.3, 0.2, 0.1, 0.15, 0.3, -0.05, (T, F, F, F, F, T), F),
    (1, "a", 1, 1.0, 1.4, 0.25, 0.2, -0.05, 0.05, 0.1, 0.01, (T, F, T, F, T, T), F),
    (1, "a", 2, -1.0, 1.3, 0.2, 0.1, -0.1, -0.1, 0.25, 0.02, (T, T, F, F, T, T), F),
    (1, "a", 3, 1.0, 0.6, 0.15, -0.1, 0.05, -0.02, 0.05, 0.0, (T, T, F, T, T, T), F),
    (1, "a", 4, 1.0, 1.2, 0.05, 0.05, -0.01, -0.01, 0.05, 0.0, (T, T, T, T, T, T), T),
    (1, "a", 5, 0.0, 2.0, 0.4, 0.3, -0.2, -0.2, 0.05, 0.0, (T, T, T, T, T, T), F),
    (2, "b", 0, 1.0, 1.6, 0.5, 0.3, -0.1, -0.1, 0.01, 0.0, (T, F, T, T, T, T), F),
    (2, "b", 1, -1.0, 0.5, 0.3, -0.2, 0.1, 0.1, 0.01, 0.0, (T, F, T, T, T, T), F),
    (2, "b", 2, 1.0, 0.7, 0.2, -0.1, 0.1, 0.1, 0.01, 0.0, (T, T, F, F, T, T), F),
    (2, "b", 3, -1.0, 1.1, 0.02, 0.05, 0.01, 0.01, 0.01, 0.0, (T, T, T, T, T, T), F),
]
DELTA_KL = {
    (1, "dppo_topk_kl", 2): 0.02, (1, "dppo_topk_kl", 3): -0.01, (1, "pdm_kl_agg", 1): -0.03,
    (1, "none", 0): 0.05, (1, "none", 1): -0.02, (1, "none", 2): 0.01, (1, "none", 3): 0.03,
    (1, "none", 5): -0.1,
    (2, "dppo_topk_kl", 2): 0.05, (2, "pdm_kl_agg", 0): 0.04, (2, "pdm_kl_agg", 1): -0.02,
    (2, "pdm_kl_uniform", 0): -0.01, (2, "pdm_kl_uniform", 1): -0.03,
    (2, "none", 0): 0.01, (2, "none", 1): -0.01, (2, "none", 2): 0.02,
}
DELTA_TV = {(1, "pdm_tv_agg", 0): 0.01, (1, "none", 0): -0.01, (1, "none", 2): -0.02}
MANIFEST = {"config": {"thresholds": THRESHOLDS}, "recompute_deviation": {"max": 0.002,
                                                                          "mean": 0.0005}}


def token_rows(seed: int | None = None) -> list[dict]:
    """tokens/v1 rows of the table above (all seeds, or one)."""
    rows = []
    for s, sid, pos, a, r, kl, loc, agg, uni, tv, dtv, keep, over in TOKENS:
        if seed is not None and s != seed:
            continue
        row = {"seed": s, "sample_id": sid, "step": 0, "pos": pos, "token_id": 10 + pos,
               "advantage": a, "logp_behavior": -1.0, "logp_train": -1.0, "ratio": r,
               "support_size": 5, "mu_tail": 0.01, "pi_tail": 0.01, "kl_topk": kl,
               "tv_topk": tv, "kl_binary": kl / 2, "tv_binary": tv / 2, "dkl_local": loc,
               "dkl_agg": agg, "dkl_uniform": uni, "dtv_agg": dtv, "dtv_uniform": dtv,
               "mass_overflow": over}
        row.update({f"keep_{m}": k for m, k in zip(MASK_NAMES, keep)})
        rows.append(row)
    return rows


def tokens_table(rows: list[dict], *, replay: bool, footer: dict | None) -> pa.Table:
    # columns this file does not set (the contract grows) are written as nulls
    schema = pa.schema([f if f.name in rows[0] else f.with_nullable(True)
                        for f in tokens_schema(MASK_NAMES, replay=replay)],
                       metadata=tokens_schema(MASK_NAMES, replay=replay).metadata)
    cols = {f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in schema}
    table = pa.table(cols, schema=schema)
    md = dict(table.schema.metadata or {})
    if footer is not None:
        md[b"pdm_replay.thresholds"] = json.dumps(footer).encode()
    return table.replace_schema_metadata(md)


def updates_table(seed: int, update_masks: list[str]) -> pa.Table:
    rows = []
    for r in token_rows(seed):
        for mask in update_masks:
            dkl = DELTA_KL.get((seed, mask, r["pos"]), 0.0)
            dtv = DELTA_TV.get((seed, mask, r["pos"]), 0.0)
            rows.append({"seed": seed, "update_mask": mask, "sample_id": r["sample_id"],
                         "pos": r["pos"], "kept": r[f"keep_{mask}"], "logp_post": -0.9,
                         "kl_topk_post": r["kl_topk"] + dkl, "tv_topk_post": r["tv_topk"] + dtv,
                         "delta_kl_topk": dkl, "delta_tv_topk": dtv, "delta_logp": 0.1})
    return pa.Table.from_pylist(rows, schema=UPDATES_V1)


def write_run(run: Path, *, update_masks: list[str] = MASK_NAMES, footer: dict | None =
              THRESHOLDS, manifest: dict | None = MANIFEST) -> Path:
    for seed in (1, 2):
        d = run / "tokens" / f"seed={seed}"
        d.mkdir(parents=True)
        pq.write_table(tokens_table(token_rows(seed), replay=True, footer=footer),
                       d / "part-0000.parquet")
        if update_masks:
            u = run / "updates" / f"seed={seed}"
            u.mkdir(parents=True)
            pq.write_table(updates_table(seed, update_masks), u / "part-0000.parquet")
    if manifest is not None:
        (run / "manifest.json").write_text(json.dumps(manifest))
    return run
