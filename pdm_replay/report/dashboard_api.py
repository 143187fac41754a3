"""Queries the dashboard needs beyond :mod:`pdm_replay.report.api`; polars results.

The dashboard pages call these and the report API only (no SQL in the pages). The SQL is in
``pdm_replay/sql/dashboard_queries.sql`` (``$name`` parameters) over two table macros of
``dashboard_macros.sql`` that :func:`connect_dashboard` adds to a report connection.
Every table query is limited or paged, so a run of millions of tokens stays on disk.

A run still being written (``manifest.json`` ``status`` other than ``complete``) is opened
on its finished seeds only (``done/seed=<s>.json`` markers), so the pages never mix a
seed whose updates are missing with finished ones.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> db, status = connect_dashboard(example_run())
>>> flt = DisagreementFilter(family="kl", estimator="agg", delta_sign=1)
>>> n = disagreement_count(db, flt)
>>> page = disagreement_page(db, flt, sort="d_pre", descending=True, limit=3)
>>> page.height == min(n, 3), bool((page["delta_d"] > 0).all())
(True, True)
>>> page["d_pre"].to_list() == sorted(page["d_pre"].to_list(), reverse=True)
True
>>> status.status, status.ignored_files
(None, 0)
>>> db.close()
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pdm_replay.io.reader import list_parquet_files
from pdm_replay.masks import MASK_SPECS, mask_pairs
from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.db import ReportDB, connect, load_sql
from pdm_replay.report.run_info import RunInfo, discover_run
from pdm_replay.report.section_catalog import SECTIONS

QUERIES = "dashboard_queries.sql"
UPDATES = (OWN, "ratio", "predictive", NONE, ACTUAL)
SORT_COLUMNS = ("key", "d_pre", "delta_d", "advantage", "ratio", "d_local", "d_predictive")
HISTOGRAM_COLUMNS = ("kl_topk", "tv_topk", "mu_mass", "pi_mass")
SUPPORT_SCHEMA = {"slot": pl.Int64, "token_id": pl.Int64, "distribution": pl.String,
                  "p": pl.Float64}
_SEED_DIR = re.compile(r"^seed=(-?\d+)$")


@dataclass(frozen=True)
class RunStatus:
    """Completeness of a run directory as the dashboard opened it.

    ``status``: the manifest's ``status`` (``complete`` / ``running`` / ``failed``; None
    when the manifest has none); ``finished_seeds``: seeds with a ``done/`` marker (None
    when the run keeps no markers); ``ignored_files``: Parquet files of unfinished seeds
    left out; ``error``: the manifest's ``error`` of a failed run.
    """

    status: str | None
    finished_seeds: tuple[int, ...] | None
    ignored_files: int = 0
    error: str | None = None

    @property
    def partial(self) -> bool:
        return self.status not in (None, "complete")


class RunNotReady(ValueError):
    """The run directory exists but holds nothing the dashboard can show yet."""


def _seed_of(path: Path) -> int | None:
    for part in path.parts:
        match = _SEED_DIR.match(part)
        if match:
            return int(match.group(1))
    return None


def _unreadable_file(source: Path) -> Path | None:
    """The first Parquet file under ``source`` whose footer does not parse."""
    for path in list_parquet_files(source):
        try:
            pq.read_schema(path)
        except (pa.ArrowException, OSError):
            return path
    return None


def _discover(source: Path) -> RunInfo:
    """:func:`discover_run`, with errors that say what to do about a run being written."""
    if (source / "tokens").is_dir() and not any((source / "tokens").rglob("*.parquet")):
        raise RunNotReady(f"{source}: no tokens Parquet file yet; the replay has not finished "
                          "a seed (wait, or run `pdm-replay replay ... --resume`)")
    try:
        return discover_run(source)
    except pa.ArrowException as err:  # pyarrow does not say which file it was reading
        raise ValueError(f"{_unreadable_file(source) or source}: not a readable Parquet "
                         f"file ({err}); a replay still writing it, or a damaged copy: "
                         "wait, or re-run `pdm-replay replay ... --resume`") from err


def _done_seeds(done_dir: Path) -> tuple[int, ...]:
    seeds = (_seed_of(Path(p.stem)) for p in done_dir.glob("seed=*.json"))
    return tuple(sorted(s for s in seeds if s is not None))


def finished_run(source: Path | str) -> tuple[RunInfo, RunStatus]:
    """:func:`discover_run` of ``source``, restricted to finished seeds while in progress."""
    source = Path(source)
    info = _discover(source)
    manifest = dict(info.manifest or {})
    status, error = manifest.get("status"), manifest.get("error")
    done_dir = source / "done"
    if info.kind != "replay" or not done_dir.is_dir():
        return info, RunStatus(status, None, 0, error)
    done = _done_seeds(done_dir)
    def keep(files):
        return tuple(f for f in files if _seed_of(f.relative_to(source)) in done)
    tokens, updates = keep(info.tokens_files), keep(info.updates_files)
    if not tokens:
        raise RunNotReady(f"{source}: no seed has finished yet ({done_dir} holds no marker); "
                          "wait for the replay, or run `pdm-replay replay ... --resume`")
    ignored = len(info.tokens_files) + len(info.updates_files) - len(tokens) - len(updates)
    info = dataclasses.replace(info, tokens_files=tokens, updates_files=updates)
    return info, RunStatus(status, done, ignored, error)


def connect_dashboard(source: Path | str, **connect_kwargs: Any) -> tuple[ReportDB, RunStatus]:
    """A report connection over the finished part of ``source`` plus the dashboard macros.

    ``connect_kwargs`` go to :func:`pdm_replay.report.db.connect` (memory_limit, threads).
    """
    info, status = finished_run(source)
    db = connect(info, **connect_kwargs)
    try:
        db.con.execute(load_sql("dashboard_macros.sql"))
    except BaseException:
        db.close()
        raise
    return db, status


def pair_options() -> tuple[str, ...]:
    """The registry's comparison pairs (``<ratio mask> vs <predictive mask>``, the
    Disagreements page's pair filter), registry order.

    >>> pair_options()[:2]
    ('dppo_topk_kl vs pdm_kl_agg', 'dppo_topk_kl vs pdm_kl_uniform')
    """
    return tuple(p.label for p in mask_pairs(list(MASK_SPECS)) if p.family is not None)


def default_pair() -> str:
    """The Disagreements page's default pair filter: the registry's first pair, the
    report's first comparison (``dppo_topk_kl vs pdm_kl_agg``), so the page's default count
    is the headline's disagreement count (a family / estimator filter alone would add the
    other pairs of that family, e.g. the IcePop pair's).

    >>> default_pair()
    'dppo_topk_kl vs pdm_kl_agg'
    """
    return pair_options()[0]


def family_options() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The families and predictive estimators of the registry's pairs (the page's other
    filters), registry order.

    >>> family_options()
    (('kl', 'tv'), ('agg', 'uniform'))
    """
    pairs = [p for p in mask_pairs(list(MASK_SPECS)) if p.family is not None]
    return (tuple(dict.fromkeys(p.family for p in pairs)),
            tuple(dict.fromkeys(p.estimator for p in pairs if p.estimator)))


