"""Replay orchestration (SPEC §6): load, check, then for each seed recompute π, decide the
masks, simulate one step per update mask, and write the seed's parts.

Every check that can fail on the inputs (checkpoint files, vocabulary, tokenizer, prompt
ids, token ranges, an existing run directory) runs before the run directory is created.
A seed's results depend only on the seed and the configuration, so a resumed run equals
an uninterrupted one.

Examples
--------
>>> import pathlib, tempfile
>>> from pdm_replay.replay.config import OPERATIONAL, ReplayConfig
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> try:
...     run_replay(ReplayConfig(log=d / "missing.parquet", checkpoint=d, out=d / "run"))
... except ValueError as exc:
...     print(str(exc).split(": ", 1)[1])
no config.json; pass a save_pretrained directory
>>> (d / "run").exists()
False
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl
import pyarrow as pa
import torch

from pdm_replay.io.atomic import write_table_atomic
from pdm_replay.io.reader import read_meta
from pdm_replay.masks import Mask, apply_masks, build_masks
from pdm_replay.replay import manifest as mf
from pdm_replay.replay.attribution import SeedAttribution, seed_attribution
from pdm_replay.replay.batching import PaddedBatch, micro_batches
from pdm_replay.replay.checkpoint import (DTYPES, Policy, check_checkpoint_dir, check_compatible,
                                          load_policy)
from pdm_replay.replay.config import OPERATIONAL, ReplayConfig
from pdm_replay.replay.data import LogIndex, check_replayable, seed_batch
from pdm_replay.replay.distributed import (LOCAL, Dist, check_world, finish_seed, lockstep,
                                           shard_seed_batch)
from pdm_replay.replay.forward import (LossInputs, PassConfig, accumulate_gradients,
                                       behaviour_hidden, forward_stats)
from pdm_replay.replay.fsdp import shard_policy
from pdm_replay.replay.gpu import auto_chunk_tokens
from pdm_replay.replay.step import GradReduce, ParamSnapshot, simulated_step
from pdm_replay.replay.summary import Alignment, alignment_summary
from pdm_replay.replay.tables import (PreUpdate, log_support, post_columns, pre_update,
                                      tokens_part, updates_part)
from pdm_replay.schema import RolloutMeta

Progress = Callable[[int, int, float], None]  # (stages done, stages total, tokens/s)


@dataclass
class Context:
    """What every seed shares: config, models, the log index, the parameter snapshot."""

    cfg: ReplayConfig
    meta: RolloutMeta
    policy: Policy
    behaviour: Policy | None
    index: LogIndex
    layout: mf.RunLayout
    record_masks: dict[str, Mask]
    update_masks: dict[str, Mask]
    snapshot: ParamSnapshot
    grad_reduce: GradReduce | None = None
    pass_cfg: PassConfig = field(default_factory=PassConfig)
    dist: Dist = LOCAL  # this process's rank under torchrun (replay.distributed)


@dataclass(frozen=True)
class ReplayResult:
    run_dir: Path
    manifest: dict
    summary: list[Alignment]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _device_info(device: str) -> dict:
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: CUDA is not available on this machine")
        name = torch.cuda.get_device_name(dev)
    else:
        import platform
        name = platform.processor() or platform.machine()
    return {"device": device, "name": name, "torch_threads": torch.get_num_threads()}


def _warnings(cfg: ReplayConfig, meta: RolloutMeta) -> list[str]:
    out = []
    if meta.truncated_sampler:
        out.append(f"the sampler truncated (top_p={meta.top_p}, top_k={meta.top_k_sampling}):"
                   " the logged µ tail is not the model's tail")
    if meta.logprobs_mode == "processed":
        out.append("logprobs_mode=processed: logged µ are post-processing log-probs")
    if cfg.dtype != "float32":
        out.append(f"the simulated step updates {cfg.dtype} weights: steps below the "
                   f"{cfg.dtype} resolution vanish; use --dtype float32 for faithful ΔD")
    if cfg.attribution and cfg.fsdp:
        out.append("--fsdp: the attribution columns (delta_kl_lin ...) stay null: their "
                   "forward-mode pass needs the unsharded model")
    return out


def _check_run_dir(cfg: ReplayConfig, hashes: dict) -> mf.RunLayout:
    layout = mf.RunLayout(cfg.out)
    if not cfg.out.exists():
        return layout
    if not cfg.resume:
        raise ValueError(f"{cfg.out}: run directory exists; pass --resume to continue it or "
                         "choose a new --out")
    old = mf.read_manifest(layout)
    before, now = old.get("config", {}), cfg.result_affecting()
    differ = sorted(k for k in set(before) | set(now)
                    if k not in OPERATIONAL and before.get(k) != now.get(k))
    differ += [f"{k} (content)" for k in hashes if old.get("hashes", {}).get(k) != hashes[k]]
    if differ:
        raise ValueError(f"{cfg.out}: --resume with different inputs ({', '.join(differ)}); "
                         "resume with the original options or choose a new --out")
    return layout


def behaviour_dtype(cfg: ReplayConfig, meta: RolloutMeta) -> str:
    """dtype for the behaviour model: ``--behavior-dtype``, else the footer's
    ``behavior_dtype`` (the engine's precision: exact µ must be the distribution sampled
    from; a bf16 engine and a float32 reload differ by far more than the top-K interval
    widths), else ``--dtype``."""
    footer = meta.extra.get("behavior_dtype")
    return cfg.behavior_dtype or (footer if footer in DTYPES else cfg.dtype)


def _load(cfg: ReplayConfig) -> tuple[RolloutMeta, Policy, Policy | None, LogIndex]:
    for path in (cfg.checkpoint, cfg.behavior_checkpoint):
        if path is not None:
            check_checkpoint_dir(path, allow_pickle=cfg.allow_pickle,
                                 trust_remote_code=cfg.trust_remote_code)
    meta = read_meta(cfg.log)
    if meta.temperature is not None and meta.temperature <= 0:
        raise ValueError(f"{cfg.log}: footer temperature={meta.temperature}; replay needs the "
                         "sampling temperature (> 0) that µ was sampled at")
    load = lambda p, dtype: load_policy(p, dtype=dtype, device=cfg.device,  # noqa: E731
                                        allow_pickle=cfg.allow_pickle,
                                        trust_remote_code=cfg.trust_remote_code)
    policy = load(cfg.checkpoint, cfg.dtype)
    check_compatible(policy, meta, cfg.log, cfg.tokenizer_check)
    behaviour = None
    if cfg.behavior_checkpoint is not None:
        behaviour = load(cfg.behavior_checkpoint, behaviour_dtype(cfg, meta))
        check_compatible(behaviour, meta, cfg.log, cfg.tokenizer_check)
        behaviour.model.requires_grad_(False)
    index = check_replayable(cfg.log, policy.vocab_size)
    return meta, policy, behaviour, index


def _simulate(ctx: Context, keep: torch.Tensor, pre: PreUpdate,
              batches: list[PaddedBatch], inputs: LossInputs, loss_mask: torch.Tensor,
              mu_hidden: list[torch.Tensor] | None,
              attr: SeedAttribution | None = None) -> dict[str, torch.Tensor | pa.Array]:
    """One update mask: step, post-update statistics, restore. Returns updates columns."""
    weight = (keep & loss_mask).double()
    # Every loss token of the global batch (all ranks): a mask never changes the normaliser.
    n_tokens = ctx.dist.sum_int(int(loss_mask.sum()))
    params = ctx.snapshot.params
    post, delta = simulated_step(
        params, ctx.snapshot,
        lambda: accumulate_gradients(ctx.policy, batches, inputs, weight, n_tokens,
                                     ctx.pass_cfg),
        optimizer=ctx.cfg.optimizer, lr=ctx.cfg.lr, grad_reduce=ctx.grad_reduce,
        measure=lambda snap: (forward_stats(ctx.policy, batches, pre.support, ctx.pass_cfg,
                                            ctx.behaviour, mu_hidden),
                              snap.delta() if attr else None))
    cols = post_columns(pre, post)
    if attr is not None:  # Δθ kept past the restore: the linear term is taken at θ
        cols.update(attr.columns(delta, cols["delta_kl_topk"], weight, n_tokens))
    return cols


def _deviation(logp_k: torch.Tensor, train: np.ndarray | None, sel: np.ndarray) -> dict:
    if train is None or not sel.any():
        return {"max": None, "sum": 0.0, "count": 0}
    diff = np.abs(logp_k.numpy()[sel] - train[sel])
    return {"max": float(diff.max()), "sum": float(diff.sum()), "count": int(sel.sum())}


def replay_seed(ctx: Context, seed: int, tick: Callable[[int], None]) -> dict:
    """Replay one seed and write its parts and done marker; returns the marker record."""
    t0 = time.perf_counter()
    sb = shard_seed_batch(seed_batch(ctx.index, ctx.cfg.batch_size, seed,
                                     ctx.policy.vocab_size), ctx.dist)
    flat = sb.flat
    batches = lockstep(micro_batches(sb.prompts, sb.responses, ctx.cfg.micro_batch_size),
                       ctx.dist)
    support, mu = log_support(flat)
    mu_hidden = behaviour_hidden(ctx.behaviour, batches) if ctx.behaviour else None
    pi = forward_stats(ctx.policy, batches, support, ctx.pass_cfg, ctx.behaviour, mu_hidden)
    pre = pre_update(flat, support, mu, pi, ctx.policy.vocab_size)
    tokens = tokens_part(flat, pre, ctx.record_masks, seed, ctx.cfg.thresholds,
                         {"vocab_size": str(ctx.policy.vocab_size),
                          "source_log": str(ctx.cfg.log)})
    n = int(flat.loss_mask.sum())
    timings = {"read_and_pre_s": time.perf_counter() - t0}
    tick(n)
    loss_mask = torch.from_numpy(flat.loss_mask)
    inputs = LossInputs(torch.from_numpy(flat.token_id), torch.from_numpy(flat.logp_behavior),
                        torch.from_numpy(flat.advantage))
    attr, t_attr = None, time.perf_counter()
    if ctx.cfg.attribution and not ctx.dist.fsdp:
        attr = seed_attribution(
            ctx.policy, ctx.snapshot.params, batches, pre, flat.loss_mask, inputs.logp_behavior,
            seed=seed, optimizer=ctx.cfg.optimizer, lr=ctx.cfg.lr,
            sample_size=ctx.cfg.attribution_sample, thresholds=ctx.cfg.thresholds,
            temperature=ctx.pass_cfg.temperature, chunk_tokens=ctx.pass_cfg.chunk_tokens,
            dist=ctx.dist)
        timings["attribution_setup_s"] = time.perf_counter() - t_attr
    parts = []
    for name, keep in apply_masks(ctx.update_masks, pre.stats).items():
        t1 = time.perf_counter()
        cols = _simulate(ctx, keep, pre, batches, inputs, loss_mask, mu_hidden, attr)
        parts.append(updates_part(flat, seed, name, keep, cols))
        timings[f"update_{name}_s"] = time.perf_counter() - t1
        tick(n)
    write_table_atomic(ctx.layout.tokens_part(seed, ctx.dist.rank), tokens)
    write_table_atomic(ctx.layout.updates_part(seed, ctx.dist.rank), pa.concat_tables(parts))
    timings["total_s"] = time.perf_counter() - t0
    record = {"seed": seed, "samples": len(sb.sample_ids), "tokens": n, "timings": timings,
              "deviation": _deviation(pi.logp_k, flat.train_logprobs, flat.loss_mask)}
    return finish_seed(ctx.layout, ctx.dist, seed, record, ctx.cfg.device)


def _aggregate_deviation(records: list[dict]) -> dict | None:
    devs = [r["deviation"] for r in records if r["deviation"]["count"]]
    if not devs:
        return None
    count = sum(d["count"] for d in devs)
    return {"max": max(d["max"] for d in devs), "mean": sum(d["sum"] for d in devs) / count,
            "tokens": count}


def run_summary(layout: mf.RunLayout, seeds: list[int], cfg: ReplayConfig) -> list[Alignment]:
    """Alignment numbers pooled over the finished ``seeds`` of a run directory."""
    if not seeds:
        return []
    read = lambda kind, cols: pl.concat([pl.read_parquet(f, columns=cols)  # noqa: E731
                                         for s in seeds for f in layout.seed_parts(kind, s)])
    tokens = read("tokens", ["seed", "sample_id", "pos", "kl_topk", "tv_topk"])
    updates = read("updates", ["seed", "update_mask", "sample_id", "pos", "kept",
                               "delta_kl_topk", "delta_tv_topk"])
    t = cfg.thresholds
    return alignment_summary(tokens, updates, delta_kl=t.delta_kl, delta_tv=t.delta_tv)


def _models(cfg: ReplayConfig, dist: Dist
            ) -> tuple[RolloutMeta, Policy, Policy | None, LogIndex]:
    """Load and check the inputs; under FSDP load on the host, then shard onto the device."""
    meta, policy, behaviour, index = _load(replace(cfg, device="cpu") if dist.fsdp else cfg)
    check_world(dist, cfg.batch_size, index.n_rows)
    if dist.fsdp:
        for model in (policy, behaviour):
            if model is not None:
                shard_policy(model, cfg.device, dist.world_size)
    return meta, policy, behaviour, index


def _inputs_and_layout(cfg: ReplayConfig) -> tuple[dict, mf.RunLayout]:
    hashes = {"log": mf.content_hashes(cfg.log), "checkpoint": mf.content_hashes(cfg.checkpoint)}
    if cfg.behavior_checkpoint is not None:
        hashes["behavior_checkpoint"] = mf.content_hashes(cfg.behavior_checkpoint)
    return hashes, _check_run_dir(cfg, hashes)


def _start(cfg: ReplayConfig, dist: Dist = LOCAL) -> tuple[Context, dict]:
    t0 = time.perf_counter()
    meta, policy, behaviour, index = _models(cfg, dist)
    load_s = time.perf_counter() - t0
    hashes, layout = dist.from_main(lambda: _inputs_and_layout(cfg))  # rank 0 hashes
    doc = {"kind": "pdm_replay.replay", "status": "running", "config": cfg.to_json(),
           "versions": mf.package_versions(), "hashes": hashes, "device": _device_info(cfg.device),
           "log_meta": asdict(meta), "log_rows": index.n_rows, "warnings": _warnings(cfg, meta),
           "started_at": _now(), "timings": {"load_s": load_s,
                                             "hash_s": time.perf_counter() - t0 - load_s}}
    temperature = 1.0 if meta.temperature is None else meta.temperature
    snapshot = ParamSnapshot(list(policy.model.parameters()))
    # Measured after the snapshot; the smallest over ranks, so every rank chunks alike.
    chunk = cfg.chunk_tokens or dist.min_int(auto_chunk_tokens(
        cfg.device, policy.vocab_size, snapshot.params, cfg.optimizer))
    doc.update(chunk_tokens=chunk, distributed=dist.describe())
    if cfg.fsdp and not dist.fsdp:
        doc["warnings"].append("--fsdp without torchrun (one process): nothing to shard")
    ctx = Context(cfg=cfg, meta=meta, policy=policy, behaviour=behaviour, index=index,
                  layout=layout, record_masks=build_masks(cfg.masks, cfg.thresholds),
                  update_masks=build_masks(cfg.update_masks, cfg.thresholds),
                  snapshot=snapshot, dist=dist,
                  pass_cfg=PassConfig(temperature=temperature, chunk_tokens=chunk,
                                      lockstep=dist.fsdp))
    return ctx, doc


def _finish(ctx: Context, doc: dict, finished: set[int], t0: float) -> ReplayResult:
    """Rank 0 pools every seed's parts into the summary and completes the manifest."""
    cfg, layout = ctx.cfg, ctx.layout
    seeds = list(range(cfg.seeds))
    records = [layout.read_done(s) for s in seeds]
    summary = run_summary(layout, seeds, cfg)
    doc["timings"].update(seeds_s=time.perf_counter() - t0,
                          per_seed={str(r["seed"]): r["timings"] for r in records})
    doc.update(status="complete", finished_at=_now(), seeds_resumed=sorted(finished),
               recompute_deviation=_aggregate_deviation(records),
               tokens=sum(r["tokens"] for r in records),
               summary=[asdict(a) for a in summary])
    mf.write_manifest(layout, doc)
    return ReplayResult(run_dir=layout.root, manifest=doc, summary=summary)


