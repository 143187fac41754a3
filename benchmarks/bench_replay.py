"""Replay benchmark: every figure is a ratio against a baseline measured in the same run.

1. Time: the recompute pass (decoder + chunked LM-head statistics at the logged supports)
   vs a plain ``model(input_ids).logits`` forward on the same padded batch (target <= 1.3x).
2. Peak memory, vocabulary 151,936 on 8,192 response tokens with a tiny body: the recompute
   pass vs the plain forward that materialises the full fp32 logits tensor. Each side runs
   in its own subprocess; the figure is the growth of peak RSS over the RSS after setup.
3. Cost of each extra update mask relative to the first, from one replay run, and of the
   actual update (``--next-checkpoint``: one forward of θ_{t+1} over the logged supports)
   relative to the shared pre-update pass of the same run (target: at most one extra
   forward); without attribution in a second run, where the actual update is that forward
   alone.

4. ``--qwen3-0.6b`` (issue 20), a random Qwen3 of the Qwen3-0.6B shape (hidden 1,024,
   28 layers, 16/8 heads, MLP 3,072, vocabulary 151,936, tied embeddings) on one small
   batch (2 samples x (16 prompt + 48 response) tokens): the recompute pass vs a plain
   forward (target <= 1.15x); each extra update mask of one replay (SGD, no attribution;
   best of 3 seeds of the same shapes) vs forward + backward + forward of the same batch
   measured in the same run (best of 4 warm calls, 2 before and 2 after the replay;
   target <= 1.1x), under glibc's default malloc and, strictly, with freed memory reused as
   the replay reuses it (``pdm_replay.heap``; ``--no-heap-reuse``: the replay without);
   and the recompute pass's peak memory at vocabularies 32,768 and 151,936 with the same chunk, minus the chunk term (target: independent of the vocabulary).

Usage: ``python benchmarks/bench_replay.py [--threads 2] [--skip-full-logits]
[--updates-only] [--qwen3-0.6b [--no-heap-reuse] [--smoke]]``
Random-init Qwen3 models (nothing is downloaded); CPU only. Idle OpenMP threads sleep
(``pdm_replay.threads.apply_wait_policy``, before torch loads) as under ``pdm-replay
replay``: the figures are what the CLI gets, and a shared machine's load moves them less.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pdm_replay.threads import apply_wait_policy

apply_wait_policy()  # before torch loads libgomp, which reads the policy once

import torch  # noqa: E402

from pdm_replay.testing.fixtures import write_synthetic_log
from pdm_replay.heap import reuse_freed_memory
from pdm_replay.math.support import build_support
from pdm_replay.replay.batching import micro_batches, pad_batch
from pdm_replay.replay.checkpoint import Policy, make_head
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import PassConfig, forward_stats
from pdm_replay.commands.replay import run_replay

GiB = 1024 ** 3


def qwen3(vocab: int, hidden: int, layers: int, inter: int, real: bool = False):
    """A random Qwen3; ``real``: the Qwen3-0.6B head layout (16 heads of 128, 8 KV heads,
    tied embeddings) instead of 32-wide heads."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    heads = dict(num_attention_heads=16, num_key_value_heads=8, head_dim=128) if real else \
        dict(num_attention_heads=max(hidden // 32, 1), num_key_value_heads=max(hidden // 64, 1),
             head_dim=32)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, max_position_embeddings=4096,
                      tie_word_embeddings=real, **heads)
    torch.manual_seed(0)
    return Qwen3ForCausalLM(cfg).eval()


def make_batch(vocab: int, samples: int, prompt: int, response: int, k: int = 20):
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab, (samples, prompt), generator=g).tolist()
    responses = torch.randint(0, vocab, (samples, response), generator=g).tolist()
    batch = pad_batch(prompts, responses)
    n = batch.n_tokens
    support = build_support(torch.tensor(sum(responses, [])),
                            torch.randint(0, vocab, (n, k), generator=g))
    return batch, support


def policy_of(model) -> Policy:
    return Policy(model=model, head=make_head(model), vocab_size=model.config.vocab_size,
                  source=Path("."))


