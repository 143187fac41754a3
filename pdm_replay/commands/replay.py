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

import dataclasses
import math
import os
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import torch

from pdm_replay.errors import FieldError
from pdm_replay.io.atomic import write_table_atomic
from pdm_replay.io.lock import DirLock
from pdm_replay.io.reader import FlatTokens
from pdm_replay.math.segments import Segments
from pdm_replay.replay import manifest as mf
from pdm_replay.replay import seed_records as rec
from pdm_replay.replay.actual import ACTUAL, actual_columns
from pdm_replay.replay.attribution_pass import SeedAttribution, seed_attribution
from pdm_replay.replay.batching import MicroBatch, micro_batches
from pdm_replay.replay.checkpoint import DTYPES
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.context import ModelSlot, ReplayContext
from pdm_replay.replay.data import seed_batch
from pdm_replay.replay.distributed import LOCAL, Dist, finish_seed, lockstep, shard_seed_batch
from pdm_replay.replay.forward import (LossInputs, PassConfig, accumulate_gradients,
                                       behavior_hidden, forward_stats)
from pdm_replay.replay.gpu import auto_chunk_tokens
from pdm_replay.replay.models import behavior_dtype, input_hashes, load_run_inputs, templated
from pdm_replay.replay.run_doc import device_info, plan_doc, run_warnings, variant_footer
from pdm_replay.replay.step import GradReduce, StepInfo, simulated_step
from pdm_replay.replay.sweep import build_variants, trainer_variant
from pdm_replay.replay.outputs import (PreUpdate, log_support, post_columns, pre_update,
                                       tokens_part, updates_part)
from pdm_replay.heap import HeapChoice, reuse_freed_memory
from pdm_replay.threads import (ThreadChoice, choose_threads, cpu_budget, torch_threads,
                                wait_policy_record)

Progress = Callable[[int, int, float], None]  # (stages done, stages total, tokens/s)


@dataclass(frozen=True)
class ReplayResult:
    run_dir: Path
    state: mf.Manifest
    summary: list[dict]  # pdm_replay.report.headline rows

    @property
    def manifest(self) -> dict:
        """The manifest as written to ``manifest.json``."""
        return self.state.to_json()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _check_run_dir(cfg: ReplayConfig, hashes: dict) -> mf.RunLayout:
    layout = mf.RunLayout(cfg.out)
    if not layout.started():
        return layout
    mf.refuse_existing(cfg.out, cfg.resume)
    old = mf.load(layout)
    mf.check_mask_modules(cfg.out, old.hashes, hashes)
    differ = cfg.differences(old.config) + mf.hash_differences(old.hashes, hashes)
    if differ:
        raise FieldError("{resume} with different inputs ({differ}); resume with the "
                         "original options or choose a new {out}", file=cfg.out,
                         differ=", ".join(differ))
    return layout


def _simulate(ctx: ReplayContext, mask_weight: torch.Tensor, pre: PreUpdate,
              batches: list[MicroBatch], inputs: LossInputs, loss_mask: torch.Tensor,
              mu_hidden: list[torch.Tensor] | None,
              attr: SeedAttribution | None = None,
              info: StepInfo | None = None) -> dict[str, torch.Tensor | pa.Array]:
    """One update mask of gradient weights ``mask_weight`` ``(N,)`` (keep as 0/1, or an IS
    weight): step, post-update statistics, restore. Returns updates columns; ``info``
    receives the lr used and the realized ‖Δθ‖."""
    weight = mask_weight.double() * loss_mask
    # Every loss token of the global batch (all ranks): a mask never changes the normaliser.
    n_tokens = ctx.dist.sum_int(int(loss_mask.sum()))
    params = ctx.snapshot.params
    info = info if info is not None else StepInfo()
    post, delta = simulated_step(
        params, ctx.snapshot,
        lambda: accumulate_gradients(ctx.policy, batches, inputs, weight, n_tokens,
                                     ctx.pass_cfg),
        optimizer=ctx.models.optimizer(ctx.cfg.optimizer), lr=ctx.models.lr(ctx.cfg.lr),
        grad_reduce=ctx.grad_reduce, info=info,
        measure=lambda snap: (forward_stats(ctx.policy, batches, pre.support, ctx.pass_cfg,
                                            ctx.behavior, mu_hidden),
                              snap.delta() if attr else None))
    cols = post_columns(pre, post)
    if attr is not None:  # Δθ kept past the restore: the linear term is taken at θ
        cols.update(attr.columns(delta, cols["delta_kl_topk"], weight, n_tokens, lr=info.lr))
    return cols