def run_replay(cfg: ReplayConfig, on_progress: Progress | None = None,
               grad_reduce: GradReduce | None = None, dist: Dist = LOCAL) -> ReplayResult:
    """Run (or, with ``cfg.resume``, continue) a replay; returns the manifest and summary.

    Under torchrun every rank calls this with its :class:`~pdm_replay.replay.distributed.Dist`
    (``init_from_env``); every rank returns rank 0's result.
    """
    ctx, doc = _start(cfg, dist)
    ctx.grad_reduce = grad_reduce or dist.grad_reduce()
    layout, t0 = ctx.layout, time.perf_counter()
    if dist.is_main:
        mf.write_manifest(layout, doc)
    finished = set(dist.broadcast(layout.finished_seeds()))
    todo = [s for s in range(cfg.seeds) if s not in finished]
    stages = len(todo) * (1 + len(ctx.update_masks))
    state = {"stages": 0, "tokens": 0.0}

    def tick(tokens: int) -> None:
        # A seed's tokens count once, spread over its stages (pre pass + one per mask).
        state["stages"] += 1
        state["tokens"] += tokens / (1 + len(ctx.update_masks))
        if on_progress:
            on_progress(state["stages"], stages,
                        state["tokens"] / max(time.perf_counter() - t0, 1e-9))
    try:
        for seed in todo:
            if dist.is_main:
                layout.clear_seed(seed)  # what an interrupted attempt left behind
            dist.barrier()  # no rank writes a part before the seed is cleared
            replay_seed(ctx, seed, tick)
    except BaseException as exc:
        if dist.is_main:
            doc.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                       failed_at=_now())
            mf.write_manifest(layout, doc)
        raise
    return dist.from_main(lambda: _finish(ctx, doc, finished, t0))
