"""docs/loss.md's TRL and verl snippets, executed against the installed packages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "loss.md"
POLICY = Path(__file__).resolve().parents[2] / "sample_data" / "checkpoints" / "step_8"


def snippet(tag: str) -> dict:
    """Run the ```python block of docs/loss.md whose first line is ``# docs/loss.md: tag``
    and return its namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    (code,) = [b for b in blocks if b.startswith(f"# docs/loss.md: {tag}\n")]
    namespace: dict = {}
    exec(compile(code, f"{DOC}:{tag}", "exec"), namespace)  # noqa: S102  (our own docs)
    return namespace


def test_verl_snippet_gradient_equals_verls_vanilla_loss() -> None:
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos",
                                     reason="verl is not installed (pip install --no-deps verl)")
    from verl.workers.config.actor import ActorConfig

    if "pdm_verl_vanilla" not in core_algos.POLICY_LOSS_REGISTRY:
        snippet("verl")
    loss_fn = core_algos.get_policy_loss_fn("pdm_verl_vanilla")
    g = torch.Generator().manual_seed(0)
    mu = torch.log(torch.rand(8, 12, generator=g, dtype=torch.float64) * 0.8 + 0.1)
    pi = (mu + 0.8 * torch.randn(8, 12, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    adv = torch.randn(8, 1, generator=g, dtype=torch.float64).expand(8, 12)
    mask = torch.arange(12)[None, :] < torch.randint(3, 13, (8, 1), generator=g)
    cfg = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                      clip_ratio=0.2, clip_ratio_c=3.0)
    grads = []
    for fn in (loss_fn, core_algos.compute_policy_loss_vanilla):
        lp = pi.clone().requires_grad_(True)
        loss, _ = fn(old_log_prob=mu, log_prob=lp, advantages=adv,
                     response_mask=mask.double(), loss_agg_mode="token-mean", config=cfg)
        loss.backward()
        grads.append(lp.grad)
    # the same product −Â·r/N on kept tokens, a few float64 roundings apart: 8 ulps
    torch.testing.assert_close(grads[0], grads[1], rtol=8 * 2**-52, atol=0.0)
    assert (grads[1] == 0).any() and (grads[1] != 0).any()


def _digit_share(completions: list[str], **_: object) -> list[float]:
    """A reward that differs between any two different completions (nonzero Â in a group;
    the sample policy writes few digits, so a digit count alone was constant)."""
    return [float(sum(map(ord, c)) % 7) for c in completions]


@pytest.mark.slow
def test_trl_snippet_trains_a_real_grpo_trainer(tmp_path: Path) -> None:
    trl = pytest.importorskip("trl",
                              reason="trl is not installed: pip install -e '.[integrations]'")
    datasets = pytest.importorskip("datasets", reason="datasets (a trl dependency) is absent")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer_cls = snippet("trl")["MaskedGRPOTrainer"]
    torch.manual_seed(0)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
        max_completion_length=6, max_steps=2, learning_rate=1e-3, use_cpu=True,
        report_to="none", save_strategy="no", logging_steps=1, seed=0, temperature=1.0,
        top_k=0, top_p=1.0, beta=0.0, dataloader_num_workers=0)
    model = AutoModelForCausalLM.from_pretrained(POLICY, use_safetensors=True)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = trainer_cls(
        model=model, processing_class=AutoTokenizer.from_pretrained(POLICY),
        reward_funcs=_digit_share, args=args, train_dataset=datasets.Dataset.from_dict(
            {"prompt": ["<bos> sort : 412 7 93 5 ->", "<bos> sort : 3 800 21 64 ->"] * 2}))
    trainer.train()
    moved = [not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters())]
    assert any(moved), "the masked loss produced no update"
