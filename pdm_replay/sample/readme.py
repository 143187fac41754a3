"""The ``README.md`` written next to a generated sample: provenance, command, statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdm_replay.sample.stats import DELTA_KL, TAIL_FLOOR
from pdm_replay.sample.tokenizer import vocabulary

if TYPE_CHECKING:
    from pdm_replay.sample.make import SampleConfig, SampleResult, SizePreset


def _stats_table(result: "SampleResult") -> str:
    s = result.stats
    rows = [
        ("samples (rows)", f"{s.samples}"),
        ("response tokens", f"{s.tokens}"),
        (f"median µ top-{s.top_k} mass", f"{s.topk_mass_median:.4f}"),
        (f"5th percentile µ top-{s.top_k} mass", f"{s.topk_mass_p05:.4f}"),
        ("median / 95th pct. µ tail mass (outside top-K ∪ {k})",
         f"{s.tail_median:.2e} / {s.tail_p95:.2e}"),
        (f"tokens with µ tail > {TAIL_FLOOR:g}", f"{s.tail_nontrivial_frac:.1%}"),
        ("median kl_topk", f"{s.kl_topk_median:.4f}"),
        (f"tokens with kl_topk > {DELTA_KL} (out of region)",
         f"{s.kl_over_delta_frac:.2%} ({s.out_of_region})"),
        ("ratio / predictive (KL, agg) direction disagreements, out of region",
         f"{s.disagree_out}"),
        ("... over all tokens with Â ≠ 0", f"{s.disagree_all}"),
        ("ratio 1st / 99th percentile", f"{s.ratio_p01:.3f} / {s.ratio_p99:.3f}"),
        ("tokens with µ top-K mass overflow", f"{s.mass_overflow}"),
        ("reward mean / share 0 / share 1",
         f"{s.reward_mean:.3f} / {s.reward_zero_frac:.1%} / {s.reward_one_frac:.1%}"),
    ]
    return "\n".join(["| statistic | value |", "|---|---|"]
                     + [f"| {a} | {b} |" for a, b in rows])


def _how(preset: "SizePreset", result: "SampleResult") -> str:
    m, t = preset.model, preset.train
    rl = ", ".join(f"step {i + 1}: mean reward {r.mean_reward:.3f} over {r.tokens} tokens"
                   for i, r in enumerate(result.rl_steps))
    return f"""\
1. **Tokenizer** (`tokenizers`, built offline): word level, whitespace split; `<pad>`,
   `<bos>`, `<eos>`, `<unk>`, the words `sort : ->` and every number `0`..`999` as one
   token (vocabulary {len(vocabulary())}). Saved as a `PreTrainedTokenizerFast`.
2. **Task**: `<bos> sort : 412 7 93 ->` → `7 93 412 <eos>`; lists of
   {preset.min_len}..{preset.max_len} distinct numbers below {preset.max_value}. Verifiable
   graded reward: share of answer slots holding the right number, over
   max(answer length, list length).
3. **Model**: `Qwen3ForCausalLM` from a `Qwen3Config`: hidden {m.hidden_size},
   {m.num_hidden_layers} layers, {m.num_attention_heads} heads / {m.num_key_value_heads} KV
   heads, MLP {m.intermediate_size}, tied embeddings, default (sdpa) attention, float32.
4. **SFT**: {t.sft_steps} AdamW steps (lr {t.sft_lr:g}, cosine decay, batches of
   {t.sft_batch} fresh problems, loss on answer tokens); final loss ≈ {result.sft_loss:.3f}.
   Short on purpose: peaked but imperfect distributions. Saved as **`behavior/`** (θ_(t−1)).
5. **RL**: {t.rl_steps} on-policy GRPO step(s) from θ_(t−1): Adam (fresh state,
   lr {t.rl_lr:g}), {t.rl_prompts} prompts × G = {t.group_size}, group-normalised rewards,
   token-level surrogate; {rl}. Saved as **`policy/`** (θ_t).
6. **Rollouts** (the "inference engine"): `behavior/` loaded with
   `from_pretrained(dtype=torch.bfloat16)`, transformers `generate` with
   `do_sample=True, temperature=1.0, top_k=0, top_p=1.0` (full softmax, no truncation),
   G = {t.group_size} samples for each of {preset.log_prompts} new prompts. At every position
   the top-{preset.top_k} log-probs of the distribution actually sampled from
   (`output_scores`, which equal the raw logits here) are logged, plus the sampled token
   when it is outside the top-{preset.top_k} (`plus_sampled`).