@dataclass(frozen=True)
class DisagreementFilter:
    """Filters of the Disagreements page; None means any.

    ``update`` picks whose simulated step ΔD (``delta_d``) is read from: ``own`` (the mask
    that kept the token), ``ratio`` / ``predictive`` (that mask of the pair), ``none``
    (every token kept) or ``actual`` (the trainer's real step).
    ``kept_by``: ``ratio`` | ``predictive``; ``adv_sign`` / ``delta_sign``: -1, 0 or 1;
    ``pair``: one of :func:`pair_options`.
    """

    family: str | None = None
    estimator: str | None = None
    seed: int | None = None
    update: str = OWN
    kept_by: str | None = None
    adv_sign: int | None = None
    delta_sign: int | None = None
    pair: str | None = None

    def __post_init__(self) -> None:
        families, estimators = family_options()
        pairs = pair_options()
        checks = [(self.pair in (None, *pairs), f"pair {self.pair!r}: {' | '.join(pairs)}"),
                  (self.family in (None, *families),
                   f"family {self.family!r}: {' | '.join(families)}"),
                  (self.estimator in (None, *estimators),
                   f"estimator {self.estimator!r}: {' | '.join(estimators)}"),
                  (self.update in UPDATES, f"update {self.update!r}: one of {UPDATES}"),
                  (self.kept_by in (None, "ratio", "predictive"),
                   f"kept_by {self.kept_by!r}: ratio | predictive"),
                  (self.adv_sign in (None, -1, 0, 1), "adv_sign: -1, 0 or 1"),
                  (self.delta_sign in (None, -1, 0, 1), "delta_sign: -1, 0 or 1")]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def params(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def seeds(db: ReportDB) -> list[int | None]:
    """The run's seeds, ascending (``[None]`` for a ``masks`` output)."""
    return db.named("seeds", sql_file=QUERIES)["seed"].to_list()


def disagreement_count(db: ReportDB, flt: DisagreementFilter) -> int:
    """Number of disagreement tokens that pass ``flt``."""
    return int(db.named("disagreement_count", flt.params(), sql_file=QUERIES)["n"][0])


def disagreement_page(db: ReportDB, flt: DisagreementFilter, *, sort: str = "key",
                      descending: bool = False, limit: int = 50, offset: int = 0
                      ) -> pl.DataFrame:
    """One page of the disagreement tokens that pass ``flt``, sorted by ``sort``
    (:data:`SORT_COLUMNS`; ``key`` = seed, family, estimator, pair, sample_id, pos).

    Columns: key, ``kept_by``, ``update_mask`` (the update ``delta_d`` is read from),
    Â, r, ``d_pre``, ``delta`` (δ), slope terms, ``delta_d`` and ΔD under every update.
    """
    if sort not in SORT_COLUMNS:
        raise ValueError(f"sort {sort!r}: one of {SORT_COLUMNS}")
    if limit < 1 or offset < 0:
        raise ValueError(f"limit {limit} must be >= 1 and offset {offset} >= 0")
    params = {**flt.params(), "sort": sort, "descending": descending, "limit": limit,
              "offset": offset}
    return db.named("disagreement_page", params, sql_file=QUERIES)


def token_row(db: ReportDB, seed: int | None, sample_id: str, pos: int) -> pl.DataFrame:
    """The tokens/v1 row of one token (every contract column; absent ones null); 0 or 1 row."""
    key = {"seed": seed, "sample_id": sample_id, "pos": pos}
    return db.named("token_row", key, sql_file=QUERIES)


def token_updates(db: ReportDB, seed: int | None, sample_id: str, pos: int) -> pl.DataFrame:
    """The token's updates/v1 rows, one per simulated update mask (empty without a replay)."""
    key = {"seed": seed, "sample_id": sample_id, "pos": pos}
    return db.named("token_updates", key, sql_file=QUERIES)


def response_tokens(db: ReportDB, seed: int | None, sample_id: str, pos: int,
                    window: int = 48) -> pl.DataFrame:
    """``pos`` and ``token_id`` of the sample's loss tokens within ``window`` of ``pos``
    (positions outside the loss mask are not in tokens/v1, so they are gaps)."""
    params = {"seed": seed, "sample_id": sample_id, "first": pos - window,
              "last": pos + window}
    return db.named("response_tokens", params, sql_file=QUERIES)


def value_histogram(db: ReportDB, column: str, *, bins: int = 60,
                    log: bool = True) -> pl.DataFrame:
    """Histogram of a per-token column over all tokens: bin, x_lo, x_hi, n (in log10 units
    when ``log``). ``column``: kl_topk, tv_topk, mu_mass (1 - µ tail), pi_mass."""
    if column not in HISTOGRAM_COLUMNS:
        raise ValueError(f"column {column!r}: one of {HISTOGRAM_COLUMNS}")
    params = {"column": column, "bins": int(bins), "log": log}
    return db.named("value_histogram", params, sql_file=QUERIES)


def mass_quantiles(db: ReportDB) -> pl.DataFrame:
    """Quantiles of the top-K mass of µ (``mu_mass``) and π_pre (``pi_mass``) per token."""
    return db.named("mass_quantiles", sql_file=QUERIES)


def estimator_sample(db: ReportDB, *, limit: int = 5000) -> pl.DataFrame:
    """A fixed pseudo-random subset of tokens: KL slope estimators (agg, uniform), the exact
    slope (null without a behavior checkpoint), the feasible interval and out_of_region."""
    return db.named("estimator_sample", {"limit": limit}, sql_file=QUERIES)


def support_masses(token: Mapping[str, Any], updates: pl.DataFrame) -> pl.DataFrame:
    """Probability mass of µ, π_pre and π_post (one per update mask) on three parts of the
    support S: the sampled token k, the rest of S and the tail outside S.

    tokens/v1 stores µ_k, π_k and both tails, not the per-atom probabilities over S, and
    updates/v1 stores only π_post(k): π_post's other parts are null.

    >>> t = {"logp_behavior": math.log(0.5), "logp_train": math.log(0.4), "mu_tail": 0.1,
    ...      "pi_tail": 0.2}
    >>> u = pl.DataFrame({"update_mask": ["none"], "logp_post": [math.log(0.45)]})
    >>> df = support_masses(t, u)
    >>> df.filter(pl.col("part") == "rest of S")["p"].round(3).to_list()
    [0.4, 0.4, None]
    """
    rows = []
    for name, logp, tail in (("µ", token["logp_behavior"], token["mu_tail"]),
                             ("π_pre", token["logp_train"], token["pi_tail"])):
        p_k = math.exp(logp)
        rows += [(name, "k (sampled)", p_k), (name, "rest of S", max(1.0 - p_k - tail, 0.0)),
                 (name, "tail (outside S)", tail)]
    for mask, logp in updates.select("update_mask", "logp_post").iter_rows():
        name = f"π_post[{mask}]"
        rows += [(name, "k (sampled)", math.exp(logp) if logp is not None else None),
                 (name, "rest of S", None), (name, "tail (outside S)", None)]
    return pl.DataFrame(rows, schema={"distribution": pl.String, "part": pl.String,
                                      "p": pl.Float64}, orient="row")


def support_distribution(db: ReportDB, seed: int | None, sample_id: str, pos: int,
                         update_masks: Sequence[str] | None = None) -> pl.DataFrame:
    """µ, π_pre and π_post (one per update mask, all or ``update_masks``) on each token of
    the support S and on the tail outside S, long: ``slot`` (0 = sampled k, ``|S|`` = the
    tail), ``token_id`` (null for the tail), ``distribution``, ``p``.

    Empty when the run has no per-support columns (runs written before them, log-only
    runs): use :func:`support_masses` then. π_post's tail is ``1 − Σ_S π_post``.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> db, _ = connect_dashboard(example_run())
    >>> t = db.query("SELECT seed, sample_id, pos FROM tokens LIMIT 1").row(0)
    >>> df = support_distribution(db, *t, update_masks=["none"])
    >>> df["distribution"].unique(maintain_order=True).to_list()
    ['µ', 'π_pre', 'π_post[none]']
    >>> sums = df.group_by("distribution").agg(pl.col("p").sum())["p"]
    >>> bool(((sums - 1).abs() < 1e-4).all())
    True
    >>> db.close()
    """
    key = {"seed": seed, "sample_id": sample_id, "pos": pos}
    tok = db.named("token_support", key, sql_file=QUERIES)
    if tok.is_empty() or tok["support_ids"][0] is None:
        return pl.DataFrame(schema=SUPPORT_SCHEMA)
    row = tok.row(0, named=True)
    ids = row["support_ids"]
    dists = [("µ", row["support_logp_behavior"], row["mu_tail"]),
             ("π_pre", row["support_logp_pre"], row["pi_tail"])]
    post = db.named("token_support_post", key, sql_file=QUERIES)
    for mask, logp in post.iter_rows():
        if update_masks is None or mask in update_masks:
            dists.append((f"π_post[{mask}]", logp, None))
    rows = []
    for name, logp, tail in dists:
        p = [math.exp(v) for v in logp]
        tail = max(1.0 - sum(p), 0.0) if tail is None else tail
        rows += [(i, int(t), name, v) for i, (t, v) in enumerate(zip(ids, p))]
        rows.append((len(ids), None, name, tail))
    return pl.DataFrame(rows, schema=SUPPORT_SCHEMA, orient="row")


def slope_terms(token: Mapping[str, Any]) -> pl.DataFrame:
    """Terms of the KL and TV slopes Ḋ of one token (raw and signed by sign(Â)).

    KL: local term π_k - µ_k (``dkl_local``), global term = local - Ḋ_agg, and the
    estimators; TV has no separate local term in tokens/v1.

    >>> t = {"advantage": -1.0, "dkl_local": 0.2, "dkl_agg": 0.05, "dkl_uniform": 0.04,
    ...      "dkl_exact": None, "dtv_agg": 0.1, "dtv_uniform": 0.1}
    >>> slope_terms(t).filter(pl.col("term") == "KL global term")["signed"].to_list()
    [-0.15000000000000002]
    """
    sign = math.copysign(1.0, token["advantage"]) if token["advantage"] else 0.0
    local, agg = token["dkl_local"], token["dkl_agg"]
    terms = [("KL local term", local),
             ("KL global term", None if agg is None else local - agg),
             ("Ḋ_KL aggregated tail", agg), ("Ḋ_KL uniform tail", token["dkl_uniform"]),
             ("Ḋ_KL exact", token.get("dkl_exact")), ("Ḋ_TV aggregated tail", token["dtv_agg"]),
             ("Ḋ_TV uniform tail", token["dtv_uniform"])]
    rows = [(name, value, None if value is None else sign * value) for name, value in terms]
    return pl.DataFrame(rows, schema={"term": pl.String, "value": pl.Float64,
                                      "signed": pl.Float64}, orient="row")


def mismatch_over_training(db: ReportDB) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The report's per-step ``mismatch`` and ``keep_stats`` sections (one computation,
    :func:`pdm_replay.report.mismatch.step_metrics`; torch loads here, not at start-up):
    the Mismatch over training page."""
    return section_frame(db, "mismatch"), section_frame(db, "keep_stats")


def section_frame(db: ReportDB, section: str, **params: Any) -> pl.DataFrame:
    """The frame of the registered report section ``section`` (:mod:`.sections`; its
    query's ``params``, e.g. ``family``): what its dashboard page shows, the report's."""
    if section not in SECTIONS:
        raise ValueError(f"section {section!r}: one of {', '.join(SECTIONS)}")
    return SECTIONS[section].compute(db, **params)


def section_table(db: ReportDB, section: str, **params: Any
                  ) -> tuple[pl.DataFrame, str | None]:
    """:func:`section_frame` and the note on why some of its cells are empty (None:
    nothing to explain), the report's section note."""
    frame = section_frame(db, section, **params)
    return frame, SECTIONS[section].why_empty(frame, db)
