"""Why a direction predictor was wrong: first-order attribution reports (replay only).

A replay with ``--attribution`` (the default) writes per update and token the linear term
``delta_kl_lin = ⟨∇_θ D_t, Δθ⟩``, the rest ``delta_kl_curv`` and, for SGD on a token
sample, the token's own gradient's share ``delta_kl_self`` (see
:mod:`pdm_replay.replay.attribution_pass`). On out-of-region KL tokens (Â ≠ 0) each predictor's
sign errors against the realized ΔD_kl are split along the chain
predicted → self → linear → realized (views in ``sql/views_attribution.sql``):

- **geometry**: sign(self) ≠ predicted sign: the token's own update moves D the other way
  in parameter space than the logit-space predictor assumes (J Jᵀ not ∝ I);
- **interference**: sign(linear) ≠ sign(self): the other kept tokens' gradients win;
- **curvature**: sign(realized) ≠ sign(linear): higher-order terms win.

An error flips sign at one stage or at all three. Without a self term (Adam, or a token
outside the sample) geometry and interference merge into **parameter space**
(sign(linear) ≠ predicted). Scope ``disagreement`` keeps the tokens where the two masks of
some KL pair of the registry (:func:`~pdm_replay.masks.mask_pairs`, user masks included)
decide differently; every such token is in the self-term sample.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     split = attribution_split(db)
>>> split.columns[:6]
['update_mask', 'scope', 'predictor', 'n_seeds', 'n_tokens', 'n_errors']
"""

from __future__ import annotations

import polars as pl

from pdm_replay.names import NONE
from pdm_replay.report.db import ReportDB

QUERIES = "queries_attribution.sql"
ATTRIBUTION_NOTE = ("the attribution section is empty: no updates row carries delta_kl_lin; "
                    "replay with --attribution (the default; --optimizer sgd adds the self "
                    "term that separates geometry from interference)")
SHARE_COLUMNS = frozenset({"geometry_share", "interference_share", "curvature_share",
                           "parameter_space_share", "curvature_all_share"})


def attribution_split(db: ReportDB, *, update_mask: str = NONE,
                      by_seed: bool = False) -> pl.DataFrame:
    """Each direction predictor's sign errors on out-of-region KL tokens kept by
    ``update_mask``'s update, split into geometry / interference / curvature.

    One row per scope (``out_of_region``, ``disagreement``) and predictor (``ratio``,
    ``predictive_agg``, ``predictive_uniform``, ``predictive_exact`` where the run has
    ``dkl_exact``); pooled over seeds unless ``by_seed``. Columns: n_tokens, n_errors,
    accuracy; n_errors_self (errors with a self term), n_geometry, n_interference,
    n_curvature, n_all_three and their ``*_share`` of n_errors_self; n_parameter_space,
    n_curvature_all and their shares of n_errors. Empty without attribution columns.
    """
    name = "attribution_split_by_seed" if by_seed else "attribution_split"
    return db.named(name, {"update_mask": update_mask}, sql_file=QUERIES)


def attribution_points(db: ReportDB, *, update_mask: str = NONE,
                       limit: int = 5000) -> pl.DataFrame:
    """Out-of-region KL tokens kept by ``update_mask`` with the realized change
    ``delta_d`` and its parts ``lin``, ``curv``, ``self_term``, ``cross_term`` (at most
    ``limit`` rows, a fixed pseudo-random subset), for plots."""
    params = {"update_mask": update_mask, "limit": limit}
    return db.named("attribution_points", params, sql_file=QUERIES)


def attribution_coverage(db: ReportDB) -> pl.DataFrame:
    """Per update mask: updates rows, rows with the linear term, rows with the self term,
    and mean |curvature| / mean |linear| over all tokens."""
    return db.named("attribution_coverage", {}, sql_file=QUERIES)
