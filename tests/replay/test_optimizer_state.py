"""--optimizer-state: the trainer's Adam state mapped by name, a continued AdamW step equal
to the replay's, clear errors for mismatched or unsafe files."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from replay_helpers import tiny_qwen3

from pdm_replay.replay.batching import micro_batches
from pdm_replay.replay.checkpoint import load_policy
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import LossInputs, PassConfig, accumulate_gradients
from pdm_replay.replay.optimizer_state import load_trainer_optimizer
from pdm_replay.commands.replay import run_replay

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")
SMALL = dict(seeds=1, batch_size=6, micro_batch_size=4, lr=1e-3, chunk_tokens=16,
             update_masks=("none",), attribution=False)


def hf_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """HF Trainer's create_optimizer grouping, written out for Qwen3 (independently of the
    code under test): RMSNorm gains (names with "norm") get no decay, everything else does;
    each group in named_parameters() order."""
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if "norm" not in n], "weight_decay": weight_decay},
            {"params": [p for n, p in named if "norm" in n], "weight_decay": 0.0}]


def trained(tmp: Path, *, steps: int = 2, named: bool = False) -> tuple[Path, Path]:
    """A 'trainer' run: a tiny Qwen3 after ``steps`` AdamW steps (weight decay 0.1, so a
    wrong grouping shows), saved as a checkpoint, and its optimizer.pt."""
    model = tiny_qwen3(0)
    groups = model.named_parameters() if named else hf_groups(model, 0.1)
    opt = torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.1)
    for s in range(steps):
        torch.manual_seed(s)
        ids = torch.randint(0, 384, (2, 9))
        logits = model(input_ids=ids).logits[:, :-1]
        torch.nn.functional.cross_entropy(logits.reshape(-1, 384), ids[:, 1:].reshape(-1)
                                          ).backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(tmp / "ckpt")
    torch.save(opt.state_dict(), tmp / "optimizer.pt")
    return tmp / "ckpt", tmp / "optimizer.pt"


def test_continued_adamw_step_equals_the_state_the_replay_builds(tmp_path):
    ckpt, state = trained(tmp_path)
    policy = load_policy(ckpt)
    loaded = load_trainer_optimizer(state, policy.model)
    assert loaded.mapping == "HF Trainer groups" and not loaded.legacy_adamw
    params = list(policy.model.parameters())
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    ref = tiny_qwen3(0)
    ref.load_state_dict(policy.model.state_dict())
    opt = torch.optim.AdamW(hf_groups(ref, 0.1), lr=5e-4, weight_decay=0.1)
    opt.load_state_dict(torch.load(state, weights_only=True))
    for group in opt.param_groups:
        group["lr"] = 5e-4
    for p, g in zip(ref.parameters(), grads):
        p.grad = g.clone()
    opt.step()
    for p, g in zip(params, grads):
        p.grad = g.clone()
    loaded.make(params, 5e-4).step()
    for a, b in zip(params, ref.parameters()):
        assert torch.equal(a.detach(), b.detach())
    assert loaded.describe()["step"] == 2.0  # the trainer's two steps, continued
    again = load_trainer_optimizer(state, policy.model).make(params, 5e-4)
    assert all(float(s["step"]) == 2.0 for s in again.state.values())  # state not shared


def test_replay_step_is_the_trainers_next_step(tmp_path, replay_log):
    """The replay's `none` update with --optimizer-state equals the trainer's continued
    AdamW step on the same gradient: that step, saved as --next-checkpoint, gives `actual`
    rows identical to the `none` rows."""
    ckpt, state = trained(tmp_path)
    policy = load_policy(ckpt)
    sb = seed_batch(LogIndex.of(RolloutLog.open(replay_log)), 6, 0,
                    policy.vocab_size)  # seed 0's rows
    f = sb.flat
    inputs = LossInputs(*(torch.from_numpy(a) for a in (f.token_id, f.logp_behavior,
                                                         f.advantage)))
    accumulate_gradients(policy, micro_batches(sb.prompts, sb.responses, 4), inputs,
                         torch.from_numpy(f.loss_mask).double(), int(f.loss_mask.sum()),
                         PassConfig(chunk_tokens=16))
    opt = torch.optim.AdamW(hf_groups(policy.model, 0.1), lr=1e-3, weight_decay=0.1)
    opt.load_state_dict(torch.load(state, weights_only=True))
    for group in opt.param_groups:
        group["lr"] = 1e-3
    opt.step()
    policy.model.save_pretrained(tmp_path / "next")
    runs = {}
    for name, extra in (("state", {"optimizer_state": state}), ("fresh", {})):
        res = run_replay(ReplayConfig(log=replay_log, checkpoint=ckpt, out=tmp_path / name,
                                      next_checkpoint=tmp_path / "next", trainer_mask="none",
                                      **SMALL, **extra))
        runs[name] = pq.read_table(res.run_dir / "updates" / "seed=0" / "part-0.parquet")
    assert res.manifest.get("optimizer_state") is None
    for name, table in runs.items():
        rows = {m: table.filter(pc.equal(table["update_mask"], m)) for m in ("actual", "none")}
        same = all(rows["actual"][c].equals(rows["none"][c])
                   for c in ("logp_post", "kl_topk_post", "support_logp_post"))
        assert same == (name == "state")


def test_named_parameter_groups_are_matched_by_name(tmp_path):
    ckpt, state = trained(tmp_path, named=True)
    loaded = load_trainer_optimizer(state, load_policy(ckpt).model)
    assert loaded.mapping == "param_names"


def test_mismatched_state_lists_the_parameters(tmp_path):
    ckpt, _ = trained(tmp_path)
    model = tiny_qwen3(0)
    reordered = list(model.parameters())[::-1]  # one group in the wrong order
    opt = torch.optim.AdamW(reordered, lr=1e-3)
    for p in reordered:
        p.grad = torch.ones_like(p)
    opt.step()
    torch.save(opt.state_dict(), tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"does not match the checkpoint's parameters "
                       r"\(matched by model order\): index 1 \(model\.layers\.0\.self_attn"
                       r"\.q_proj\.weight\): moments of shape \(32,\), parameter \(32, 32\)"):
        load_trainer_optimizer(tmp_path / "bad.pt", load_policy(ckpt).model)


class Custom:
    """Any class: unpickling it could run code, so weights_only refuses it."""


def test_unsafe_or_foreign_files_are_refused(tmp_path, model_dir):
    torch.save({"state": {}, "param_groups": [], "x": Custom()}, tmp_path / "pickle.pt")
    torch.save({"model": {}}, tmp_path / "other.pt")
    model = load_policy(model_dir).model
    with pytest.raises(ValueError, match="not loadable with weights_only=True"):
        load_trainer_optimizer(tmp_path / "pickle.pt", model)
    with pytest.raises(ValueError, match="not an optimizer state_dict"):
        load_trainer_optimizer(tmp_path / "other.pt", model)


def test_optimizer_state_needs_adam():
    with pytest.raises(ValueError, match="optimizer adam"):
        ReplayConfig(log=Path("l"), checkpoint=Path("c"), out=Path("o"),
                     optimizer_state=Path("s.pt"), optimizer="sgd")
