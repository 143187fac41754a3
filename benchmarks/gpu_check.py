"""GPU check of the replay path (issue 8); ``benchmarks/gpu_check.sh`` runs it.

On one GPU: a random-init Qwen3 of the Qwen3-0.6B shape (hidden 1,024, 28 layers, 16 query
heads of 128, 8 KV heads, MLP 3,072, vocabulary 151,936, tied embeddings; built from
``Qwen3Config``, nothing downloaded), saved in bfloat16, and a synthetic log of 64 samples × 512 response tokens = 32,768 loss tokens.
Prints, each against a baseline measured in the same run:

1. recompute pass (decoder + chunked LM-head statistics at the logged supports, what
   every replay stage runs) vs a plain ``model(input_ids).logits`` forward over the same
   micro-batches: tokens/s, peak GPU memory, time ratio;
2. the exact-KL pass (``--behavior-checkpoint``: the behavior model's hidden states,
   then both LM heads per chunk, full-vocabulary KL and Ḋ in float64) vs the recompute
   pass alone: time ratio and peak memory;
3. a full replay (``run_replay``: pre pass + one simulated step per update mask, bf16
   weights, float32/float64 statistics, chunk size from free memory): loss tokens/s, peak
   GPU memory, seconds per stage, and the seed loop in plain-forward equivalents.

``--smoke``: the same code on a tiny model and log (CPU unless ``--device`` says
otherwise) to check the script itself; its figures mean nothing. The test suite runs
``gpu_check.sh --smoke --device cpu`` so the script cannot rot without a GPU.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.replay.batching import micro_batches
from pdm_replay.replay.checkpoint import load_policy
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import PassConfig, behavior_hidden, forward_stats
from pdm_replay.replay.gpu import auto_chunk_tokens
from pdm_replay.commands.replay import run_replay
from pdm_replay.replay.outputs import log_support
from pdm_replay.schema import RolloutMeta

GiB = 1024 ** 3


@dataclass(frozen=True)
class Size:
    vocab: int
    hidden: int
    layers: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    samples: int
    prompt: int
    response: int


# Qwen3-0.6B's config.json: 16 query heads of 128 (wider than hidden / heads = 64), 8 KV
# heads. Time budget, by construction (gpu_check.sh stops at 8 minutes): one forward of
# 32,768 tokens is about 2 × 0.6e9 × 32,768 ≈ 4e13 FLOPs, ~0.1-0.3 s in bf16 on a current
# GPU; the script runs about 3 × (plain + recompute + exact-KL) + one replay (pre pass +
# 3 updates of ~4 forward-equivalents) ≈ 25 forward-equivalents, well under a minute of
# compute; the rest is imports, building and saving the 1.2 GB checkpoint and loading it
# (tens of seconds).
FULL = Size(vocab=151_936, hidden=1024, layers=28, inter=3072, heads=16, kv_heads=8,
            head_dim=128, samples=64, prompt=64, response=512)
SMOKE = Size(vocab=2048, hidden=64, layers=2, inter=128, heads=4, kv_heads=2, head_dim=16,
             samples=8, prompt=8, response=32)


def build_checkpoint(size: Size, path: Path, device: str) -> int:
    """Random-init Qwen3 saved with save_pretrained (bfloat16); returns its parameters."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=size.vocab, hidden_size=size.hidden,
                      intermediate_size=size.inter, num_hidden_layers=size.layers,
                      num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
                      head_dim=size.head_dim, max_position_embeddings=4096,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device(device):  # initialize on the GPU: seconds instead of minutes
        model = Qwen3ForCausalLM(cfg)
    model.to(torch.bfloat16).save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def write_log(size: Size, path: Path, k: int = 20) -> Path:
    """A rollout/v1 log whose top-K rows are valid distributions (cheap to make at any V):
    K distinct ids per token, sorted log-probs with mass 0.9, the sampled token among them."""
    rng = np.random.default_rng(0)
    n = size.samples * size.response
    base = rng.integers(0, size.vocab, n)
    ids = (base[:, None] + 7919 * np.arange(k)) % size.vocab  # 7919: prime, coprime with V
    p = np.sort(rng.dirichlet(np.full(k, 0.3), n), 1)[:, ::-1] * 0.9
    logp = np.log(np.maximum(p, 1e-30)).astype(np.float32)
    pick = (rng.random(n)[:, None] > np.cumsum(p / 0.9, 1)).sum(1).clip(0, k - 1)
    token = ids[np.arange(n), pick]
    rows = []
    for s in range(size.samples):
        t = slice(s * size.response, (s + 1) * size.response)
        rows.append({"sample_id": f"s{s:05d}", "step": 0, "group_id": f"g{s // 8}",
                     "prompt_ids": rng.integers(0, size.vocab, size.prompt).tolist(),
                     "response_ids": token[t].tolist(),
                     "behavior_logprobs": logp[t][np.arange(size.response), pick[t]].tolist(),
                     "topk_ids": ids[t].tolist(), "topk_logprobs": logp[t].tolist(),
                     "advantages": [float(s % 2) * 2 - 1] * size.response,
                     "reward": float(s % 2)})
    meta = RolloutMeta(vocab_size=size.vocab, top_k=k, topk_convention="plus_sampled",
                       logprobs_mode="raw", temperature=1.0)
    return write_rollouts(path, rows, meta)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / GiB if torch.device(device).type == "cuda" \
        else None


