"""Disagreements page: out-of-region tokens where the ratio and the predictive mask decide
differently, filtered, sorted and paged, and one token in detail."""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app import charts
from pdm_replay.dashboard_app.state import RunRef, data, open_page, tokenizer
from pdm_replay.dashboard_app.text import context_html, token_texts
from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report import dashboard_api as dapi

ANY = "any"
UPDATE_LABELS = {OWN: f"{OWN} update (the mask that kept it)", "ratio": "ratio mask's update",
                 "predictive": "predictive mask's update", NONE: f"{NONE} (every token kept)",
                 ACTUAL: f"{ACTUAL} (the trainer's real step)"}
KEPT_LABELS = {ANY: ANY, "ratio": "kept by ratio, masked by predictive",
               "predictive": "kept by predictive, masked by ratio"}
ADV_LABELS = {ANY: ANY, 1: "Â > 0", -1: "Â < 0"}
DELTA_LABELS = {ANY: ANY, 1: "ΔD > 0 (moved away: unsafe)", -1: "ΔD < 0 (corrective)",
                0: "ΔD = 0"}
ESTIMATOR_LABELS = {"agg": "aggregated tail", "uniform": "uniform tail"}
TABLE_COLUMNS = ("seed", "pair", "family", "estimator", "region", "sample_id", "pos",
                 "token_id", "token",
                 "kept_by", "update_mask", "advantage", "ratio", "d_pre", "delta_d",
                 "d_local", "d_predictive", "d_exact", "delta_d_ratio", "delta_d_predictive",
                 "delta_d_none")
LIMITATION = ("tokens/v1 stores µ and π_pre at the sampled token k and the mass outside the "
              "support S (tails), not each atom of S; updates/v1 stores π_post at k only. "
              "The chart therefore splits S into k, the rest of S and the tail.")


def _pick(label: str, options: dict, key: str, index: int = 0) -> Any:
    value = st.selectbox(label, list(options), index=index, key=key,
                         format_func=lambda o: options[o])
    return None if value == ANY else value


def _filters(run: RunRef) -> tuple[dapi.DisagreementFilter, str, bool, int]:
    seeds = data(run, dapi.seeds)
    row0, row1, row2 = st.columns(1), st.columns(4), st.columns(5)
    families, estimators = dapi.family_options()  # the registry's pairs
    with row0[0]:
        pairs = dapi.pair_options()  # default: the report headline's first comparison
        pair = _pick("Pair", {ANY: ANY, **{p: p for p in pairs}}, "f_pair",
                     index=1 + pairs.index(dapi.default_pair()))
    with row1[0]:
        family = _pick("Family", {ANY: ANY, **{f: f.upper() for f in families}}, "f_family")
    with row1[1]:
        estimator = _pick("Estimator", {ANY: ANY, **{e: ESTIMATOR_LABELS.get(e, e)
                                                     for e in estimators}},
                          "f_estimator")
    with row1[2]:
        seed = _pick("Seed", {ANY: ANY, **{s: str(s) for s in seeds if s is not None}},
                     "f_seed")
    with row1[3]:
        update = _pick("Update mask (ΔD under)", UPDATE_LABELS, "f_update")
    with row2[0]:
        kept_by = _pick("Kept / masked", KEPT_LABELS, "f_kept")
    with row2[1]:
        adv_sign = _pick("Sign of Â", ADV_LABELS, "f_adv")
    with row2[2]:
        delta_sign = _pick("Sign of ΔD", DELTA_LABELS, "f_delta")
    with row2[3]:
        sort = st.selectbox("Sort by", dapi.SORT_COLUMNS, key="f_sort")
    with row2[4]:
        size = st.selectbox("Rows per page", (25, 50, 100, 200), index=1, key="f_size")
        descending = st.toggle("Descending", key="f_desc")
    flt = dapi.DisagreementFilter(family=family, estimator=estimator, seed=seed,
                                  update=update, kept_by=kept_by, adv_sign=adv_sign,
                                  delta_sign=delta_sign, pair=pair)
    return flt, sort, descending, size


def _page_number(n: int, size: int, signature: tuple) -> int:
    """Page selector; back to page 1 whenever the filters change."""
    pages = max(1, math.ceil(n / size))
    if st.session_state.get("dis_signature") != signature:
        st.session_state["dis_signature"] = signature
        st.session_state["dis_page"] = 1
    st.session_state["dis_page"] = min(st.session_state.get("dis_page", 1), pages)
    page = st.columns(4)[0].number_input(f"Page (of {pages})", min_value=1, max_value=pages,
                                         step=1, key="dis_page")
    return int(page)


def _select_row(suffix: str) -> None:
    """A row selected in the table becomes the token of the detail view."""
    rows = st.session_state[f"dis_table_{suffix}"].selection.rows
    if rows:
        st.session_state[f"dis_token_{suffix}"] = rows[0]


