"""The README's "What it finds on the shipped sample" paragraph, generated from figures.

``docs/sample_figures.json`` holds the figures of the README Quickstart command's report
(:func:`figures` of its ``report --format json`` document and the manifest's seed plan)
and the measured timings; :func:`paragraph` writes the README paragraph from them.
``tests/report/test_readme_figures.py`` fails when the README's paragraph is not
:func:`paragraph` of the JSON, and (slow-marked) when a fresh run of the Quickstart
command no longer gives the JSON's figures. Regenerate both after a change that moves
the numbers::

    python -m pdm_replay.report.readme_figures runs/sample --replay-cpu-s S \\
        --replay-wall-s S --report-wall-s S --load L

Examples
--------
>>> fig = {"pair": "a vs b", "n_tokens": 1000, "delta": 0.15, "n_seeds": 2,
...        "out_of_region": 100, "disagreements": 20, "empty_steps": [8],
...        "own": {"ratio": 0.3, "predictive": 0.2, "diff": 0.1, "ci": [0.01, 0.2],
...                "wins": 2, "losses": 0, "sign_test_p": 0.5, "wilcoxon_p": 0.5},
...        "actual": None, "trainer_side": None, "trainer_mask": None}
>>> paragraph(fig, None).split(":")[0]
'What it finds on the shipped sample (measured with this command)'
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

from pdm_replay.names import ACTUAL, OWN

PAIR = "dppo_topk_kl vs pdm_kl_agg"  # the paper's KL / aggregated-tail comparison
FIGURES_FILE = Path(__file__).parents[2] / "docs" / "sample_figures.json"
README_FILE = Path(__file__).parents[2] / "README.md"
START, END = "<!-- sample-figures:start -->", "<!-- sample-figures:end -->"


def _basis(rows: dict[str, dict[str, Any]], basis: str) -> dict[str, Any] | None:
    r = rows.get(basis)
    if r is None or r["unsafe_ratio_pooled"] is None:
        return None
    return {"ratio": r["unsafe_ratio_pooled"], "predictive": r["unsafe_predictive_pooled"],
            "diff": r["unsafe_diff_pooled"], "ci": [r["ci_low"], r["ci_high"]],
            "wins": r["wins"], "losses": r["losses"], "sign_test_p": r["sign_test_p"],
            "wilcoxon_p": r["wilcoxon_p"]}


def figures(report: dict[str, Any], steps: list[int] | None) -> dict[str, Any]:
    """The paragraph's figures from a ``report --format json`` document; ``steps``: the
    manifest's ``seed_plan.steps`` (seed i replayed step ``steps[i]``)."""
    rows = {r["basis"]: r for r in report["headline"] if r["pair"] == PAIR}
    own = rows[OWN]
    n = own["n_seeds"]
    verdict = next(v for v in report["verdicts"] if v["pair"] == PAIR)
    return {"pair": PAIR, "n_tokens": report["log_health"]["n_tokens"],
            "delta": own["delta"], "n_seeds": n,
            "out_of_region": round(own["out_of_region_per_seed"] * n),
            "disagreements": round(own["disagreement_per_seed"] * n),
            "empty_steps": [steps[s] if steps else s for s in own["empty_seed_list"]],
            OWN: _basis(rows, OWN), ACTUAL: _basis(rows, ACTUAL),
            "trainer_side": verdict["confounded_side"],
            "trainer_mask": own.get(f"{verdict['confounded_side']}_mask"),
            "tokens_needed_per_side": verdict["tokens_needed_per_side"]}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "−")


def _rates(b: dict[str, Any], n: int) -> str:
    return (f"{_pct(b['ratio'])} vs {_pct(b['predictive'])}, {_pp(b['diff'])} points "
            f"[{_pp(b['ci'][0])}, {_pp(b['ci'][1])}], predictive lower on {b['wins']} of {n} "
            f"seeds, higher on {b['losses']} (sign test p = {b['sign_test_p']:.2g}, Wilcoxon "
            f"p = {b['wilcoxon_p']:.2g})")


def paragraph(fig: dict[str, Any], timings: dict[str, Any] | None) -> str:
    """The README paragraph of ``fig`` (:func:`figures`) and the measured ``timings``."""
    n, own, act = fig["n_seeds"], fig[OWN], fig[ACTUAL]
    steps = " and ".join(str(s) for s in fig["empty_steps"])
    text = (f"What it finds on the shipped sample (measured with this command): "
            f"{fig['n_tokens']:,} loss tokens, {fig['out_of_region']:,} out of the KL trust "
            f"region at δ = {fig['delta']:g} and {fig['disagreements']:,} KL / "
            f"aggregated-tail disagreement tokens ({fig['disagreements'] / n:.0f} per seed; "
            f"the seeds of steps {steps}, right after an engine sync, have a side with "
            "none). Each mask under its **own simulated update** (the unconfounded basis, "
            f"the report's verdict): ratio vs predictive unsafe keeps {_rates(own, n)}: no "
            "resolved difference on this run")
    if fig.get("tokens_needed_per_side"):
        text += (f"; resolving the paper's 2.7 points would take about "
                 f"{fig['tokens_needed_per_side']:,} kept disagreement tokens per side")
    if act and fig["trainer_mask"]:
        side = fig["trainer_side"]
        other = "predictive" if side == "ratio" else "ratio"
        text += (f". Under the trainer's **actual update** (its mask was the {side} mask "
                 f"`{fig['trainer_mask']}`, so the {other} side's tokens are ones the "
                 f"trainer dropped: confounded): {_rates(act, n)}")
    if timings:
        text += (f". The replay took {timings['replay_cpu_s']:.0f} s of CPU "
                 f"({timings['replay_wall_s']:.0f} s wall on the shared 2-core machine at a "
                 f"load average of about {timings['load']:.0f}); the report "
                 f"{timings['report_wall_s']:.0f} s wall")
    return textwrap.fill(text + ".", width=90, break_on_hyphens=False)


def readme_paragraph(readme: str) -> str:
    """The paragraph between the README's sample-figures markers."""
    match = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), readme, re.S)
    if match is None:
        raise ValueError(f"README has no {START} ... {END} block")
    return match.group(1)


def write(fig: dict[str, Any], timings: dict[str, Any]) -> None:
    """Write :data:`FIGURES_FILE` and the README's paragraph (temp file, then rename)."""
    doc = json.dumps({"figures": fig, "timings": timings}, indent=2) + "\n"
    readme = README_FILE.read_text()
    old = readme_paragraph(readme)
    for path, text in ((FIGURES_FILE, doc),
                       (README_FILE, readme.replace(old, paragraph(fig, timings)))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def main(argv: list[str]) -> None:
    """``RUN --replay-cpu-s S --replay-wall-s S --report-wall-s S --load L``: the report of
    RUN (the CLI's defaults) and the timings measured around it, into the JSON and README."""
    from pdm_replay.report.build import build_report
    from pdm_replay.report.db import connect
    from pdm_replay.report.render import render_json

    run, opts = Path(argv[0]), dict(zip(argv[1::2], argv[2::2]))
    with connect(run) as db:
        doc = json.loads(render_json(build_report(db)))
        steps = ((db.info.manifest or {}).get("seed_plan") or {}).get("steps")
    timings = {k: float(opts[f"--{k.replace('_', '-')}"])
               for k in ("replay_cpu_s", "replay_wall_s", "report_wall_s", "load")}
    write(figures(doc, steps), timings)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