def best_of_alternating(fns: list, repeats: int) -> list[float]:
    """Minimum wall time of each function, run in turns so load changes hit all alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best


@torch.no_grad()
def time_ratio(vocab: int, repeats: int, chunk: int) -> dict:
    model = qwen3(vocab, hidden=256, layers=4, inter=768)
    batch, support = make_batch(vocab, samples=8, prompt=16, response=240)
    policy = policy_of(model)
    plain = lambda: model(input_ids=batch.input_ids,  # noqa: E731
                          attention_mask=batch.attention_mask).logits
    recompute = lambda: forward_stats(policy, [batch], support,  # noqa: E731
                                      PassConfig(chunk_tokens=chunk))
    plain(), recompute()  # warm-up
    t_plain, t_re = best_of_alternating([plain, recompute], repeats)
    return {"vocab": vocab, "tokens": int(batch.input_ids.numel()),
            "response_tokens": batch.n_tokens, "plain_forward_s": t_plain,
            "recompute_s": t_re, "ratio": t_re / t_plain}


def _status_bytes(key: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process, in bytes.

    ``VmHWM`` belongs to this process image; ``ru_maxrss`` would carry the parent's peak
    across fork + exec.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


@torch.no_grad()
def memory_child(mode: str, chunk: int, vocab: int = 151_936) -> dict:
    """One side of the memory comparison; runs in a fresh process."""
    tokens = 8192
    model = qwen3(vocab, hidden=64, layers=1, inter=128)
    batch, support = make_batch(vocab, samples=8, prompt=1, response=tokens // 8)
    policy = policy_of(model)
    base, setup_peak = _status_bytes("VmRSS"), _status_bytes("VmHWM")
    if mode == "recompute":
        forward_stats(policy, [batch], support, PassConfig(chunk_tokens=chunk))
    else:
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    peak = _status_bytes("VmHWM")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"mode": mode, "tokens": batch.n_tokens, "peak_growth": peak - base,
            "setup_peak_above_base": setup_peak - base, "model_bytes": params,
            "hidden_bytes": batch.n_tokens * 64 * 4, "chunk_bytes": chunk * vocab * 4,
            "full_logits_bytes": int(batch.input_ids.numel()) * vocab * 4}


def _memory_run(mode: str, chunk: int, threads: int, vocab: int) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", mode, "--chunk", str(chunk),
                          "--threads", str(threads), "--vocab", str(vocab)],
                         capture_output=True, text=True, check=True)
    return {"vocab": vocab, **json.loads(res.stdout.strip().splitlines()[-1])}


def memory(chunk: int, skip_full: bool, threads: int) -> list[dict]:
    return [_memory_run(mode, chunk, threads, 151_936)
            for mode in ("recompute",) + (() if skip_full else ("full",))]


def memory_by_vocab(chunk: int, threads: int) -> list[dict]:
    """Recompute-pass peak growth at two vocabularies, and that growth minus the chunk."""
    out = []
    for vocab in (32768, 151_936):
        m = _memory_run("recompute", chunk, threads, vocab)
        out.append({**m, "growth_minus_chunk": m["peak_growth"] - m["chunk_bytes"]})
    return out


def _checkpoints(tmp: Path, vocab: int) -> tuple[Path, Path]:
    """θ_t and a θ_{t+1} one small random step away (the cost does not depend on it)."""
    model = qwen3(vocab, hidden=256, layers=4, inter=768)
    model.save_pretrained(tmp / "ckpt")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=1e-3)
    model.save_pretrained(tmp / "next")
    return tmp / "ckpt", tmp / "next"


def _best(res, key: str) -> float:
    # Best of the seeds (same shapes): on a shared machine the minimum is the cost.
    return min(t[key] for t in res.manifest["timings"]["per_seed"].values())


def mask_cost(tmp: Path) -> dict:
    vocab = 32768
    ckpt, nxt = _checkpoints(tmp, vocab)
    log = write_synthetic_log(tmp / "log.parquet", n_samples=12, response_len=128,
                              prompt_len=16, vocab_size=vocab, top_k=20)
    common = dict(log=log, checkpoint=ckpt, next_checkpoint=nxt, trainer_mask="none",
                  seeds=3, batch_size=4, optimizer="adam", lr=1e-4)
    res = run_replay(ReplayConfig(out=tmp / "run", **common))
    masks = res.manifest["config"]["update_masks"]
    per_mask = [_best(res, f"update_{m}_s") for m in masks]
    pre = _best(res, "read_and_pre_s")
    plain = run_replay(ReplayConfig(out=tmp / "plain", update_masks=("none",),
                                    attribution=False, **common))
    return {"pre_pass_s": pre, "masks": masks, "per_mask_s": per_mask,
            "relative_to_first": [t / per_mask[0] for t in per_mask],
            "extra_vs_pre_plus_first": sum(per_mask[1:]) / (len(masks) - 1)
            / (pre + per_mask[0]), "tokens_per_seed": res.manifest["tokens"] // 3,
            "actual_s": _best(res, "update_actual_s"),
            "actual_vs_pre": _best(res, "update_actual_s") / pre,
            "plain_pre_s": _best(plain, "read_and_pre_s"),
            "plain_actual_s": _best(plain, "update_actual_s"),
            "plain_actual_vs_pre": _best(plain, "update_actual_s")
            / _best(plain, "read_and_pre_s")}


REAL = dict(vocab=151_936, hidden=1024, layers=28, inter=3072)  # Qwen3-0.6B's config.json
SMOKE = dict(vocab=4096, hidden=128, layers=2, inter=256)  # --smoke: the same code, seconds
REAL_MASKS = ("none", "dppo_topk_kl", "pdm_kl_agg")


def _fwd_bwd_fwd(model, batches) -> None:
    """The baseline of one update: forward with gradient on the full logits, a token
    log-likelihood loss, backward, then a no-grad forward (what a post-update pass is)."""
    for b in batches:
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1)
        logp.gather(-1, b.input_ids[:, 1:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        for b in batches:
            model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits


def _timed(fn) -> tuple[float, float]:
    """Wall and CPU seconds (all threads of this process) of one call of ``fn``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


