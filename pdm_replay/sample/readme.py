"""The ``README.md`` written next to a generated sample: provenance, command, statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdm_replay.sample.log_checks import DELTA_KL, TAIL_FLOOR
from pdm_replay.sample.tokenizer import N_NUMBERS, vocabulary

if TYPE_CHECKING:
    from pdm_replay.sample.config import SampleConfig, SampleResult, SizePreset


def _stats_table(result: "SampleResult") -> str:
    s = result.stats
    rows = [
        ("samples (rows)", f"{s.samples}"),
        ("logged steps", f"{s.steps}"),
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


def _steps_table(result: "SampleResult", first_logged: int) -> str:
    rows = [f"| {r.step} | {r.staleness} | {'yes' if r.step >= first_logged else 'no'} | "
            f"{r.mean_reward:.3f} | {r.tokens} | {r.kept:.1%} | {r.update_norm:.3g} |"
            for r in result.rl_steps]
    return "\n".join(["| step t | staleness | logged | mean reward | tokens | kept by the "
                      "trainer mask | ‖θ_{t+1} − θ_t‖ |", "|---|---|---|---|---|---|---|",
                      *rows])


def _made(preset: "SizePreset", result: "SampleResult") -> str:
    """Steps 1-4 of "How it was made": tokenizer, task, model, SFT."""
    m, t = preset.model, preset.train
    return f"""\
1. **Tokenizer** (`tokenizers`, built offline): word level, whitespace split; `<pad>`,
   `<bos>`, `<eos>`, `<unk>`, the words `sort : ->` and every number `0`..`{N_NUMBERS - 1}` as
   one token (vocabulary {len(vocabulary())}). Saved as a `PreTrainedTokenizerFast`.
2. **Task**: `<bos> sort : 412 7 93 ->` → `7 93 412 <eos>`; lists of
   {preset.min_len}..{preset.max_len} distinct numbers below {preset.max_value}. Verifiable
   graded reward: share of answer slots holding the right number, over
   max(answer length, list length).
3. **Model**: `Qwen3ForCausalLM` from a `Qwen3Config`: hidden {m.hidden_size},
   {m.num_hidden_layers} layers, {m.num_attention_heads} heads / {m.num_key_value_heads} KV
   heads, MLP {m.intermediate_size}, tied embeddings, default (sdpa) attention, float32.
4. **SFT**: {t.sft_steps} AdamW steps (lr {t.sft_lr:g}, cosine decay, batches of
   {t.sft_batch} fresh problems, loss on answer tokens); final loss ≈ {result.sft_loss:.3f}.
   Short on purpose: peaked but imperfect distributions. The result is θ_0."""


def _rl_and_log(preset: "SizePreset") -> str:
    """Steps 5-8 of "How it was made": the RL loop, the trainer step, what is logged."""
    t = preset.train
    first, last = t.first_logged, t.rl_steps
    return f"""\
5. **RL**: {t.rl_steps} GRPO steps t = 0..{last - 1}, one AdamW optimizer (lr {t.rl_lr:g}, no
   weight decay, state kept across steps), {t.rl_prompts} prompts × G = {t.group_size}
   samples per step. The **rollout engine** is refreshed every {t.sync_every} steps: at
   t = 0, {t.sync_every}, … the trainer saves θ_t, the engine loads it with
   `from_pretrained(dtype=torch.bfloat16)` and samples the batches of the next
   {t.sync_every} steps with transformers `generate` (`do_sample=True, temperature=1.0,
   top_k=0, top_p=1.0`: full softmax, no truncation). So step t trains θ_t on rollouts of
   µ = bf16(θ_s), s the last sync step: staleness t − s = 0..{t.sync_every - 1} steps plus
   the precision gap, as with an asynchronous engine or PPO's several optimizer steps per
   rollout batch. At every position the engine's top-{preset.top_k} log-probs
   (`output_scores`, the raw logits here) are kept, plus the sampled token when it is
   outside the top-{preset.top_k} (`plus_sampled`).