@dataclass
class Group:
    """One step group of a seed after its pre pass (what every update reads)."""

    flat: FlatTokens
    samples: int
    batches: list[MicroBatch]
    pre: PreUpdate
    mu_hidden: list[torch.Tensor] | None
    tokens: pa.Table

    @property
    def n(self) -> int:
        return int(self.flat.loss_mask.sum())


def _pre_pass(ctx: ReplayContext, seed: int, rows: np.ndarray) -> Group:
    sb = shard_seed_batch(seed_batch(ctx.index, ctx.cfg.batch_size, seed,
                                     ctx.policy.vocab_size, rows=rows), ctx.dist)
    flat = sb.flat
    batches = lockstep(micro_batches(sb.prompts, sb.responses, ctx.cfg.micro_batch_size),
                       ctx.dist)
    support, mu = log_support(flat)
    mu_hidden = behavior_hidden(ctx.behavior, batches) if ctx.behavior else None
    pi = forward_stats(ctx.policy, batches, support, ctx.pass_cfg, ctx.behavior, mu_hidden)
    pre = pre_update(flat, support, mu, pi, ctx.policy.vocab_size, ctx.meta)
    tokens = tokens_part(flat, pre, ctx.record_masks, seed, ctx.cfg.thresholds,
                         {"vocab_size": str(ctx.policy.vocab_size),
                          "source_log": str(ctx.cfg.log), **variant_footer(ctx.cfg)})
    return Group(flat, len(sb.sample_ids), batches, pre, mu_hidden, tokens)


def _attribution(ctx: ReplayContext, seed: int, g: Group, inputs: LossInputs
                 ) -> SeedAttribution | None:
    """The seed's attribution set-up (None without ``--attribution`` or under FSDP)."""
    if not ctx.cfg.attribution or ctx.dist.fsdp:
        return None
    return seed_attribution(
        ctx.policy, ctx.snapshot.params, g.batches, g.pre, g.flat.loss_mask,
        inputs.logp_behavior, seed=seed, optimizer=ctx.cfg.optimizer,
        lr=math.nan if ctx.cfg.lr == "auto" else ctx.cfg.lr,  # columns() gets each lr
        sample_size=ctx.cfg.attribution_sample, thresholds=ctx.cfg.thresholds,
        temperature=ctx.pass_cfg.temperature, chunk_tokens=ctx.pass_cfg.chunk_tokens,
        dist=ctx.dist)


def _replay_group(ctx: ReplayContext, seed: int, rows: np.ndarray,
                  tick: Callable[[int], None]) -> tuple[pa.Table, list[pa.Table], rec.GroupRecord]:
    """Pre pass, the actual update and every simulated update of one step group."""
    t0 = time.perf_counter()
    g = _pre_pass(ctx, seed, rows)
    flat, n = g.flat, g.n
    timings = {"read_and_pre_s": time.perf_counter() - t0}
    tick(n)
    loss_mask, seqs = torch.from_numpy(flat.loss_mask), Segments.of(flat.row, flat.loss_mask)
    inputs = LossInputs(torch.from_numpy(flat.token_id), torch.from_numpy(flat.logp_behavior),
                        torch.from_numpy(flat.advantage))
    t_attr = time.perf_counter()
    if (attr := _attribution(ctx, seed, g, inputs)) is not None:
        timings["attribution_setup_s"] = time.perf_counter() - t_attr
    parts, steps = [], {}
    if ctx.models.next_policy is not None:
        t1 = time.perf_counter()
        cols = actual_columns(ctx.policy, ctx.models.next_policy, ctx.snapshot.params,
                              g.batches, g.pre, ctx.pass_cfg, ctx.behavior, g.mu_hidden, attr)
        keep = ctx.trainer_mask.keep(g.pre.stats, seqs)  # type: ignore[union-attr]
        parts.append(updates_part(flat, seed, ACTUAL, keep, cols))
        timings[f"update_{ACTUAL}_s"] = time.perf_counter() - t1
        tick(n)
    for name, mask in ctx.update_masks.items():
        t1, info = time.perf_counter(), StepInfo()
        cols = _simulate(ctx, mask.weight(g.pre.stats, seqs), g.pre, g.batches, inputs,
                         loss_mask, g.mu_hidden, attr, info)
        parts.append(updates_part(flat, seed, name, mask.keep(g.pre.stats, seqs), cols))
        timings[f"update_{name}_s"] = time.perf_counter() - t1
        steps[name] = {"lr": info.lr, "step_norm": info.step_norm}
        tick(n)
    info = {"step": ctx.models.step, "actual_step_norm": ctx.models.target_norm,
            "updates": steps}
    return g.tokens, parts, rec.group_record(flat, g.pre, g.samples, timings, info)


