"""``--from prime-rl``: prime-rl's trainer token exports.

prime-rl does not install here (its trainer needs CUDA kernels and its config package);
the export lines are built as its writer builds them, read from
``src/prime_rl/trainer/rl/token_export.py`` (PrimeIntellect-ai/prime-rl, 2026-08):
``_export_columns`` / ``_compute_export_tensors`` with ``compute_importance_ratio_and_mismatch_kl``
(``loss.py``) evaluated in float32 as on the trainer, every float a float32 value
(``_tensor_to_floats``), non-finite ones null, one ``step_N/rank_R.jsonl`` per step and
rank with a ``STABLE`` marker. The test then checks the export's own ``importance_ratio``,
``mismatch_kl`` and ``is_masked`` (the default loss's DPPO-binary-TV mask) against what
``pdm-replay masks`` computes from the ingested µ and π.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import torch

from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.commands.ingest import IngestConfig, ingest
from pdm_replay.ingest.parsing import IngestError
from pdm_replay.commands.validate import validate_log

VOCAB = 50
F32_EPS = 2.0 ** -23


def export_line(g: torch.Generator, step: int, rank: int, idx: int) -> dict:
    """One exported sequence: a 3-token prompt (no loss; its first inference log-prob
    null), a response of 5..9 tokens with one masked environment token, Â per sequence."""
    n_prompt, n_resp = 3, int(torch.randint(5, 10, (1,), generator=g))
    n = n_prompt + n_resp
    loss = torch.tensor([False] * n_prompt + [True] * n_resp)
    loss[n_prompt + 2] = False  # a tool / environment token inside the completion
    inf = torch.log(torch.rand(n, generator=g) * 0.9 + 0.05).float()
    trn = torch.minimum(inf + 0.6 * torch.randn(n, generator=g), torch.tensor(-1e-4)).float()
    adv = torch.where(loss, torch.randn(1, generator=g).expand(n), torch.zeros(n)).float()
    # compute_importance_ratio_and_mismatch_kl and prob_delta, float32 as on the trainer
    log_ratio = trn - inf
    ratio = torch.exp(log_ratio)
    mismatch_kl = ratio - log_ratio - 1
    prob_delta = torch.exp(trn) - torch.exp(inf)
    invalid = torch.where(adv > 0, prob_delta > 0.2, prob_delta < -0.2)  # DefaultLossConfig
    floats = lambda x: [float(v) for v in x.tolist()]  # noqa: E731
    inf_list = floats(inf)
    inf_list[0] = None  # no sampling log-prob for the first prompt token
    return {"schema_version": 1, "step": step, "rank": rank, "micro_step": 0,
            "micro_sequence_idx": idx, "export_sequence_idx": idx, "env_name": "math",
            "token_ids": torch.randint(0, VOCAB, (n,), generator=g).tolist(),
            "position_ids": list(range(n)), "loss_mask": loss.tolist(),
            "advantages": floats(adv), "inference_logprobs": inf_list,
            "trainer_logprobs": floats(trn), "entropy": [0.5] * n,
            "mismatch_kl": floats(mismatch_kl), "log_importance_ratio": floats(log_ratio),
            "importance_ratio": floats(ratio), "prob_delta": floats(prob_delta),
            "is_masked": (loss & invalid).tolist(),
            "is_masked_high": (loss & (adv > 0) & (prob_delta > 0.2)).tolist(),
            "is_masked_low": (loss & (adv < 0) & (prob_delta < -0.2)).tolist(),
            "rl_weights": None, "ce_weights": None, "ref_kl_weights": None}


def write_export(root: Path, steps: int = 2, ranks: int = 2, per_file: int = 6) -> list[dict]:
    g = torch.Generator().manual_seed(37)
    lines = []
    for step in range(1, steps + 1):
        d = root / "token_exports" / f"step_{step}"
        d.mkdir(parents=True)
        for rank in range(ranks):
            recs = [export_line(g, step, rank, i) for i in range(per_file)]
            (d / f"rank_{rank}.jsonl").write_text(
                "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
            lines += recs
        (d / "STABLE").touch()
    return lines


def test_prime_rl_export_ingests_and_its_own_metrics_equal_ours(tmp_path: Path) -> None:
    lines = write_export(tmp_path)
    log = tmp_path / "log.parquet"
    summary = ingest(IngestConfig("prime-rl", (tmp_path / "token_exports",), log,
                                  vocab_size=VOCAB))
    assert summary.rows == len(lines) and validate_log(log).ok
    out = tmp_path / "tokens.parquet"
    run_masks(MasksConfig(log=log, out=out, masks=["prime_rl_default", "ppo_clip"], workers=1))
    tok = pl.read_parquet(out)
    want = {"ratio": [], "kl": [], "masked": [], "key": []}
    for rec in lines:
        start = rec["loss_mask"].index(True)
        sid = f"step{rec['step']}/rank{rec['rank']}/{rec['export_sequence_idx']}"
        for i, m in enumerate(rec["loss_mask"]):
            if m:
                want["key"].append((sid, i - start))
                want["ratio"].append(rec["importance_ratio"][i])
                want["kl"].append(rec["mismatch_kl"][i])
                want["masked"].append(rec["is_masked"][i] and rec["advantages"][i] != 0)
    got = {(s, p): j for j, (s, p) in enumerate(zip(tok["sample_id"], tok["pos"]))}
    assert set(got) == set(want["key"])  # the loss tokens, the env token masked
    order = torch.tensor([got[k] for k in want["key"]])
    lr = torch.from_numpy((tok["logp_train"] - tok["logp_behavior"]).to_numpy())[order]
    ratio = torch.from_numpy(tok["ratio"].to_numpy())[order]
    # prime-rl's float32 r = exp(fl32(log π − log µ)) against ours in float64 from the same
    # float32 log-probs: the float32 difference rounds once (relative error of r ≤
    # |log r|·2^-24, |log r| < 4 here) and exp and the output once more: 8·2^-23 relative
    torch.testing.assert_close(ratio, torch.tensor(want["ratio"], dtype=torch.float64),
                               rtol=8 * F32_EPS, atol=0.0)
    # mismatch_kl = r − log r − 1 in float32 cancels near r = 1: a few float32 ulps of r
    ours_kl = torch.expm1(lr) - lr
    torch.testing.assert_close(ours_kl, torch.tensor(want["kl"], dtype=torch.float64),
                               rtol=0.0, atol=16 * F32_EPS * float(ratio.max()))
    dropped = ~torch.from_numpy(tok["keep_prime_rl_default"].to_numpy())[order]
    assert dropped.tolist() == want["masked"]
    assert 0 < int(dropped.sum()) < dropped.numel()


def test_prime_rl_null_logprob_at_a_loss_token_names_its_position(tmp_path: Path) -> None:
    lines = write_export(tmp_path, steps=1, ranks=1, per_file=2)
    lines[1]["trainer_logprobs"][4] = None  # response position 1
    f = tmp_path / "token_exports" / "step_1" / "rank_0.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(IngestError, match=r"line 2.*trainer_logprobs is null .* response pos 1 "
                                          r"\(sequence position 4\)"):
        ingest(IngestConfig("prime-rl", (f,), tmp_path / "log.parquet", vocab_size=VOCAB))
    assert not (tmp_path / "log.parquet").exists()


def test_prime_rl_cross_entropy_tokens_are_not_behavior_samples(tmp_path: Path) -> None:
    lines = write_export(tmp_path, steps=1, ranks=1, per_file=1)
    rec = lines[0]
    rec["rl_weights"] = [1.0 if m else 0.0 for m in rec["loss_mask"]]
    rec["rl_weights"][4] = 0.0  # a distilled (ce) token: no sampler drew it
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    log = tmp_path / "log.parquet"
    ingest(IngestConfig("prime-rl", (f,), log, vocab_size=VOCAB))
    mask = pl.read_parquet(log)["loss_mask"][0].to_list()
    assert mask[:3] == [True, False, False]  # pos 1: ce; pos 2: the environment token