def timed(fn, device: str, repeats: int) -> tuple[float, float | None]:
    """Best wall time of ``fn`` over ``repeats`` (after one warm-up) and its peak memory."""
    fn()
    _sync(device)
    _reset_peak(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best, _peak(device)


@torch.no_grad()
def pass_ratio(ckpt: Path, log: Path, args: argparse.Namespace) -> dict:
    """Recompute pass vs plain forward on the replay's own micro-batches."""
    policy = load_policy(ckpt, dtype=args.dtype, device=args.device)
    sb = seed_batch(LogIndex.of(RolloutLog.open(log)), args.batch_size, 0, policy.vocab_size)
    batches = micro_batches(sb.prompts, sb.responses, args.micro_batch_size)
    support, _ = log_support(sb.flat)
    chunk = args.chunk_tokens or auto_chunk_tokens(args.device, policy.vocab_size,
                                                   policy.model.parameters(), "adam")
    cfg = PassConfig(chunk_tokens=chunk)
    dev = policy.device

    def plain() -> None:
        for b in batches:
            policy.model(input_ids=b.input_ids.to(dev),
                         attention_mask=b.attention_mask.to(dev)).logits
    # The same weights as the behavior model: the cost does not depend on the values.
    behavior = load_policy(ckpt, dtype=args.dtype, device=args.device)

    def exact() -> None:
        forward_stats(policy, batches, support, cfg, behavior,
                      behavior_hidden(behavior, batches))
    t_plain, m_plain = timed(plain, args.device, args.repeats)
    t_re, m_re = timed(lambda: forward_stats(policy, batches, support, cfg), args.device,
                       args.repeats)
    t_ex, m_ex = timed(exact, args.device, args.repeats)
    n = len(sb.flat)
    return {"response_tokens": n, "chunk_tokens": chunk, "plain_s": t_plain,
            "recompute_s": t_re, "plain_tok_s": n / t_plain, "recompute_tok_s": n / t_re,
            "ratio": t_re / t_plain, "plain_peak_gib": m_plain, "recompute_peak_gib": m_re,
            "exact_s": t_ex, "exact_vs_recompute": t_ex / t_re, "exact_peak_gib": m_ex}


def full_replay(ckpt: Path, log: Path, out: Path, args: argparse.Namespace) -> dict:
    _reset_peak(args.device)
    cfg = ReplayConfig(log=log, checkpoint=ckpt, out=out, seeds=1, batch_size=args.batch_size,
                       micro_batch_size=args.micro_batch_size, device=args.device,
                       dtype=args.dtype, chunk_tokens=args.chunk_tokens, lr=1e-5,
                       update_masks=tuple(args.update_masks.split(",")),
                       attribution=args.attribution)
    res = run_replay(cfg)
    m = res.manifest
    seed = m["timings"]["per_seed"]["0"]
    return {"tokens": m["tokens"], "seeds_s": m["timings"]["seeds_s"],
            "load_s": m["timings"]["load_s"], "tok_s": m["tokens"] / m["timings"]["seeds_s"],
            "peak_gib": _peak(args.device), "chunk_tokens": m["chunk_tokens"],
            "stages_s": {k: v for k, v in seed.items() if k != "total_s"}}


def report(params: int, size: Size, ratio: dict, rep: dict, smoke: bool) -> None:
    gib = lambda x: "n/a (CPU)" if x is None else f"{x:.2f} GiB"  # noqa: E731
    masks = sum(k.startswith("update_") for k in rep["stages_s"])
    print(f"model: random Qwen3, {params / 1e6:,.1f} M parameters, vocab {size.vocab:,}, "
          f"hidden {size.hidden}, {size.layers} layers; log {size.samples} x "
          f"{size.response} = {size.samples * size.response:,} response tokens"
          + ("  [SMOKE: figures mean nothing]" if smoke else ""))
    print(f"recompute pass: {ratio['recompute_tok_s']:,.0f} tok/s, "
          f"peak {gib(ratio['recompute_peak_gib'])} (chunk {ratio['chunk_tokens']} tokens)")
    print(f"plain forward : {ratio['plain_tok_s']:,.0f} tok/s, peak {gib(ratio['plain_peak_gib'])}")
    print(f"ratio recompute / plain forward: {ratio['ratio']:.2f}x "
          f"(throughput {100 / ratio['ratio']:.0f}% of the plain forward's)")
    print(f"exact-KL pass (behavior hidden + both heads): {ratio['exact_s']:.3f} s = "
          f"{ratio['exact_vs_recompute']:.2f}x the recompute pass, "
          f"peak {gib(ratio['exact_peak_gib'])}")
    print(f"full replay: {rep['tokens']:,} loss tokens in {rep['seeds_s']:.1f} s = "
          f"{rep['tok_s']:,.0f} tok/s (pre pass + {masks} update masks), "
          f"peak {gib(rep['peak_gib'])}, chunk {rep['chunk_tokens']}")
    print(f"full replay seed loop = {rep['seeds_s'] / ratio['plain_s']:.1f} plain forwards")
    for k, v in rep["stages_s"].items():
        print(f"  {k}: {v:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model and log (CPU check)")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-size", type=int, default=None, help="default: every sample")
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--chunk-tokens", type=int, default=None, help="default: automatic")
    ap.add_argument("--update-masks", default="none,dppo_topk_kl,pdm_kl_agg")
    ap.add_argument("--attribution", action="store_true", help="also the attribution pass")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    size = SMOKE if args.smoke else FULL
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    args.batch_size = args.batch_size or size.samples
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --smoke for the CPU check")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        params = build_checkpoint(size, tmp / "ckpt", args.device)
        log = write_log(size, tmp / "log.parquet")
        print(f"setup {time.perf_counter() - t0:.1f} s", flush=True)
        ratio = pass_ratio(tmp / "ckpt", log, args)
        if torch.device(args.device).type == "cuda":
            torch.cuda.empty_cache()  # the replay below measures free memory for its chunk
        rep = full_replay(tmp / "ckpt", log, tmp / "run", args)
    report(params, size, ratio, rep, args.smoke)
    if args.json:
        args.json.write_text(json.dumps({"params": params, "size": size.__dict__,
                                         "pass": ratio, "replay": rep}, indent=2))


if __name__ == "__main__":
    main()