@contextlib.contextmanager
def _update_cpu_seconds():
    """CPU seconds of each simulated update of a replay, in mask order. CPU time is steadier
    than wall time on a shared machine: idle OpenMP threads sleep (``apply_wait_policy``),
    so time slices lost to other processes do not count, where they stretch wall time."""
    from pdm_replay.commands.replay_steps import Updates
    seconds, simulate = [], Updates.simulate

    def timed(*args, **kwargs):
        cpu = time.process_time()
        try:
            return simulate(*args, **kwargs)
        finally:
            seconds.append(time.process_time() - cpu)
    Updates.simulate = timed
    try:
        yield seconds
    finally:
        Updates.simulate = simulate


REAL_SEEDS = 3  # per mask: best of 3 seeds of the same shapes, as the baseline is best of 4


def _fbf_best(model, batches, runs: int) -> dict[bool, tuple[list[float], list[float]]]:
    """Wall and CPU seconds of ``runs`` baseline calls under glibc's default malloc (False)
    and with freed memory kept for reuse as the replay keeps it (True, pdm_replay.heap)."""
    out = {}
    for reuse in (False, True):
        with reuse_freed_memory(reuse):
            times = [_timed(lambda: _fwd_bwd_fwd(model, batches)) for _ in range(runs)]
        out[reuse] = [w for w, _ in times], [c for _, c in times]
    return out


