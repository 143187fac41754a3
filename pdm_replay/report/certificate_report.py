"""Sign certificates in the report: which direction decisions the log alone settles.

From the logged support, the full-vocabulary Ḋ_kl lies in ``[dkl_lo, dkl_hi]``
(:mod:`pdm_replay.math.certificates`). A token is ``away`` or ``toward`` when sign(Â)·Ḋ
has one sign over the whole interval (no unseen tail could change the prediction) and
``uncertain`` otherwise. The summary also says how often the aggregated / uniform
estimates (and, with a behavior checkpoint, the exact value) fall inside the interval.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     cert = certificate_summary(db)
>>> cert.columns[:5]
['scope', 'n_tokens', 'n_away', 'n_toward', 'n_uncertain']
"""

from __future__ import annotations

import polars as pl

from pdm_replay.report.db import ReportDB

QUERIES = "queries_certificates.sql"
SHARE_COLUMNS = frozenset({"uncertain_share", "agg_inside_share", "uniform_inside_share",
                           "exact_inside_share"})


def certificate_summary(db: ReportDB, *, tol: float = 1e-6) -> pl.DataFrame:
    """One row per scope: ``out_of_region``, then ``disagreement_<predictive mask>`` for
    each KL pair of the registry (:func:`~pdm_replay.masks.mask_pairs`, registry order;
    ``disagreement_<ratio mask>_<predictive mask>`` where a predictive mask has two
    partners) whose masks the run decided differently somewhere: n_tokens, n_away,
    n_toward, n_uncertain, uncertain_share,
    and the share of tokens whose agg / uniform / exact slope lies in [dkl_lo, dkl_hi]
    (exact within ``tol``; null without ``dkl_exact``). Empty for runs written before
    certificates existed."""
    return db.named("certificate_summary", {"tol": tol}, sql_file=QUERIES)
