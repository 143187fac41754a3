"""Attribution benchmark: every figure is a ratio against a baseline measured in the same run.

1. Linear term (forward-mode JVP along Δθ, every token) vs the plain post-update forward
   (``forward_stats``: decoder + chunked LM-head statistics, the pass replay runs after
   every simulated step), on the same micro-batches (target <= 3x).
2. Self term: per-token gradient inner products ``⟨∇D_t, ∇log π_k,t⟩`` per sampled token,
   grouped (``vmap`` over the sequence's ``vjp``) and looped (one pair of gradients at a
   time), as seconds per token and as a multiple of the plain forward of the whole batch.
3. Whole replay (``run_replay``, SGD, 7 update masks) with and without attribution.

Models: the shipped ``sample_data/`` checkpoint θ_8 (hidden 64, 2 layers, vocabulary 4,103)
and a random-init Qwen3 (hidden 256, 4 layers, vocabulary 32,768) on a synthetic log;
nothing is downloaded. CPU only.

Usage: ``python benchmarks/bench_attribution.py [--threads 2] [--repeats 5] [--skip-replay]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import torch

from pdm_replay.testing.fixtures import write_synthetic_log
from pdm_replay.replay.attribution_pass import sample_dots
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.forward import forward_stats
from pdm_replay.replay.probe import ProbedStep, probe_step
from pdm_replay.commands.replay import run_replay

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import best_of_alternating, qwen3  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def linear_vs_forward(s: ProbedStep, repeats: int) -> dict:
    plain = lambda: forward_stats(s.policy, s.batches, s.pre.support, s.cfg)  # noqa: E731
    linear = lambda: s.attr.linear(s.delta)  # noqa: E731
    plain(), linear()  # warm-up
    t_plain, t_lin = best_of_alternating([plain, linear], repeats)
    return {"tokens": s.n, "plain_forward_s": t_plain, "linear_s": t_lin,
            "ratio": t_lin / t_plain}


def self_cost(s: ProbedStep, tokens: int, t_plain: float, repeats: int) -> dict:
    attr = s.attr
    adv = attr.advantage
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(np.flatnonzero(adv.numpy() != 0), tokens, replace=False))
    out = {"tokens": int(sample.size)}
    modes = (("grouped", 2 ** 30), ("loop", 1))
    run = lambda memory: lambda: sample_dots(  # noqa: E731
        attr.tangent, s.batches, attr.weights, sample, adv, memory)
    times = best_of_alternating([run(memory) for _, memory in modes], repeats)
    for (mode, _), t in zip(modes, times):
        per = t / sample.size
        out[f"{mode}_s_per_token"] = per
        out[f"{mode}_per_token_vs_batch_forward"] = per / t_plain
    return out


def replay_overhead(ckpt: Path, log: Path, tmp: Path, batch: int) -> dict:
    """Per-seed wall time of a 2-seed SGD replay with and without attribution (best seed)."""
    out = {}
    for on in (False, True):
        res = run_replay(ReplayConfig(log=log, checkpoint=ckpt, out=tmp / f"run_{on}", seeds=2,
                                      batch_size=batch, optimizer="sgd", lr=1e-3,
                                      attribution=on, attribution_sample=32))
        per_seed = res.manifest["timings"]["per_seed"].values()
        out["with" if on else "without"] = min(t["total_s"] for t in per_seed)
        if on:
            out["setup_s"] = min(t["attribution_setup_s"] for t in per_seed)
            none = pl.read_parquet(res.run_dir / "updates").filter(
                pl.col("update_mask") == "none")
            out["sampled_per_seed"] = none["delta_kl_self"].is_not_null().sum() / 2
        out["tokens_per_seed"] = res.manifest["tokens"] // 2
    out["ratio"] = out["with"] / out["without"]
    return out


def run_case(name: str, ckpt: Path, log: Path, args, samples: int, chunk: int) -> dict:
    s = probe_step(ckpt, log, samples=samples, micro_batch=4, chunk_tokens=chunk, lr=1e-3)
    lin = linear_vs_forward(s, args.repeats)
    own = self_cost(s, args.self_tokens, lin["plain_forward_s"], max(1, args.repeats // 5))
    whole = {}
    if not args.skip_replay:
        with tempfile.TemporaryDirectory() as tmp:
            whole = replay_overhead(ckpt, log, Path(tmp), samples)
    return {"case": name, "linear": lin, "self": own, "replay": whole}


def report(r: dict) -> None:
    lin, own, whole = r["linear"], r["self"], r["replay"]
    print(f"## attribution: {r['case']}")
    print(f"linear term (JVP, {lin['tokens']} tokens): plain post-update forward "
          f"{lin['plain_forward_s']:.3f} s, linear {lin['linear_s']:.3f} s, "
          f"ratio {lin['ratio']:.2f}x")
    for mode in ("grouped", "loop"):
        print(f"self term, {mode}: {own[f'{mode}_s_per_token'] * 1e3:.1f} ms per sampled token"
              f" = {own[f'{mode}_per_token_vs_batch_forward']:.2f}x the batch's plain forward"
              f" ({own['tokens']} tokens)")
    if whole:
        print(f"replay per seed ({whole['tokens_per_seed']} tokens, 7 SGD updates): without "
              f"{whole['without']:.2f} s, with {whole['with']:.2f} s (self term on "
              f"{whole['sampled_per_seed']:.0f} sampled tokens: {whole['setup_s']:.2f} s), "
              f"ratio {whole['ratio']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--self-tokens", type=int, default=16)
    ap.add_argument("--skip-replay", action="store_true",
                    help="skip part 3 (whole replays with and without attribution)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = [run_case("sample_data (hidden 64, 2 layers, vocab 4,103)",
                        SAMPLE / "checkpoints" / "step_8",
                        SAMPLE / "rollouts", args, samples=16, chunk=1024)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        vocab = 32768
        qwen3(vocab, hidden=256, layers=4, inter=768).save_pretrained(tmp / "ckpt")
        log = write_synthetic_log(tmp / "log.parquet", n_samples=8, response_len=128,
                                  prompt_len=16, vocab_size=vocab, top_k=20)
        results.append(run_case("random Qwen3 (hidden 256, 4 layers, vocab 32,768)",
                                tmp / "ckpt", log, args, samples=4, chunk=1024))
    for r in results:
        report(r)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
