"""The per-step ``mismatch`` and ``keep_stats`` of ``report --format json`` equal the
trainers' own functions on the same step's tokens (tests/trainer_oracles.py says how
each is called): on the shipped sample (a masks run of ``sample_data/rollouts``, which has
train log-probs and loss masks) and on a synthetic log with a large mismatch (exp clamps,
IS caps and TRL's sequence mask reached).

Tolerances: the oracles run in float64 on the logged float32 values, so the definitions are
compared, not float32 rounding: sums of N ≤ 10⁵ terms in another order differ by
≤ N·2⁻⁵² relative (2e-11), chi2_seq's exp(2·Σ) doubles that: rel 1e-10 covers both.
Fractions verl forms with ``.float().mean()`` (its IS fractions over responses) are float32
whatever the input: an exact count over one float32 division, rel 2⁻²³.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.masks.kinds import Criterion
from pdm_replay.masks import MASK_SPECS, Thresholds
from pdm_replay.report.db import connect
from pdm_replay.report.mismatch import step_metrics
from pdm_replay.testing.synthetic_run import write_synthetic_run
from trainer_oracles import padded, trl_clip_ratio, trl_sampling, verl_metrics

pytest.importorskip("verl", reason="verl is not installed")
pytest.importorskip("trl", reason="trl is not installed")

REPO = Path(__file__).resolve().parents[2]
REL = 1e-10
F32_FRACTIONS = {f"rollout_corr/rollout_is_{k}_{s}" for k in ("ratio_fraction", "seq_fraction")
                 for s in ("high", "low")}
MASKS_RUN = "none,ppo_clip,clip_higher,dppo_topk_kl,pdm_kl_agg,rs_token_k3,tis"


def _report(log: Path, tmp: Path) -> tuple[dict, list[dict], Path]:
    """``report --format json`` of a masks run of ``log`` (the rollout rows, the tokens)."""
    tokens = tmp / "tokens.parquet"
    runner = CliRunner()
    res = runner.invoke(app, ["masks", str(log), "--out", str(tokens), "--masks", MASKS_RUN])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(tokens), "--format", "json", "--bootstrap-samples",
                              "10", "--out", str(tmp / "r.json")])
    assert res.exit_code == 0, res.output
    return json.loads((tmp / "r.json").read_text()), pq.read_table(log).to_pylist(), tokens


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict], Path]:
    """Three logged steps of the shipped sample: the first (engine just synced: small
    mismatch), step 13 (the largest chi2_seq) and the last."""
    tmp = tmp_path_factory.mktemp("sample")
    table = pq.read_table(REPO / "sample_data" / "rollouts")
    steps = pa.array([8, 13, 23], pa.int64())
    pq.write_table(table.filter(pc.is_in(table["step"], steps)), tmp / "log.parquet")
    return _report(tmp / "log.parquet", tmp)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict], Path]:
    """A large mismatch (|Σ log r| past verl's ±20 clamp, TRL's sequence ratio past 3) over
    three steps, some loss masks off (a prompt-echo prefix, one response masked whole)."""
    tmp = tmp_path_factory.mktemp("synthetic")
    log = write_synthetic_log(tmp / "raw.parquet", SyntheticLogConfig(
        n_samples=48, response_len=16, vocab_size=60, top_k=5, mismatch=3.0, rng_seed=3))
    table = pq.read_table(log)
    rows = table.to_pylist()
    for i, r in enumerate(rows):
        n = len(r["response_ids"])
        r["step"] = i % 3
        r["loss_mask"] = [i != 5 and (i % 2 == 0 or t >= 3) for t in range(n)]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tmp / "log.parquet")
    return _report(tmp / "log.parquet", tmp)


def _step(rows: list[dict], step: int) -> list[dict]:
    return sorted((r for r in rows if r["step"] == step), key=lambda r: r["sample_id"])


def _rs_specs() -> dict[str, str]:
    """verl rs option -> threshold spec, from each registered rs criterion at the default
    thresholds (k1 options: exp of the band on −log r; others: the upper bound)."""
    out = {}
    for spec in MASK_SPECS.values():
        if not spec.logged_as:
            continue
        crit = spec.build(Thresholds())
        assert isinstance(crit, Criterion)
        option = spec.logged_as.removeprefix("rollout_corr/rollout_rs_").removesuffix(
            "_masked_fraction")
        out[option] = (f"{math.exp(crit.low)!r}_{math.exp(crit.high)!r}" if crit.stat == "k1"
                       else repr(crit.high))
    return out


def _close(ours: dict, ref: dict, keys: set[str]) -> None:
    for key in sorted(keys):
        rel = 2.0 ** -23 if key in F32_FRACTIONS else REL
        assert ours[key] == pytest.approx(ref[key], rel=rel, abs=1e-300), key


@pytest.mark.parametrize("which", ["sample", "synthetic"])
def test_verl_keys_equal_verl_functions(which: str, request: pytest.FixtureRequest) -> None:
    report, rows, _ = request.getfixturevalue(which)
    assert report["mismatch"], "one object per step"
    for obj in report["mismatch"]:
        lt, lb, _, mask = padded(_step(rows, obj["step"]))
        ref = verl_metrics(lt, lb, mask, level="sequence", cap=2.0, rs=_rs_specs())
        # verl's rs keys beyond each option's masked fraction (its statistic's mean, max,
        # ..., the combined mask's fractions) describe the rs config run, not one mask
        verl_keys = {k for k in ref if "rollout_rs_" not in k} | {
            s.logged_as for s in MASK_SPECS.values() if s.logged_as}
        ours = {k for k in obj if k.startswith("rollout_corr/")}
        assert ours == verl_keys, ours ^ verl_keys
        _close(obj, ref, ours)
        token = verl_metrics(lt, lb, mask, level="token", cap=2.0, rs={})
        mine = {k.replace("rollout_corr_token/", "rollout_corr/"): v for k, v in obj.items()
                if k.startswith("rollout_corr_token/")}
        assert set(mine) == {k for k in token if "rollout_is_" in k}
        _close(mine, token, set(mine))


@pytest.mark.parametrize("which", ["sample", "synthetic"])
def test_trl_sampling_keys_equal_trl(which: str, request: pytest.FixtureRequest) -> None:
    report, rows, _ = request.getfixturevalue(which)
    for obj in report["mismatch"]:
        lt, lb, _, mask = padded(_step(rows, obj["step"]))
        ref = trl_sampling(lt, lb, mask, mode="sequence_mask", cap_max=3.0)
        assert {k for k in obj if k.startswith("sampling/")} == set(ref)
        _close(obj, ref, set(ref))


@pytest.mark.parametrize("which", ["sample", "synthetic"])
def test_clip_ratio_equals_trl_compute_loss(which: str, request: pytest.FixtureRequest) -> None:
    report, rows, _ = request.getfixturevalue(which)
    t = Thresholds()
    eps = {"ppo_clip": (t.eps, t.eps), "clip_higher": (t.eps_low, t.eps_high)}
    found = {(r["step"], r["mask"]): r for r in report["keep_stats"]}
    for step in sorted({r["step"] for r in report["keep_stats"]}):
        lt, lb, adv, mask = padded(_step(rows, step))
        for name, (low, high) in eps.items():
            ref = trl_clip_ratio(lt, lb, adv, mask, eps_low=low, eps_high=high)
            assert len(ref) == 3
            _close(found[(step, name)], ref, set(ref))
    assert all(r["clip_ratio/low_mean"] is None for r in report["keep_stats"]
               if r["mask"] in ("pdm_kl_agg", "tis", "rs_token_k3"))


def test_keep_stats_split_is_a_partition(sample: tuple[dict, list[dict], Path]) -> None:
    """Masked = masked with Â > 0 + with Â < 0 (Â = 0 is kept); out of region = kept +
    dropped; a ratio mask drops only out-of-region tokens."""
    for r in sample[0]["keep_stats"]:
        assert r["masked_fraction"] == pytest.approx(
            r["masked_fraction_adv_pos"] + r["masked_fraction_adv_neg"], abs=1e-15)
        if r["out_of_region_fraction"] is not None:
            assert r["out_of_region_fraction"] == pytest.approx(
                r["out_of_region_kept_fraction"] + r["out_of_region_dropped_fraction"],
                abs=1e-15)
        if r["mask"] == "ppo_clip":
            assert r["masked_fraction"] == r["out_of_region_dropped_fraction"]
            assert r["masked_fraction"] == r["clip_ratio/region_mean"]


def test_topk_keys_from_the_token_columns(sample: tuple[dict, list[dict], Path]) -> None:
    """topk/* equal numpy's mean, linear-interpolated p99 and share above δ over the step's
    tokens/v1 rows (NaN never out of region)."""
    report, _, tokens = sample
    frame = pq.read_table(tokens).to_pandas()
    for obj in report["mismatch"]:
        part = frame[frame["step"] == obj["step"]]
        assert {k for k in obj if k.startswith("topk/")} == {
            f"topk/{f}_topk_{s}" for f in ("kl", "tv") for s in ("mean", "p99",
                                                                 "out_of_region@0.15")}
        for f in ("kl", "tv"):
            d = part[f"{f}_topk"].to_numpy()
            finite = d[np.isfinite(d)]
            assert obj[f"topk/{f}_topk_mean"] == pytest.approx(finite.mean(), rel=REL)
            assert obj[f"topk/{f}_topk_p99"] == pytest.approx(np.quantile(finite, 0.99),
                                                              rel=REL)
            assert obj[f"topk/{f}_topk_out_of_region@0.15"] == (d > 0.15).sum() / len(d)


def test_replay_run_counts_each_token_once(tmp_path: Path) -> None:
    """A replay that drew the same tokens into two seeds gives the same per-step metrics as
    one seed: a step's batch is its tokens, each once."""
    run = write_synthetic_run(tmp_path / "run", seeds=(0,), rows_per_seed=300)
    with connect(run) as db:
        before = step_metrics(db)
    again = run / "tokens" / "seed=1"
    again.mkdir()
    shutil.copy(run / "tokens" / "seed=0" / "part-0000.parquet", again / "part-0000.parquet")
    with connect(run) as db:
        assert db.query("SELECT count(DISTINCT seed) AS n FROM tokens")["n"][0] == 2
        after = step_metrics(db)
    assert before[0].height and before[1].height
    assert before[0].equals(after[0]) and before[1].equals(after[1])


def test_table_markdown_and_html_show_the_step_tables(synthetic: tuple[dict, list[dict], Path],
                                                      tmp_path: Path) -> None:
    """The per-step tables in every text format (the trainers' names as headers), the two
    plots in HTML."""
    tokens = synthetic[2]
    runner = CliRunner()
    texts = {}
    for fmt in ("table", "markdown", "html"):
        out = tmp_path / f"r.{fmt}"
        res = runner.invoke(app, ["report", str(tokens), "--format", fmt, "--bootstrap-samples",
                                  "10", "--out", str(out)])
        assert res.exit_code == 0, res.output
        texts[fmt] = out.read_text()
    assert "Training–inference mismatch per step" in texts["table"]
    assert "rollout_corr/kl" in texts["table"] and "clip_ratio/low_mean" in texts["table"]
    assert "| step | rollout_corr/training_ppl |" in texts["markdown"]
    assert "| step | mask | masked_fraction |" in texts["markdown"]
    assert ">sampling/importance_sampling_ratio/max</th>" in texts["html"]
    assert 'alt="mismatch"' in texts["html"] and 'alt="keep_stats"' in texts["html"]