def real_size(tmp: Path, repeats: int, chunk: int, heap_reuse: bool,
              shape: dict = REAL) -> dict:
    """Section 4: the Qwen3-0.6B shape; every ratio within this one call. Both sides of the
    update ratio are best-of-N of warm calls (the first backward of a process, and the first
    update of a replay, pay one-time costs: the autograd threads, fresh gradient pages)."""
    model = qwen3(**shape, real=True)
    log = write_synthetic_log(tmp / "log.parquet", n_samples=2 * REAL_SEEDS, response_len=48,
                              prompt_len=16, vocab_size=shape["vocab"], top_k=20)
    sb = seed_batch(LogIndex.of(RolloutLog.open(log)), 2, 0, shape["vocab"])
    batches = micro_batches(sb.prompts, sb.responses, 2)  # the replay's own micro-batch
    support = build_support(torch.from_numpy(sb.flat.token_id),
                            torch.from_numpy(sb.flat.topk_ids))
    policy = policy_of(model)
    with torch.no_grad():
        plain = lambda: [model(input_ids=b.input_ids,  # noqa: E731
                               attention_mask=b.attention_mask).logits for b in batches]
        recompute = lambda: forward_stats(policy, batches, support,  # noqa: E731
                                          PassConfig(chunk_tokens=chunk))
        plain(), recompute()  # warm-up
        t_plain, t_re = best_of_alternating([plain, recompute], repeats)
    model.save_pretrained(tmp / "ckpt")
    _fwd_bwd_fwd(model, batches)  # warm-up
    # The baseline brackets the replay (before and after it, same process and batch), so a
    # change of the shared machine's load during the replay shows as a before/after gap.
    before = _fbf_best(model, batches, 2)
    with _update_cpu_seconds() as update_cpu:
        res = run_replay(ReplayConfig(log=log, checkpoint=tmp / "ckpt", out=tmp / "run",
                                      seeds=REAL_SEEDS, batch_size=2, micro_batch_size=2,
                                      optimizer="sgd", lr=1e-4, attribution=False,
                                      update_masks=REAL_MASKS, chunk_tokens=chunk,
                                      heap_reuse=heap_reuse))
    after = _fbf_best(model, batches, 2)
    # the baseline: default malloc; "reuse": the strict one, with the replay's heap setting
    t_fbf, cpu_fbf = (min(before[False][i] + after[False][i]) for i in (0, 1))
    t_reuse, cpu_reuse = (min(before[True][i] + after[True][i]) for i in (0, 1))
    per_mask = [_best(res, f"update_{m}_s") for m in REAL_MASKS]
    n = len(REAL_MASKS)  # update_cpu: seed by seed, masks in order
    mask_cpu = [min(update_cpu[i::n]) for i in range(n)]
    return {"shape": shape, "fwd_bwd_fwd_cpu_s": cpu_fbf, "per_mask_cpu_s": mask_cpu,
            "extra_mask_cpu_vs_fwd_bwd_fwd": [t / cpu_fbf for t in mask_cpu[1:]],
            "fwd_bwd_fwd_before_s": before[False][0], "fwd_bwd_fwd_after_s": after[False][0],
            "fwd_bwd_fwd_reuse_s": t_reuse, "fwd_bwd_fwd_reuse_cpu_s": cpu_reuse,
            "heap": {k: res.manifest["threads"][k] for k in ("heap_reuse", "heap_reason")},
            "seeds_s": res.manifest["timings"]["seeds_s"], "per_seed_s": [
                t["total_s"] for t in res.manifest["timings"]["per_seed"].values()],
            "tokens": int(sum(b.input_ids.numel() for b in batches)), "seeds": REAL_SEEDS,
            "response_tokens": len(sb.flat), "plain_forward_s": t_plain, "recompute_s": t_re,
            "recompute_ratio": t_re / t_plain, "fwd_bwd_fwd_s": t_fbf,
            "pre_pass_s": _best(res, "read_and_pre_s"), "masks": list(REAL_MASKS),
            "per_mask_s": per_mask, "extra_mask_vs_fwd_bwd_fwd": [t / t_fbf for t in per_mask[1:]]}


def report_real(r: dict, mem: list[dict]) -> None:
    shape = r["shape"]
    print(f"## replay, Qwen3 of hidden {shape['hidden']}, {shape['layers']} layers, vocabulary "
          f"{shape['vocab']:,}: {r['tokens']} tokens ({r['response_tokens']} response)")
    print(f"plain forward {r['plain_forward_s']:.2f} s  recompute {r['recompute_s']:.2f} s  "
          f"ratio {r['recompute_ratio']:.3f}x (target <= 1.15)")
    runs = lambda ts: " / ".join(f"{t:.2f}" for t in ts)  # noqa: E731
    print(f"forward + backward + forward, best of 4: {r['fwd_bwd_fwd_s']:.2f} s (before the "
          f"replay {runs(r['fwd_bwd_fwd_before_s'])} s, after {runs(r['fwd_bwd_fwd_after_s'])}"
          f" s); pre pass {r['pre_pass_s']:.2f} s; each update: best of {r['seeds']} seeds")
    print(f"CPU seconds (all threads): forward + backward + forward {r['fwd_bwd_fwd_cpu_s']:.2f} s")
    print(f"with freed memory reused (pdm_replay.heap): {r['fwd_bwd_fwd_reuse_s']:.2f} s, CPU "
          f"{r['fwd_bwd_fwd_reuse_cpu_s']:.2f} s; the replay: {r['heap']}")
    print(f"the replay's seed loop {r['seeds_s']:.2f} s (per seed "
          f"{runs(r['per_seed_s'])} s)")
    for name, s, c in zip(r["masks"], r["per_mask_s"], r["per_mask_cpu_s"]):
        print(f"{name:>15}: {s:.2f} s = {s / r['fwd_bwd_fwd_s']:.3f}x fwd+bwd+fwd "
              f"({s / r['fwd_bwd_fwd_reuse_s']:.3f}x reused); CPU {c:.2f} s = "
              f"{c / r['fwd_bwd_fwd_cpu_s']:.3f}x ({c / r['fwd_bwd_fwd_reuse_cpu_s']:.3f}x)")
    for m in mem:
        print(f"vocab {m['vocab']:>7}: recompute peak growth {m['peak_growth'] / GiB:.3f} GiB, "
              f"chunk {m['chunk_bytes'] / GiB:.3f} GiB, growth - chunk "
              f"{m['growth_minus_chunk'] / GiB:.3f} GiB")


