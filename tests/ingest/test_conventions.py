"""One distribution logged as plus_sampled (K + sampled) and replace_last (K + 1 slots).

Where the sampled token k is outside the top-K both logs hold S = top-K ∪ {k} and the
same genuine entries, so every number must agree. Where k is inside, replace_last keeps
one more token: a finer partition, so the top-K KL and TV (lower bounds of the full ones)
can only grow; per-token quantities of k itself do not change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ingest_layouts import K, VOCAB, make_truth, masks_frame, vllm_record, write_jsonl

from pdm_replay.commands.ingest import IngestConfig, ingest
from pdm_replay.io.reader import read_meta


def _replace_last_rows(truth) -> list[dict]:
    rows = []
    for row, pos in zip(truth.rows, truth.positions):
        ids = []
        for p in pos:
            top = [int(j) for j in np.argsort(-p.mu)[:K + 1]]
            ids.append(top if p.k in top else [*top[:K], p.k])
        rows.append({**row, "topk_ids": ids,
                     "topk_logprobs": [[float(p.mu[j]) for j in r] for p, r in zip(pos, ids)],
                     "train_topk_logprobs": [[float(p.pi[j]) for j in r]
                                             for p, r in zip(pos, ids)]})
    return rows


def test_same_distribution_both_conventions(tmp_path: Path) -> None:
    truth = make_truth(n=12, seed=3)
    plus = write_jsonl(tmp_path / "vllm.jsonl", [vllm_record(truth, i)
                                                 for i in range(len(truth.rows))])
    ingest(IngestConfig("vllm", (plus,), tmp_path / "plus.parquet", vocab_size=VOCAB))
    repl = write_jsonl(tmp_path / "rl.jsonl", _replace_last_rows(truth))
    mapping = tmp_path / "map.toml"
    mapping.write_text("[columns]\n" + "".join(f'{c} = "{c}"\n' for c in truth.rows[0])
                       + '[meta]\ntopk_convention = "replace_last"\n')
    ingest(IngestConfig("columns", (repl,), tmp_path / "rl.parquet", vocab_size=VOCAB,
                        mapping=mapping))
    assert read_meta(tmp_path / "plus.parquet").top_k == K
    assert (read_meta(tmp_path / "rl.parquet").topk_convention,
            read_meta(tmp_path / "rl.parquet").top_k) == ("replace_last", K + 1)

    a = masks_frame(tmp_path / "plus.parquet", tmp_path / "ta.parquet")
    b = masks_frame(tmp_path / "rl.parquet", tmp_path / "tb.parquet")
    assert a["sample_id"].to_list() == b["sample_id"].to_list()
    assert a["pos"].to_list() == b["pos"].to_list()
    in_top = {(row["sample_id"], t): p.k in p.top
              for row, pos in zip(truth.rows, truth.positions) for t, p in enumerate(pos)}
    inside = np.array([in_top[(s, t)] for s, t in zip(a["sample_id"], a["pos"])])
    assert inside.any() and (~inside).any()

    out, inn = ~inside, inside
    for name in a.columns:
        x, y = a[name].to_numpy(), b[name].to_numpy()
        if a[name].dtype.is_float():
            np.testing.assert_allclose(x[out], y[out], rtol=1e-9, atol=1e-12, err_msg=name)
        else:
            assert (x[out] == y[out]).all(), name
    assert (b["support_size"].to_numpy()[inn] == a["support_size"].to_numpy()[inn] + 1).all()
    for name in ("kl_topk", "tv_topk"):
        assert (b[name].to_numpy()[inn] >= a[name].to_numpy()[inn] - 1e-12).all(), name
    for name in ("ratio", "kl_binary", "tv_binary", "dkl_local", "logp_behavior"):
        np.testing.assert_allclose(a[name].to_numpy(), b[name].to_numpy(), rtol=1e-12)
