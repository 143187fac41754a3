"""Log health page: token-level checks of the run, top-K mass coverage, mass overflow,
recomputation deviation, and an on-demand validation of the rollout log."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from pdm_replay.dashboard_app import charts
from pdm_replay.dashboard_app.state import RunRef, data, open_page, run_info, validation
from pdm_replay.report import api
from pdm_replay.report.display import display_frame
from pdm_replay.report import dashboard_api as dapi


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _health(run: RunRef) -> None:
    h = data(run, api.log_health).row(0, named=True)
    cols = st.columns(6)
    cols[0].metric("Tokens", f"{h['n_tokens']:,}")
    cols[1].metric("Mass overflow", f"{h['n_mass_overflow']:,}",
                   help="Tokens whose logged top-K µ mass exceeds 1 (+ tolerance).")
    cols[2].metric("Overflow fraction", _fmt(h["mass_overflow_fraction"]))
    cols[3].metric("Non-finite stats", f"{h['n_nonfinite']:,}")
    cols[4].metric("Â = 0", f"{h['n_zero_advantage']:,}")
    cols[5].metric("Recompute deviation (max)", _fmt(h["recompute_deviation_max"]),
                   help="Replay's |log π recomputed − log π logged| (manifest.json); "
                        f"mean {_fmt(h['recompute_deviation_mean'])}.")


def _validate(run: RunRef) -> None:
    info, _ = run_info(run)
    log = (info.manifest or {}).get("config", {}).get("log")
    st.subheader("Validation of the rollout log")
    if not log or not Path(log).exists():
        st.info(f"The rollout log (`{log or 'not recorded'}`) is not reachable from here; "
                "run `pdm-replay validate LOG` where it is.")
        return
    if not st.button(f"Validate `{log}`", key="health_validate"):
        return
    v = validation(Path(log))
    (st.success if v["ok"] else st.error)(
        f"{'OK' if v['ok'] else 'Problems found'}: {v['files']} file(s), {v['samples']:,} "
        f"samples, {v['tokens']:,} tokens")
    st.json({k: v[k] for k in ("error_counts", "warning_counts", "mass_percentiles")})
    for line in v["errors"][:20]:
        st.text(line)


def render() -> None:
    run = open_page("Log health", "Is the logged behavior distribution usable: top-K mass "
                    "coverage, mass overflow, non-finite statistics, recomputation deviation.")
    _health(run)
    st.subheader("Top-K mass coverage", help="mu_mass = 1 − µ tail: the behavior mass the "
                 "logged top-K covers; pi_mass: the same for π_pre.")
    st.dataframe(data(run, dapi.mass_quantiles), hide_index=True, key="health_mass")
    hist = data(run, dapi.value_histogram, column="mu_mass", bins=40, log=False)
    if not hist.is_empty():
        st.altair_chart(charts.histogram_chart(hist, threshold=None, log=False,
                                               title="mu_mass (logged top-K µ mass)"))
    st.subheader("Full row")
    st.dataframe(display_frame("log_health", data(run, api.log_health)), hide_index=True,
                 key="health_row")
    info, _ = run_info(run)
    warnings = (info.manifest or {}).get("warnings") or []
    for w in warnings:
        st.warning(f"Replay warning: {w}")
    _validate(run)


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