def _row_label(row: dict) -> str:
    return (f"seed {row['seed']} · {row['pair']} · {row['sample_id']} "
            f"· pos {row['pos']} · kept by {row['kept_by']}")


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _detail_metrics(row: dict, token: dict, updates: pl.DataFrame) -> None:
    fam = row["family"]
    # no update basis (masks output): comparing with None would be a null filter
    post = (updates.clear() if row["update_mask"] is None
            else updates.filter(pl.col("update_mask") == row["update_mask"]))
    d_post = post[f"{fam}_topk_post"][0] if post.height else None
    cols = st.columns(6)
    cols[0].metric(f"D_pre ({fam.upper()} top-K)", _fmt(row["d_pre"]))
    cols[1].metric("δ", _fmt(row["delta"]))
    cols[2].metric(f"D_post [{row['update_mask']}]", _fmt(d_post),
                   delta=None if row["delta_d"] is None else f"{row['delta_d']:+.4g}",
                   delta_color="inverse")
    cols[3].metric("Â", _fmt(token["advantage"]))
    cols[4].metric("r = π_k / µ_k", _fmt(token["ratio"]))
    cols[5].metric("support |S|", token["support_size"])


def _support_chart(run: RunRef, row: dict, key: dict, token: dict, updates: pl.DataFrame,
                   tok: Any) -> None:
    """Per support token when the run has the per-support lists, else k / rest of S / tail."""
    masks = [m for m in (row["ratio_update"], row["predictive_update"], NONE, ACTUAL) if m]
    dist = data(run, dapi.support_distribution, **key, update_masks=masks)
    if dist.height:
        ids = dist.filter(pl.col("token_id").is_not_null())
        text = dict(zip(ids["slot"].to_list(), token_texts(tok.tokenizer,
                                                           ids["token_id"].to_list())))
        dist = dist.with_columns(label=pl.col("slot").replace_strict(
            {s: f"{s}: {t!r}" + (" (k)" if s == 0 else "") for s, t in text.items()},
            default="tail (outside S)"))
        st.altair_chart(charts.support_atoms_chart(dist))
        return
    shown = updates.filter(pl.col("update_mask").is_in(masks))
    st.altair_chart(charts.support_chart(dapi.support_masses(token, shown)))
    st.caption(LIMITATION)


def _detail(run: RunRef, row: dict, tok: Any) -> None:
    key = {"seed": row["seed"], "sample_id": row["sample_id"], "pos": row["pos"]}
    st.subheader(f"Token detail: {row['sample_id']} · pos {row['pos']} · seed {row['seed']}")
    found = data(run, dapi.token_row, **key)
    if found.is_empty():
        st.warning("This token is no longer in the run's tokens table; reload the page.")
        return
    token = found.row(0, named=True)
    updates = data(run, dapi.token_updates, **key)
    context = data(run, dapi.response_tokens, **key, window=48)
    st.markdown("**Response around the token** (highlighted"
                + (")" if tok.tokenizer else "; token ids: no tokenizer loaded)"))
    st.markdown(context_html(tok.tokenizer, context.rows(), row["pos"]),
                unsafe_allow_html=True)
    _detail_metrics(row, token, updates)
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**µ vs π_pre vs π_post on the support** (π_post under the pair's "
                    "masks and `none`)")
        _support_chart(run, row, key, token, updates, tok)
    with right:
        st.markdown("**Terms of Ḋ** (signed = × sign(Â); > 0 predicts moving away)")
        st.dataframe(dapi.slope_terms(token), hide_index=True, key="dis_terms")
    st.markdown("**D_post and ΔD under every simulated update**")
    st.dataframe(updates, hide_index=True, key="dis_updates")


def render() -> None:
    run = open_page("Disagreements", "Out-of-region tokens (D_pre > δ) where the ratio mask "
                    "and the predictive mask of the same family decide differently.")
    flt, sort, descending, size = _filters(run)
    n = data(run, dapi.disagreement_count, flt=flt)
    page = _page_number(n, size, (flt, sort, descending, size))
    rows = data(run, dapi.disagreement_page, flt=flt, sort=sort, descending=descending,
                limit=size, offset=(page - 1) * size)
    tok = tokenizer(run)
    st.markdown(f"**{n:,} disagreement tokens** match · page {page} · showing {rows.height}")
    if rows.is_empty():
        st.info("No disagreement token matches these filters.")
        return
    table = rows.with_columns(token=pl.Series(token_texts(tok.tokenizer,
                                                          rows["token_id"].to_list())))
    # Keys change with the table's content, so selection and detail restart at its first
    # row instead of pointing into the previous table.
    suffix = hashlib.sha1(repr((flt, sort, descending, size, page)).encode()).hexdigest()[:10]
    st.dataframe(table.select(TABLE_COLUMNS), hide_index=True, key=f"dis_table_{suffix}",
                 on_select=functools.partial(_select_row, suffix),
                 selection_mode="single-row")
    choice = st.selectbox("Token detail (or select a table row)", range(rows.height),
                          key=f"dis_token_{suffix}",
                          format_func=lambda i: _row_label(rows.row(i, named=True)))
    _detail(run, rows.row(choice, named=True), tok)


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
