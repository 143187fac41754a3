"""Deterministic synthetic replay run directories, for doctests, tests and the benchmark.

No model is involved: random top-K distributions µ and perturbed π are logged, and the
tokens/v1 rows are computed from them by the real log-only code (:func:`log_stats`,
:func:`token_table`, every registered mask), so they follow the current contract. Only the
realized changes are made up: ΔD = sign(Â)·slope for tokens the update keeps, plus noise
from "other tokens", where slope is the aggregated-tail KL slope with 10 % noise (the TV
slope for TV), so predictive masks tend to win, as in the paper. Rows are generated and
written one part file at a time, so memory is bounded by ``part_rows``.

Examples
--------
>>> import tempfile, pathlib
>>> run = write_synthetic_run(pathlib.Path(tempfile.mkdtemp()) / "run", seeds=(3,),
...                           rows_per_seed=100, tokens_per_sample=10)
>>> sorted(p.name for p in run.iterdir())
['manifest.json', 'tokens', 'updates']
>>> [p.name for p in sorted((run / "tokens").iterdir())]
['seed=3']
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import torch

from pdm_replay.io.atomic import atomic_write_bytes, write_table_atomic
from pdm_replay.io.reader import FlatTokens
from pdm_replay.masks import MASK_SPECS, Thresholds, build_masks
from pdm_replay.math.support import build_support, gather_support_logprobs
from pdm_replay.schema import THRESHOLDS_KEY, UPDATES_V1
from pdm_replay.tokens import log_stats, support_lists, token_table

UPDATE_MASKS = ("none", "dppo_topk_kl", "pdm_kl_agg", "pdm_kl_uniform", "dppo_topk_tv",
                "pdm_tv_agg", "pdm_tv_uniform")


def _flat_tokens(rng: np.random.Generator, seed: int, first: int, n: int,
                 tokens_per_sample: int, top_k: int, vocab_size: int) -> FlatTokens:
    """``n`` logged tokens (global index ``first`` on) with random µ and a perturbed π.

    µ is a softmax over the K top-K atoms and one tail atom; π adds logit noise of a
    per-token scale, so a few percent of the tokens leave a δ = 0.15 region.
    """
    idx = np.arange(first, first + n)
    sample = idx // tokens_per_sample
    adv = rng.choice(np.array([-1.0, 0.0, 1.0]), size=int(sample[-1] - sample[0] + 1),
                     p=[0.45, 0.1, 0.45])[sample - sample[0]]
    z_mu = rng.normal(0.0, 1.5, (n, top_k + 1))
    z_pi = z_mu + rng.gamma(0.5, 0.5, (n, 1)) * rng.normal(0.0, 1.0, (n, top_k + 1))
    logp_behavior = z_mu - np.logaddexp.reduce(z_mu, axis=1, keepdims=True)
    logp_train = z_pi - np.logaddexp.reduce(z_pi, axis=1, keepdims=True)
    k = np.argmax(logp_behavior[:, :top_k] + rng.gumbel(size=(n, top_k)), axis=1)  # k ~ µ on top-K
    ids = rng.integers(0, vocab_size - top_k, (n, 1)) + np.arange(top_k)
    rows = np.arange(n)
    topk_mu = logp_behavior[:, :top_k].copy()
    topk_mu[rng.random(n) < 1e-4] += np.log(1.3)  # a few logs whose top-K mass exceeds 1
    names = np.array([f"s{seed}-{i}" for i in range(int(sample[0]), int(sample[-1]) + 1)],
                     dtype=object)
    return FlatTokens(sample_id=names[sample - sample[0]], step=np.zeros(n, np.int64),
                      row=sample - sample[0], pos=(idx % tokens_per_sample).astype(np.int32),
                      token_id=ids[rows, k], advantage=adv, logp_behavior=topk_mu[rows, k],
                      loss_mask=np.ones(n, bool), topk_ids=ids, topk_logprobs=topk_mu,
                      train_logprobs=logp_train[rows, k], train_topk_logprobs=logp_train[:, :top_k])


def _support_lists(flat: FlatTokens) -> dict[str, pa.Array]:
    """µ and π_pre over each token's support, as the replay writes them."""
    t = torch.from_numpy
    sup = build_support(t(flat.token_id), t(flat.topk_ids))
    return support_lists(sup, gather_support_logprobs(sup, t(flat.logp_behavior),
                                                      t(flat.topk_logprobs)),
                         gather_support_logprobs(sup, t(flat.train_logprobs),
                                                 t(flat.train_topk_logprobs)))


def _support_post(tok: pa.Table, logp_post: np.ndarray) -> pa.Array:
    """π_post over S: π_post(k) at the first slot, the rest of S rescaled so that S and the
    unchanged π tail still hold all the mass."""
    pre = tok.column("support_logp_pre").combine_chunks()
    offsets = pre.offsets.to_numpy() - pre.offsets[0].as_py()  # pre may be a slice
    p = np.exp(pre.flatten().to_numpy().astype(np.float64))
    first, k_post = offsets[:-1], np.exp(logp_post)
    rest = np.add.reduceat(p, first) - p[first]
    free = 1.0 - tok.column("pi_tail").to_numpy() - k_post
    scale = np.where(rest > 0, np.clip(free, 1e-9, None) / np.maximum(rest, 1e-300), 1.0)
    post = p * np.repeat(scale, np.diff(offsets))
    post[first] = k_post
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                    pa.array(np.log(post), pa.float32()))