6. **Trainer step t**: GRPO advantages (reward − group mean) / (group std + 1e-6) on every
   token; `train_logprobs` / `train_topk_logprobs` = θ_t in **float32**, one unpadded
   forward pass per prompt + response (like a padding-free trainer); the trainer's mask
   `{t.trainer_mask}` (δ = {t.delta_kl}, the registry's mask on logged µ and π) decides
   `keep`; loss −Σ keep·(π_θ(k)/µ(k))·Â / N_tokens; one AdamW step gives θ_(t+1).
7. **Logged**: steps {first}..{last - 1} (their batches, `step` = t), with
   `checkpoints/step_{first}` .. `checkpoints/step_{t.rl_steps}` (θ_t before each logged
   step and after the last). The earlier steps are warm-up: trained, not logged.
8. Footer: `vocab_size`, `top_k={preset.top_k}`, `topk_convention=plus_sampled`,
   `logprobs_mode=raw` (no logits processor runs, so the sampled scores are the raw
   log-probs), `tokenizer`, `temperature=1.0`, `top_p=1.0`, `top_k_sampling=0`, and
   `behavior_checkpoint=../behavior/step_{{step}}` with `behavior_dtype=bfloat16` (the
   behavior model is the engine's checkpoint loaded in bf16: no separate copy is stored),
   `policy_checkpoint` / `next_checkpoint` templates, `policy_dtype=float32`,
   `trainer_mask`, `trainer_delta_kl`, `optimizer_state`, `generated_by` (the command)."""


REPRODUCING = """\
Reproducing the numbers: `checkpoints/step_<t>` in float32, one sequence per forward
pass, gives the rows of step t's `train_logprobs` bit for bit on the CPU that wrote them
(within a few float32 ulps of the largest logit on other SIMD paths);
`behavior/step_<t>` in bfloat16 gives the logged top-K log-probs of step t to within a few bf16 ulps of the largest logit (the engine decoded with a KV cache in
batches).

Everything runs on CPU, one thread, deterministic algorithms, seeded from `--seed`."""


def _how(preset: "SizePreset", result: "SampleResult") -> str:
    """The "How it was made" section: steps 1-8, the per-step table, reproducing."""
    return f"""\
{_made(preset, result)}
{_rl_and_log(preset)}

Per step:

{_steps_table(result, preset.train.first_logged)}

{REPRODUCING}"""


CHOICES = """\
Why these sizes: the log must hold at least 1,000 KL / aggregated-tail disagreement
tokens at δ = 0.15 and at least 16 disjoint seeds of 64 samples, the Quickstart's replay
of the whole log needs enough of them for a ±5-point interval on the unsafe-keep
difference (about 1,500), and `sample_data/` must stay within 40 MB. Checkpoints are
float32, the trainer's precision: an AdamW step moves a weight by about lr = 3e-3 or
less, a few bf16 ulps at most, so bf16 checkpoints would lose the actual update (measured
while building it, on steps 8, 15 and 23: bf16(θ_(t+1)) − bf16(θ_t) is 61–87% off
θ_(t+1) − θ_t in norm and zero on 27–48% of the coordinates that moved), and
`train_logprobs` are float32 numbers. The behavior model
costs nothing extra: `behavior/step_<t>` are links to stored checkpoints, loaded in bf16.
The model is kept small (hidden 64, MLP 192: 1.5 MB per checkpoint) so that seventeen
checkpoints, one optimizer state and the log fit; the vocabulary (4,103) is what a
≥ 4,096-token top-20 tail needs. µ ≠ π comes from staleness (0..7 AdamW steps) and
precision (bf16 engine vs float32 trainer). While building it, 32 prompts per step (a
third of this log) held 584 disagreement tokens, so the batch was tripled; nothing was
chosen from the replay's direction results."""


def _files(first: int, last: int, out_dir: str) -> str:
    """The "Files" section: checkpoints, optimizer state, behavior links, the log."""
    return f"""\
## Files

- `checkpoints/step_<t>/`, t = {first}..{last}: θ_t, the trainer's policy before logged step t
  (and θ_{last} after the last), safetensors, float32, with `tokenizer.json` /
  `tokenizer_config.json`.
- `checkpoints/step_{last - 1}/optimizer.pt`: the trainer's AdamW `state_dict()` before step
  {last - 1} (moments and step count after steps 0..{last - 2}), for `replay --optimizer-state`
  on that step.
- `behavior/step_<t>`: links to `checkpoints/step_<s>`, s the engine's last sync before
  step t: the behavior model of step t is that checkpoint loaded in bfloat16.
- `rollouts/part-00000.parquet`: the rollout/v1 log of steps {first}..{last - 1}.

They load offline: `AutoModelForCausalLM.from_pretrained("{out_dir}/checkpoints/step_{first}",
use_safetensors=True)`, `AutoTokenizer.from_pretrained("{out_dir}/checkpoints/step_{first}")`."""


def _replay_it(preset: "SizePreset", out_dir: str) -> str:
    """The "Replay it" section: the replay and report commands over the whole sample."""
    t = preset.train
    return f"""\
## Replay it

Every logged step against its own θ_t and the trainer's real θ_(t+1) (`actual`), with
the counterfactual masks' simulated steps scaled to the actual step's size:

```bash
pdm-replay replay {out_dir}/rollouts --checkpoint '{out_dir}/checkpoints/step_{{step}}' \\
    --next-checkpoint '{out_dir}/checkpoints/step_{{next_step}}' --trainer-mask {t.trainer_mask} \\
    --seed-by step --seeds {t.logged_steps} --batch-size {t.rl_prompts * t.group_size} --lr auto \\
    --update-masks none,dppo_topk_kl,pdm_kl_agg --no-attribution --out runs/sample
pdm-replay report runs/sample
```"""


def _statistics(result: "SampleResult") -> str:
    """The "Statistics" section: log-only metrics and the acceptance checks."""
    check_lines = "\n".join(f"- {name}: {'pass' if ok else 'FAIL'}"
                            for name, ok in result.stats.checks().items())
    return f"""\
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


def render_readme(cfg: "SampleConfig", preset: "SizePreset", result: "SampleResult",
                  out_dir: str) -> str:
    """Markdown for ``OUT_DIR/README.md``."""
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    first, last = preset.train.first_logged, preset.train.rl_steps
    choices = f"## Choices\n\n{CHOICES}\n" if cfg.size == "small" else ""
    return f"""\
# Sample data: real GRPO steps from a stale bfloat16 engine, every step's checkpoint

Generated by `pdm_replay` (size `{cfg.size}`, seed {cfg.seed}). Every demo and end-to-end
test of `pdm_replay` runs on it.

## Regenerate

```bash
{cfg.command(out_dir)} --force
```

Same seed and size give the same Parquet contents (one CPU thread, deterministic kernels;
bits can differ across torch versions or CPU instruction sets). Time on this run:
{timing}.

{_files(first, last, out_dir)}

{_replay_it(preset, out_dir)}

## How it was made

{_how(preset, result)}

{choices}
{_statistics(result)}"""
