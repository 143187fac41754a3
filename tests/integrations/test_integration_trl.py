"""A real TRL ``GRPOTrainer`` (CPU, the sample policy, 2 steps) writing a rollout log through
:class:`pdm_replay.integrations.trl.RolloutLoggingGRPOTrainer`; the log validates, its µ
matches the generating model and it replays against the trained checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

trl = pytest.importorskip("trl", reason="trl is not installed: pip install -e '.[integrations]'")
datasets = pytest.importorskip("datasets", reason="datasets (a trl dependency) is not installed")

from pdm_replay.cli import app  # noqa: E402
from pdm_replay.integrations.trl import RolloutLoggingGRPOTrainer, behavior_topk  # noqa: E402
from pdm_replay.io.reader import read_meta  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "sample_data" / "checkpoints" / "step_8"
K = 5
EPS = float(np.finfo(np.float32).eps)


def _reward(completions: list[str], **_: object) -> list[float]:
    """Share of number tokens in the completion (varies across a group: nonzero Â)."""
    return [sum(w.isdigit() for w in c.split()) / max(len(c.split()), 1) for c in completions]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("trl")
    torch.manual_seed(0)
    prompts = [f"<bos> sort : {' '.join(str(x) for x in rng)} ->" for rng in
               ([412, 7, 93, 5], [3, 800, 21, 64], [9, 1, 77, 500], [12, 13, 600, 2])]
    args = trl.GRPOConfig(
        output_dir=str(root / "out"), per_device_train_batch_size=4, num_generations=4,
        max_completion_length=6, max_steps=2, learning_rate=1e-3, use_cpu=True,
        report_to="none", save_strategy="no", logging_steps=1, seed=0, temperature=1.0,
        top_k=0, top_p=1.0, beta=0.0, dataloader_num_workers=0)
    trainer = RolloutLoggingGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(POLICY, use_safetensors=True),
        processing_class=AutoTokenizer.from_pretrained(POLICY), reward_funcs=_reward,
        args=args, train_dataset=datasets.Dataset.from_dict({"prompt": prompts}),
        rollout_dir=root / "rollouts", rollout_top_k=K)
    trainer.train()
    trainer.save_model(str(root / "ckpt"))
    return root / "rollouts", root / "ckpt", trainer


def test_log_validates_with_the_trainer_footer(trained) -> None:
    log, _, trainer = trained
    res = CliRunner().invoke(app, ["validate", str(log)])
    assert res.exit_code == 0, res.output
    meta = read_meta(log)
    assert (meta.vocab_size, meta.top_k, meta.topk_convention, meta.logprobs_mode,
            meta.temperature, meta.top_k_sampling) == (4103, K, "plus_sampled", "processed",
                                                        1.0, 0)
    t = pq.read_table(log)
    # 2 optimizer steps, one generation batch of 4 completions each (4 prompts x 4 / 4)
    assert t.num_rows == 8 and sorted(set(t["step"].to_pylist())) == [0, 1]
    assert {len(v) for v in _groups(t).values()} == {4}  # num_generations per prompt
    for row in t.to_pylist():
        assert len(row["prompt_ids"]) > 0 and 0 < len(row["response_ids"]) <= 6
        for k, lp, ids, lps in zip(row["response_ids"], row["behavior_logprobs"],
                                   row["topk_ids"], row["topk_logprobs"]):
            assert len(ids) in (K, K + 1) and lps == sorted(lps[:K], reverse=True) + lps[K:]
            assert (k in ids[:K]) == (len(ids) == K)  # plus_sampled: k appended if outside
            assert lp == pytest.approx(lps[ids.index(k)], abs=0)


def _groups(t) -> dict:
    out: dict = {}
    for g, a in zip(t["group_id"].to_pylist(), t["advantages"].to_pylist()):
        out.setdefault(g, []).append(a)
    return out


def test_behavior_is_the_generating_model(trained) -> None:
    """µ of the log = softmax(z / T) of a plain full forward of the same inputs, float32.

    Same model and weights, another code path (left-padded batched rows, logits_to_keep vs
    one unpadded row, full logits). Measured on 6 x 12 random tokens (|log µ| up to 55),
    ATEN_CPU_CAPABILITY=default and the machine default: at most 2 float32 ulps of
    |log µ| apart; the bound is 8 ulps relative (plus 8 ulps absolute near 0)."""
    _, _, trainer = trained
    model = trainer.accelerator.unwrap_model(trainer.model)
    p = torch.tensor([[0, 0, 1, 7, 8], [1, 7, 8, 9, 10]])
    pm = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    c = torch.tensor([[11, 12, 2], [13, 2, 0]])
    cm = torch.tensor([[1, 1, 1], [1, 1, 0]])
    got = behavior_topk(model, p, pm, c, cm, temperature=0.7, top_k=3, rows_per_forward=1)
    for b in range(2):
        real = torch.cat([p[b][pm[b].bool()], c[b]])
        with torch.no_grad():
            z = model(input_ids=real[None]).logits[0].float() / 0.7
        want = z.log_softmax(-1)[pm[b].sum() - 1:-1]  # rows predicting c[b]
        for t in range(int(cm[b].sum())):
            np.testing.assert_allclose(got["behavior_logprobs"][b, t], want[t, c[b, t]],
                                       rtol=8 * EPS, atol=8 * EPS)
            top = want[t].topk(3)
            assert got["topk_ids"][b, t, :3].tolist() == top.indices.tolist()
            assert got["topk_valid"][b, t, 3] == (int(c[b, t]) not in top.indices.tolist())


def test_log_replays_against_the_checkpoint(trained, tmp_path: Path) -> None:
    log, ckpt, _ = trained
    res = CliRunner().invoke(app, ["replay", str(log), "--checkpoint", str(ckpt),
                                   "--out", str(tmp_path / "run"), "--seeds", "1",
                                   "--batch-size", "8", "--lr", "1e-3", "--update-masks",
                                   "none,pdm_kl_agg", "--no-attribution"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "run" / "done" / "seed=0.json").is_file()
    tokens = pq.read_table(tmp_path / "run" / "tokens" / "seed=0" / "part-0.parquet")
    rows = pq.read_table(log).to_pylist()
    assert tokens.num_rows == sum(sum(r["loss_mask"]) for r in rows) > 0
    assert np.isfinite(tokens["kl_topk"].to_numpy()).all()
    assert (tokens["support_size"].to_numpy() >= K).all()  # the logged top-K reached π


def test_vllm_mode_logs_the_sampled_token_only(trained, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM cannot run here: the batch is the dict ``_generate_and_score_completions``
    returns with vLLM (its keys and shapes, ``sampling_per_token_logps`` with a NaN where
    vLLM gave ``None``); the real trainer object logs it."""
    from pdm_replay import RolloutLogger
    from pdm_replay.commands.validate import validate_log
    _, _, trainer = trained
    monkeypatch.setattr(trainer, "use_vllm", True)
    monkeypatch.setattr(trainer, "rollout_logger", RolloutLogger(
        tmp_path / "v", vocab_size=4103, top_k=0, logprobs_mode="processed", on_error="skip"))
    sampling = torch.tensor([[-0.5, -1.0, -2.0, 0.0], [-0.1, float("nan"), -0.3, -0.2],
                             [-0.7, -0.2, 0.0, 0.0], [-1.5, -0.4, -0.9, -0.3]])
    out = {"prompt_ids": torch.tensor([[0, 1, 7]] * 4), "prompt_mask": torch.tensor(
        [[0, 1, 1]] * 4), "completion_ids": torch.tensor([[8, 9, 2, 0], [8, 8, 8, 2],
                                                          [9, 2, 0, 0], [7, 7, 7, 2]]),
           "completion_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0],
                                            [1, 1, 1, 1]]),
           "advantages": torch.tensor([0.5, -0.5, 1.0, -1.0]), "num_items_in_batch": 12,
           "sampling_per_token_logps": sampling, "old_per_token_logps": sampling - 0.01}
    with pytest.warns(UserWarning, match="dropped 1 sample"):
        trainer._log_rollouts(out)
    t = pq.read_table(tmp_path / "v")
    assert t.num_rows == 3 and validate_log(tmp_path / "v").ok
    assert t["behavior_logprobs"].to_pylist()[0] == [-0.5, -1.0, -2.0]
    assert all(p == [] for r in t["topk_ids"].to_pylist() for p in r)  # K = 0
    assert read_meta(tmp_path / "v").top_k == 0