def report(times: list[dict], mem: list[dict], masks: dict) -> None:
    if times:
        print("## replay: recompute pass vs plain model(input_ids).logits (same batch)")
    for t in times:
        print(f"vocab {t['vocab']:>7}: {t['tokens']} tokens ({t['response_tokens']} response)"
              f"  plain {t['plain_forward_s']:.3f} s  recompute {t['recompute_s']:.3f} s"
              f"  ratio {t['ratio']:.2f}x")
    if mem:
        print("## replay: peak memory, vocab 151,936, 8,192 response tokens, tiny body")
    for m in mem:
        print(f"{m['mode']:>9}: peak RSS growth {m['peak_growth'] / GiB:.3f} GiB "
              f"(model {m['model_bytes'] / GiB:.3f}, hidden {m['hidden_bytes'] / GiB:.4f}, "
              f"one chunk {m['chunk_bytes'] / GiB:.3f}, full fp32 logits "
              f"{m['full_logits_bytes'] / GiB:.2f} GiB = {m['full_logits_bytes'] / 1e9:.2f} GB)")
    print(f"## replay: cost per update mask ({masks['tokens_per_seed']} tokens per seed, "
          f"shared pre pass {masks['pre_pass_s']:.2f} s)")
    for name, s, rel in zip(masks["masks"], masks["per_mask_s"], masks["relative_to_first"]):
        print(f"{name:>15}: {s:.2f} s  {rel:.2f}x the first")
    print(f"mean extra mask: {masks['extra_vs_pre_plus_first']:.2f}x (pre pass + first mask)")
    print(f"{'actual':>15}: {masks['actual_s']:.2f} s  {masks['actual_vs_pre']:.2f}x the pre "
          f"pass (with its attribution pass, as by default)")
    print(f"{'actual':>15}: {masks['plain_actual_s']:.2f} s  {masks['plain_actual_vs_pre']:.2f}x "
          f"the pre pass of the same run ({masks['plain_pre_s']:.2f} s; --no-attribution)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--skip-full-logits", action="store_true",
                    help="do not run the 5 GB full-logits baseline")
    ap.add_argument("--updates-only", action="store_true",
                    help="only section 3: the update masks' and the actual update's cost")
    ap.add_argument("--qwen3-0.6b", dest="real", action="store_true",
                    help="only section 4: the Qwen3-0.6B shape (about 10 GB of RAM, "
                    "10-20 minutes on 2 cores)")
    ap.add_argument("--smoke", action="store_true", help="with --qwen3-0.6b: a tiny shape "
                    "and no memory children (seconds; the test suite runs it so it cannot rot)")
    ap.add_argument("--no-heap-reuse", action="store_true",
                    help="section 4's replay with --no-heap-reuse (glibc's default malloc)")
    ap.add_argument("--child", choices=["recompute", "full"], help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, default=151_936, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(memory_child(args.child, args.chunk, args.vocab)))
        return
    if args.real:
        mem = [] if args.smoke else memory_by_vocab(args.chunk, args.threads)
        with tempfile.TemporaryDirectory() as tmp:
            real = real_size(Path(tmp), args.repeats, args.chunk, not args.no_heap_reuse,
                             SMOKE if args.smoke else REAL)
        report_real(real, mem)
        print(json.dumps({"real": real, "memory_by_vocab": mem}, default=str))
        return
    if args.updates_only:
        with tempfile.TemporaryDirectory() as tmp:
            masks = mask_cost(Path(tmp))
        report([], [], masks)
        print(json.dumps({"masks": masks}, default=str))
        return
    mem = memory(args.chunk, args.skip_full_logits, args.threads)  # first: a lean parent
    times = [time_ratio(v, args.repeats, args.chunk) for v in (32768, 151_936)]
    with tempfile.TemporaryDirectory() as tmp:
        masks = mask_cost(Path(tmp))
    report(times, mem, masks)
    print(json.dumps({"time": times, "memory": mem, "masks": masks}, default=str))


if __name__ == "__main__":
    main()