def _updates(rng: np.random.Generator, tok: pa.Table, true: dict[str, np.ndarray],
             update_mask: str) -> pa.Table:
    """One update mask's rows: ΔD follows the kept tokens' true slope, plus noise."""
    def col(name):
        return tok.column(name).to_numpy()
    n, kept = tok.num_rows, col(f"keep_{update_mask}")
    step = kept * np.sign(col("advantage"))
    rows: dict[str, object] = {"seed": col("seed"), "update_mask": pa.array([update_mask] * n),
                               "sample_id": tok.column("sample_id"), "pos": col("pos"),
                               "kept": kept}
    for fam in ("kl", "tv"):
        pre, slope = col(f"{fam}_topk"), true[fam]
        noise = 0.5 * np.mean(np.abs(slope)) + 1e-9  # other tokens' updates
        delta = np.maximum(step * slope + rng.normal(0.0, noise, n), -pre)
        rows[f"{fam}_topk_post"], rows[f"delta_{fam}_topk"] = pre + delta, delta
    rows["delta_logp"] = 0.01 * step + rng.normal(0.0, 0.001, n)
    rows["logp_post"] = col("logp_train") + rows["delta_logp"]
    rows["support_logp_post"] = _support_post(tok, rows["logp_post"])
    if "kl_exact" in tok.column_names:
        rows["delta_kl_exact"] = 1.05 * rows["delta_kl_topk"]
        rows["kl_exact_post"] = col("kl_exact") + rows["delta_kl_exact"]
    n_rows = {f.name: rows.get(f.name, pa.nulls(n, f.type)) for f in UPDATES_V1}
    return pa.table({k: pa.array(v, UPDATES_V1.field(k).type) if isinstance(v, np.ndarray)
                     else v.cast(UPDATES_V1.field(k).type) for k, v in n_rows.items()},
                    schema=UPDATES_V1)


def _write_part(run_dir: Path, rng: np.random.Generator, flat: FlatTokens, seed: int,
                part: int, cfg: dict) -> None:
    """tokens and updates of one part: the real log-only statistics and mask registry."""
    stats = log_stats(flat, cfg["vocab_size"], None)  # in-memory tokens: no log footer
    true_kl = stats.dkl_agg.numpy() * (1.0 + rng.normal(0.0, 0.1, len(flat)))
    extra = None
    if cfg["exact"]:
        extra = {"kl_exact": stats.kl_topk.numpy() * rng.uniform(1.0, 1.05, len(flat)),
                 "dkl_exact": true_kl}
    tok = token_table(flat, stats, cfg["masks"], extra=extra, seed=seed,
                      lists=_support_lists(flat))
    md = {**(tok.schema.metadata or {}), THRESHOLDS_KEY.encode(): cfg["thresholds_json"]}
    write_table_atomic(run_dir / "tokens" / f"seed={seed}" / f"part-{part:04d}.parquet",
                       tok.replace_schema_metadata(md))
    true = {"kl": true_kl, "tv": stats.dtv_agg.numpy()}
    for u, mask in enumerate(cfg["update_masks"]):
        path = run_dir / "updates" / f"seed={seed}" / f"part-{part:04d}-{u:02d}.parquet"
        write_table_atomic(path, _updates(rng, tok, true, mask))


def write_synthetic_run(run_dir: Path | str, *, seeds: Sequence[int] = (0, 1, 2),
                        rows_per_seed: int = 10_000, tokens_per_sample: int = 64,
                        top_k: int = 4, vocab_size: int = 1000,
                        update_masks: Sequence[str] = UPDATE_MASKS, exact: bool = False,
                        thresholds: Thresholds = Thresholds(), part_rows: int = 250_000,
                        rng_seed: int = 0) -> Path:
    """Write a replay run directory (manifest, tokens/, updates/) and return its path.

    Every registered mask is decided; ``update_masks`` get updates rows. ``exact`` adds
    ``kl_exact``/``dkl_exact`` and the exact update columns. Deterministic in ``rng_seed``.
    """
    run_dir = Path(run_dir)
    cfg = {"vocab_size": vocab_size, "exact": exact, "update_masks": list(update_masks),
           "masks": build_masks(list(MASK_SPECS), thresholds),
           "thresholds_json": json.dumps(asdict(thresholds)).encode()}
    for seed in seeds:
        rng = np.random.default_rng([rng_seed, seed])
        for part, first in enumerate(range(0, rows_per_seed, part_rows)):
            n = min(part_rows, rows_per_seed - first)
            flat = _flat_tokens(rng, seed, first, n, tokens_per_sample, top_k, vocab_size)
            _write_part(run_dir, rng, flat, seed, part, cfg)
    manifest = {"generator": "pdm_replay.testing.synthetic_run", "seeds": list(seeds),
                "config": {"thresholds": asdict(thresholds), "update_masks": list(update_masks)},
                "recompute_deviation": {"max": 1.5e-3, "mean": 2.0e-4}}
    atomic_write_bytes(run_dir / "manifest.json", json.dumps(manifest, indent=2).encode())
    return run_dir


@lru_cache(maxsize=None)
def example_run() -> Path:
    """A small synthetic run (3 seeds x 2000 tokens, exact columns), made once per process
    in a temp directory removed at exit; the API's docstring examples use it."""
    tmp = Path(tempfile.mkdtemp(prefix="pdm_replay_example_"))
    atexit.register(shutil.rmtree, tmp, True)
    return write_synthetic_run(tmp / "run", seeds=(0, 1, 2), rows_per_seed=2000, exact=True)