def replay_seed(ctx: ReplayContext, seed: int, tick: Callable[[int], None]) -> rec.SeedRecord:
    """Replay one seed (step group by step group) and write its parts and done marker;
    returns the marker record."""
    t0 = time.perf_counter()
    tokens, updates, records = [], [], []
    for step, rows in ctx.groups(seed):
        ctx.use_step(step)
        tok, parts, record = _replay_group(ctx, seed, rows, tick)
        tokens.append(tok)
        updates.extend(parts)
        records.append(record)
    write_table_atomic(ctx.layout.tokens_part(seed, ctx.dist.rank), pa.concat_tables(tokens))
    write_table_atomic(ctx.layout.updates_part(seed, ctx.dist.rank), pa.concat_tables(updates))
    record = rec.merge_groups(seed, records).timed(time.perf_counter() - t0)
    return rec.SeedRecord.from_json(
        finish_seed(ctx.layout, ctx.dist, seed, record.to_json(), ctx.cfg.device))


def run_summary(layout: mf.RunLayout, seeds: list[int], doc: dict) -> list[dict]:
    """The report's headline (:func:`pdm_replay.report.headline.headline`, the one
    computation of SPEC §6's alignment numbers) over the finished ``seeds`` of the run
    directory, one dict per basis and comparison; ``doc`` is the manifest being completed
    (its seed plan decides whether the seeds count as independent)."""
    if not seeds:
        return []
    # Imported here, after the seeds: DuckDB and polars cost ~0.4 s of start-up (issue 20).
    from pdm_replay.report.db import connect
    from pdm_replay.report.headline import headline
    from pdm_replay.report.run_info import discover_run
    info = dataclasses.replace(discover_run(layout.root), manifest=doc)
    with connect(info) as db:
        return headline(db).to_dicts()


def _inputs_and_layout(cfg: ReplayConfig, steps: list[int | None]
                       ) -> tuple[dict, mf.RunLayout]:
    hashes = {**input_hashes(cfg, steps), **mf.mask_module_hashes(cfg.mask_modules)}
    return hashes, _check_run_dir(cfg, hashes)


def _start(cfg: ReplayConfig, threads: dict, grad_reduce: GradReduce | None,
           dist: Dist = LOCAL) -> tuple[ReplayContext, mf.Manifest]:
    t0 = time.perf_counter()
    meta, index, plan, first, steps = load_run_inputs(cfg, dist)
    load_s = time.perf_counter() - t0
    hashes, layout = dist.from_main(lambda: _inputs_and_layout(cfg, steps))  # rank 0 hashes
    hash_s = time.perf_counter() - t0 - load_s
    temperature = 1.0 if meta.temperature is None else meta.temperature
    # Measured after the snapshot; the smallest over ranks, so every rank chunks alike.
    chunk = cfg.chunk_tokens or dist.min_int(auto_chunk_tokens(
        cfg.device, first.policy.vocab_size, first.snapshot.params, cfg.optimizer))
    warnings = run_warnings(cfg, meta, plan, templated(cfg))
    if cfg.fsdp and not dist.fsdp:
        warnings.append("--fsdp without torchrun (one process): nothing to shard")
    doc = mf.Manifest.started(
        config=cfg.to_json(), versions=mf.package_versions(), hashes=hashes,
        device=device_info(cfg.device), log_meta=asdict(meta), log_rows=index.n_rows,
        warnings=tuple(warnings), started_at=_now(),
        timings={"load_s": load_s, "hash_s": hash_s}, chunk_tokens=chunk,
        distributed=dist.describe(), threads=threads, **plan_doc(cfg, plan, first))
    trainer = (trainer_variant(cfg.trainer_mask, cfg.sweep).build(cfg.thresholds)
               if cfg.trainer_mask else None)
    ctx = ReplayContext(
        cfg=cfg, meta=meta, index=index, plan=plan, layout=layout,
        record_masks=build_variants(cfg.masks, cfg.thresholds, cfg.sweep),
        update_masks=build_variants(cfg.update_masks, cfg.thresholds, cfg.sweep),
        slot=ModelSlot(cfg, meta, first, templated(cfg), dist), trainer_mask=trainer,
        grad_reduce=grad_reduce or dist.grad_reduce(), dist=dist,
        pass_cfg=PassConfig(temperature=temperature, chunk_tokens=chunk, lockstep=dist.fsdp))
    return ctx, doc