7. **Trainer side**: GRPO advantages (reward − group mean) / (group std + 1e-6) on every
   token; `train_logprobs` / `train_topk_logprobs` recomputed by `policy` in **float32**,
   one unpadded forward pass per prompt + response (like a padding-free trainer).
   `step` = {t.rl_steps} (the policy version).
8. Footer: `vocab_size`, `top_k={preset.top_k}`, `topk_convention=plus_sampled`,
   `logprobs_mode=raw` (no logits processor runs, so the sampled scores are the raw
   log-probs), `tokenizer=../policy` (relative to `rollouts/`), `temperature=1.0`,
   `top_p=1.0`, `top_k_sampling=0`, and `behavior_checkpoint=../behavior`,
   `policy_checkpoint=../policy`, `behavior_dtype=bfloat16`, `policy_dtype=float32`,
   `generated_by` (the command).

Reproducing the numbers: `policy/` in float32, one sequence per forward pass, gives
`train_logprobs` bit for bit; `behavior/` in bfloat16 gives the logged top-K log-probs to
within a few bf16 ulps of the largest logit (the engine decoded with a KV cache in
batches; at most 2 ulps on the shipped sample, the tests allow 4).

Everything runs on CPU, one thread, deterministic algorithms, seeded from `--seed`."""


CHOICES = """\
µ ≠ π comes from two sources, as in asynchronous RL: staleness (θ_(t−1) vs θ_t, one GRPO
step) and precision (the bfloat16 engine vs the float32 trainer). Precision alone is
small here; the RL step's learning rate sets how far π moves. Sweep of the RL learning
rate on the `small` preset, seed 0 (share of tokens with kl_topk > 0.15 / KL-agg
direction disagreements among them):

| RL lr | out of region | disagreements (out of region) |
|---|---|---|
| 0 (bfloat16 alone) | 0.04% | 1 |
| 1e-3 | 3.4% | 29 |
| **1.5e-3 (chosen)** | **8.3%** | **84** |
| 2e-3 | 16.5% | 188 |
| 3e-3 | 32.9% | 408 |

1.5e-3 clears the targets (>= 2% out of region, >= 20 disagreements) with margin while
most tokens stay inside the trust region, as in a healthy run. SFT length sets
peakiness: 1000 steps give a median top-20 mass above 0.99 but rewards well below 1
(600 steps gave a median near 0.96 while tuning)."""


def render_readme(cfg: "SampleConfig", preset: "SizePreset", result: "SampleResult",
                  out_dir: str) -> str:
    """Markdown for ``OUT_DIR/README.md``."""
    checks = result.stats.checks()
    check_lines = "\n".join(f"- {name}: {'pass' if ok else 'FAIL'}"
                            for name, ok in checks.items())
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    # The sweep was run on the shipped preset; other sizes only state their knobs.
    choices = f"## Choices\n\n{CHOICES}\n" if cfg.size == "small" else ""
    return f"""\
# Sample data: a tiny real RL step, logged like an asynchronous RL trainer

Generated by `pdm_replay` (size `{cfg.size}`, seed {cfg.seed}). Every demo and end-to-end
test of `pdm_replay` runs on it.

## Regenerate

```bash
{cfg.command(out_dir)} --force
```

Same seed and size give the same Parquet contents (one CPU thread, deterministic kernels;
bits can differ across torch versions or CPU instruction sets). Time on this run:
{timing}.

## Files

- `behavior/`: θ_(t−1), the checkpoint that generated the rollouts (safetensors, float32
  weights; the engine ran it in bfloat16), with `tokenizer.json` / `tokenizer_config.json`.
- `policy/`: θ_t, the training policy after the RL step (safetensors, float32), same tokenizer.
- `rollouts/part-00000.parquet`: the rollout/v1 log.

Both load offline: `AutoModelForCausalLM.from_pretrained("{out_dir}/policy",
use_safetensors=True)`, `AutoTokenizer.from_pretrained("{out_dir}/policy")`.

## How it was made

{_how(preset, result)}

{choices}
## Statistics

Log-only metrics (`pdm_replay.tokens.log_stats` on the written log), over all
{result.stats.tokens} loss tokens. A direction disagreement is a token with Â ≠ 0 where the ratio
criterion sign(Â)(r − 1) > 0 and the predictive criterion sign(Â)·dkl_agg > 0 differ;
"out of region" means kl_topk > {DELTA_KL} (there `dppo_topk_kl` and `pdm_kl_agg` decide
differently).

{_stats_table(result)}

Acceptance checks:

{check_lines}
"""