def _finish(ctx: ReplayContext, doc: mf.Manifest, finished: set[int], t0: float
            ) -> ReplayResult:
    """Rank 0 pools every seed's parts into the summary and completes the manifest."""
    cfg, layout = ctx.cfg, ctx.layout
    seeds = list(range(cfg.seeds))
    for s in seeds:
        doc = doc.with_seed(rec.SeedRecord.from_json(layout.read_done(s)))
    records = list(doc.seeds)
    summary = run_summary(layout, seeds, doc.to_json())
    dtype = behavior_dtype(cfg, ctx.meta)
    doc = doc.finished(mf.Finish(
        finished_at=_now(), seeds_resumed=tuple(sorted(finished)),
        recompute_deviation=rec.pool([r.deviation for r in records if r.deviation]),
        tokens=sum(r.tokens for r in records), update_steps=rec.updates_by_seed(records),
        behavior_fidelity=rec.behavior_fidelity(records, dtype, DTYPES[dtype]),
        summary=tuple(summary), seeds_s=time.perf_counter() - t0,
        per_seed={str(r.seed): r.timings for r in records}))
    mf.save(layout, doc)
    return ReplayResult(run_dir=layout.root, state=doc, summary=summary)


def run_replay(cfg: ReplayConfig, on_progress: Progress | None = None,
               grad_reduce: GradReduce | None = None, dist: Dist = LOCAL) -> ReplayResult:
    """Run (or, with ``cfg.resume``, continue) a replay; returns the manifest and summary.

    Under torchrun every rank calls this with its :class:`~pdm_replay.replay.distributed.Dist`
    (``init_from_env``); every rank returns rank 0's result. Rank 0 holds the run
    directory's lock (:class:`~pdm_replay.io.lock.DirLock`) throughout: a second writer
    fails at once, naming the holder's PID. A start that fails its checks leaves no
    directory behind. torch runs ``cfg.threads`` intra-op threads (default: the CPUs this
    process may use, shared by the ranks on this machine) and gets its previous count back;
    freed CPU memory is kept for reuse meanwhile (``cfg.heap_reuse``, :mod:`pdm_replay.heap`).
    """
    held: list[DirLock] = []  # rank 0's lock stays in this process (never broadcast)
    dist.from_main(lambda: held.append(mf.lock_run(cfg.out, cfg.resume)))
    failed = True
    try:
        # The ranks sharing this machine's CPUs (torchrun sets LOCAL_WORLD_SIZE; on one
        # node it equals the world size).
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world_size))
        choice = choose_threads(cfg.threads, cpu_budget(), local if cfg.device == "cpu" else 1)
        with torch_threads(choice.threads), reuse_freed_memory(cfg.heap_reuse) as heap:
            result = _run_locked(cfg, on_progress, grad_reduce, dist, choice, heap)
        failed = False
        return result
    finally:
        for lock in held:
            lock.release(remove_if_empty=failed)


def _run_locked(cfg: ReplayConfig, on_progress: Progress | None, grad_reduce: GradReduce | None,
                dist: Dist, threads: ThreadChoice, heap: HeapChoice) -> ReplayResult:
    cpu = {**threads.to_json(), **wait_policy_record(), **heap.to_json()}
    ctx, doc = _start(cfg, cpu, grad_reduce, dist)
    layout, t0 = ctx.layout, time.perf_counter()
    if dist.is_main:
        mf.save(layout, doc)
    finished = set(dist.broadcast(layout.finished_seeds()))
    todo = [s for s in range(cfg.seeds) if s not in finished]
    per_group = 1 + len(ctx.update_masks) + (ctx.trainer_mask is not None)
    stages = per_group * sum(len(ctx.groups(s)) for s in todo)
    state = {"stages": 0, "tokens": 0.0}

    def tick(tokens: int) -> None:
        # A group's tokens count once, spread over its stages (pre pass + one per update).
        state["stages"] += 1
        state["tokens"] += tokens / per_group
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
            mf.save(layout, doc.failed(f"{type(exc).__name__}: {exc}", _now()))
        raise
    return dist.from_main(lambda: _finish(ctx, doc, finished, t0))
