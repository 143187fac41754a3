"""The replay recipe (SPEC §6): load, check, then for each seed recompute π, decide the
masks, simulate one step per update mask, and write the seed's parts.

:class:`ReplayRecipe` is the one reader of :class:`~pdm_replay.replay.config.ReplayConfig`;
its steps read top to bottom: :meth:`~ReplayRecipe.setup`, :meth:`~ReplayRecipe.run_seed`
per seed, :meth:`~ReplayRecipe.finish`, all three under the run directory's lock in
:meth:`~ReplayRecipe.run`. The building blocks below it (:mod:`pdm_replay.replay`,
:mod:`.replay_steps`) take explicit arguments.

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

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pdm_replay.errors import FieldError
from pdm_replay.heap import reuse_freed_memory
from pdm_replay.io.atomic import write_table_atomic
from pdm_replay.io.lock import DirLock
from pdm_replay.io.log import RolloutLog
from pdm_replay.masks import Mask
from pdm_replay.names import ACTUAL
from pdm_replay.replay import manifest as mf
from pdm_replay.replay import seed_records as rec
from pdm_replay.replay.attribution_pass import SeedAttribution, seed_attribution
from pdm_replay.replay.checkpoint import DTYPES
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.data import check_replayable, check_seed_rows
from pdm_replay.replay.distributed import LOCAL, Dist, check_world, finish_seed
from pdm_replay.replay.forward import PassConfig
from pdm_replay.replay.gpu import auto_chunk_tokens
from pdm_replay.replay.log_index import LogIndex, log_steps
from pdm_replay.replay.models import (ModelOptions, ModelSlot, ModelSource, StepModels,
                                      StepPaths, behavior_dtype, check_step_files)
from pdm_replay.replay.outputs import tokens_part, updates_part
from pdm_replay.replay.run_doc import device_info, plan_doc, run_warnings, variant_footer
from pdm_replay.replay.seeds import SeedPlan
from pdm_replay.replay.step import GradReduce, StepInfo
from pdm_replay.replay.sweep import build_variants, trainer_variant
from pdm_replay.schema import RolloutMeta
from pdm_replay.commands.replay_steps import (Group, Progress, StageCount, Updates, now,
                                              pre_pass, run_summary)
from pdm_replay.threads import choose_threads, cpu_budget, torch_threads, wait_policy_record


@dataclass(frozen=True)
class ReplayResult:
    run_dir: Path
    state: mf.Manifest
    summary: list[dict]  # pdm_replay.report.headline rows

    @property
    def manifest(self) -> dict:
        """The manifest as written to ``manifest.json``."""
        return self.state.to_json()


class ReplayRecipe:
    """One replay run of ``cfg``. Under torchrun every rank runs its own recipe with its
    :class:`~pdm_replay.replay.distributed.Dist`; ``grad_reduce`` (default: the ranks'
    all-reduce) combines the simulated steps' gradients; ``on_progress`` gets (stages
    done, stages total, tokens/s)."""

    # What setup() fixes for every seed: the log, its seed plan, the slot of the logged
    # step's models, the run directory and its manifest, the masks (the config's names,
    # built) and how updates are taken; run_seeds() adds the progress count.
    meta: RolloutMeta
    temperature: float  # µ's sampling temperature, which π is recomputed at
    index: LogIndex
    plan: SeedPlan
    source: ModelSource
    slot: ModelSlot
    layout: mf.RunLayout
    doc: mf.Manifest
    pass_cfg: PassConfig
    masks: dict[str, Mask]
    update_masks: dict[str, Mask]
    trainer_mask: Mask | None
    updates: Updates
    progress: StageCount

    def __init__(self, cfg: ReplayConfig, on_progress: Progress | None = None,
                 grad_reduce: GradReduce | None = None, dist: Dist = LOCAL) -> None:
        self.cfg, self.on_progress, self.dist = cfg, on_progress, dist
        self.grad_reduce = grad_reduce or dist.grad_reduce()
        self.paths = StepPaths(cfg.checkpoint, cfg.behavior_checkpoint, cfg.next_checkpoint,
                               cfg.optimizer_state)
        self.per_step = self.paths.templated  # one step group per logged step of a seed

    def run(self) -> ReplayResult:
        """Run (or, with ``resume``, continue) the replay; every rank returns rank 0's
        result. Rank 0 holds the run directory's lock (:class:`~pdm_replay.io.lock.DirLock`)
        throughout: a second writer fails at once, naming the holder's PID. A start that
        fails its checks leaves no directory behind. torch runs ``threads`` intra-op threads
        (default: the CPUs this process may use, shared by the ranks on this machine) and
        gets its previous count back; freed CPU memory is kept for reuse meanwhile
        (``heap_reuse``, :mod:`pdm_replay.heap`)."""
        cfg, dist = self.cfg, self.dist
        held: list[DirLock] = []  # rank 0's lock stays in this process (never broadcast)
        dist.from_main(lambda: held.append(mf.lock_run(cfg.out, cfg.resume)))
        failed = True
        try:
            # The ranks sharing this machine's CPUs (torchrun sets LOCAL_WORLD_SIZE; on one
            # node it equals the world size).
            local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world_size))
            choice = choose_threads(cfg.threads, cpu_budget(), local if cfg.device == "cpu" else 1)
            with torch_threads(choice.threads), reuse_freed_memory(cfg.heap_reuse) as heap:
                self.setup({**choice.to_json(), **wait_policy_record(), **heap.to_json()})
                result = self.run_seeds()
            failed = False
            return result
        finally:
            for lock in held:
                lock.release(remove_if_empty=failed)

    # -- setup: every check, the first step's models, the manifest's start ------------------

    def setup(self, threads: dict) -> None:
        """Check the inputs and load the first step's models, then (rank 0) hash the inputs
        and check the run directory, then draft the manifest (``threads``: its CPU record)
        and build the masks. Nothing is written yet."""
        cfg, dist = self.cfg, self.dist
        t0 = time.perf_counter()
        first, steps = self._load_inputs()
        load_s = time.perf_counter() - t0
        hashes, self.layout = dist.from_main(lambda: self._check_run_dir(steps))
        hash_s = time.perf_counter() - t0 - load_s
        self.slot = ModelSlot(self.source, first)
        # Measured after the snapshot; the smallest over ranks, so every rank chunks alike.
        chunk = cfg.chunk_tokens or dist.min_int(auto_chunk_tokens(
            cfg.device, first.policy.vocab_size, first.snapshot.params, cfg.optimizer))
        self.pass_cfg = PassConfig(temperature=self.temperature, chunk_tokens=chunk,
                                   lockstep=dist.fsdp)
        self.doc = self._started(threads, hashes, first, {"load_s": load_s, "hash_s": hash_s})
        self.trainer_mask = (trainer_variant(cfg.trainer_mask, cfg.sweep).build(cfg.thresholds)
                             if cfg.trainer_mask else None)
        self.masks = build_variants(cfg.masks, cfg.thresholds, cfg.sweep)
        self.update_masks = build_variants(cfg.update_masks, cfg.thresholds, cfg.sweep)
        self.updates = Updates(cfg.optimizer, cfg.lr, self.pass_cfg, dist, self.grad_reduce)

    def _load_inputs(self) -> tuple[StepModels, list[int | None]]:
        """Before any run directory exists: every checkpoint directory the seeds need, the
        log's footer, the seed plan (how many seeds fit), the first step's models and their
        compatibility with the log, every row the seeds read. Returns the first step's
        models and the steps the seeds need."""
        cfg, paths = self.cfg, self.paths
        files = {"allow_pickle": cfg.allow_pickle, "trust_remote_code": cfg.trust_remote_code}
        if not self.per_step:
            check_step_files(paths, [None], **files)  # the cheapest, clearest errors first
        log = RolloutLog.open(cfg.log)  # validate's file-level checks before any row is read
        self.meta, self.temperature = log.meta, log.sampling_temperature()
        index = LogIndex.of(log)
        self.plan = SeedPlan(index.n_rows, cfg.batch_size, cfg.seed_by, cfg.allow_overlap,
                             log_steps(index))
        self.plan.check(cfg.seeds)
        steps = self.plan.steps_needed(cfg.seeds, self.per_step)
        if self.per_step:
            check_step_files(paths, steps, **files)
        self.source = ModelSource(paths, self._model_options(), self.meta, cfg.log, self.dist)
        first = self.source.load(steps[0])
        vocab = first.policy.vocab_size
        self.index = check_replayable(log, vocab)
        groups = [rows for s in range(cfg.seeds) for _, rows in self.plan.step_groups(
            s, self.per_step)]
        check_seed_rows(self.index, groups, vocab, self.meta.max_topk_entries)
        # Every rank needs a sample of every step group of every seed (a step's batch may be
        # below batch_size).
        check_world(self.dist, min(len(rows) for rows in groups), self.index.n_rows)
        return first, steps

    def _model_options(self) -> ModelOptions:
        cfg = self.cfg
        return ModelOptions(
            dtype=cfg.dtype, behavior_dtype=behavior_dtype(self.meta, cfg.behavior_dtype,
                                                           cfg.dtype),
            device=cfg.device, allow_pickle=cfg.allow_pickle,
            trust_remote_code=cfg.trust_remote_code, tokenizer_check=cfg.tokenizer_check,
            target_norm=cfg.lr == "auto")

    def _check_run_dir(self, steps: list[int | None]) -> tuple[dict, mf.RunLayout]:
        """The inputs' hashes and the run directory: new, or a ``resume`` of a run with the
        same result-affecting options and inputs."""
        cfg = self.cfg
        hashes = {**mf.input_hashes(cfg.log, self.paths.named(), steps),
                  **mf.mask_module_hashes(cfg.mask_modules)}
        layout = mf.RunLayout(cfg.out)
        if not layout.started():
            return hashes, layout
        mf.refuse_existing(cfg.out, cfg.resume)
        old = mf.load(layout)
        mf.check_mask_modules(cfg.out, old.hashes, hashes)
        differ = cfg.differences(old.config) + mf.hash_differences(old.hashes, hashes)
        if differ:
            raise FieldError("{resume} with different inputs ({differ}); resume with the "
                             "original options or choose a new {out}", file=cfg.out,
                             differ=", ".join(differ))
        return hashes, layout

    def _started(self, threads: dict, hashes: dict, first: StepModels, timings: dict
                 ) -> mf.Manifest:
        """The manifest of the run as it starts."""
        cfg, dist = self.cfg, self.dist
        warnings = run_warnings(self.meta, self.plan, cfg.seeds, self.per_step,
                                dtype=cfg.dtype, attribution=cfg.attribution, fsdp=cfg.fsdp)
        if cfg.fsdp and not dist.fsdp:
            warnings.append("--fsdp without torchrun (one process): nothing to shard")
        return mf.Manifest.started(
            config=cfg.to_json(), versions=mf.package_versions(), hashes=hashes,
            device=device_info(cfg.device), log_meta=asdict(self.meta),
            log_rows=self.index.n_rows, warnings=tuple(warnings), started_at=now(),
            timings=timings, chunk_tokens=self.pass_cfg.chunk_tokens,
            distributed=dist.describe(), threads=threads,
            **plan_doc(self.plan, cfg.seeds, first, actual=cfg.next_checkpoint is not None,
                       update_masks=cfg.update_masks, trainer_mask=cfg.trainer_mask,
                       sweep=cfg.sweep))

    # -- the seeds ------------------------------------------------------------------------

    def run_seeds(self) -> ReplayResult:
        """Save the manifest, replay every seed not finished yet, then :meth:`finish` on
        rank 0 (every rank returns its result). A failure is recorded in the manifest."""
        layout, dist, t0 = self.layout, self.dist, time.perf_counter()
        if dist.is_main:
            mf.save(layout, self.doc)
        finished = set(dist.broadcast(layout.finished_seeds()))
        todo = [s for s in range(self.cfg.seeds) if s not in finished]
        per_group = 1 + len(self.update_masks) + (self.trainer_mask is not None)
        self.progress = StageCount(per_group * sum(
            len(self.plan.step_groups(s, self.per_step)) for s in todo), per_group,
            self.on_progress)
        try:
            for seed in todo:
                if dist.is_main:
                    layout.clear_seed(seed)  # what an interrupted attempt left behind
                dist.barrier()  # no rank writes a part before the seed is cleared
                self.run_seed(seed)
        except BaseException as exc:
            if dist.is_main:
                mf.save(layout, self.doc.failed(f"{type(exc).__name__}: {exc}", now()))
            raise
        return dist.from_main(lambda: self.finish(finished, t0))

    def run_seed(self, seed: int) -> rec.SeedRecord:
        """Replay one seed, step group by step group, and write its parts and done marker;
        returns the marker record."""
        t0, layout, dist = time.perf_counter(), self.layout, self.dist
        tokens, updates, records = [], [], []
        for step, rows in self.plan.step_groups(seed, self.per_step):
            tok, parts, record = self._replay_group(self.slot.use(step), seed, rows)
            tokens.append(tok)
            updates.extend(parts)
            records.append(record)
        write_table_atomic(layout.tokens_part(seed, dist.rank), pa.concat_tables(tokens))
        write_table_atomic(layout.updates_part(seed, dist.rank), pa.concat_tables(updates))
        record = rec.merge_groups(seed, records).timed(time.perf_counter() - t0)
        return rec.SeedRecord.from_json(
            finish_seed(layout, dist, seed, record.to_json(), self.cfg.device))

    def _replay_group(self, models: StepModels, seed: int, rows: np.ndarray
                      ) -> tuple[pa.Table, list[pa.Table], rec.GroupRecord]:
        """Pre pass (tokens/v1), the actual update and every simulated update (updates/v1)
        of one step group."""
        cfg, t0 = self.cfg, time.perf_counter()
        g = pre_pass(models, self.index, seed, rows, batch_size=cfg.batch_size,
                     micro_batch_size=cfg.micro_batch_size, pass_cfg=self.pass_cfg,
                     meta=self.meta, dist=self.dist)
        tokens = tokens_part(g.flat, g.pre, self.masks, seed, cfg.thresholds, {
            "vocab_size": str(models.policy.vocab_size), "source_log": str(cfg.log),
            **variant_footer(cfg.masks, cfg.sweep)})
        timings = {"read_and_pre_s": time.perf_counter() - t0}
        self.progress.tick(g.n)
        t_attr = time.perf_counter()
        if (attr := self._attribution(models, seed, g)) is not None:
            timings["attribution_setup_s"] = time.perf_counter() - t_attr
        parts, steps = self._updates(models, seed, g, attr, timings)
        info = {"step": models.step, "actual_step_norm": models.target_norm, "updates": steps}
        return tokens, parts, rec.group_record(g.flat, g.pre, g.samples, timings, info)

    def _attribution(self, models: StepModels, seed: int, g: Group) -> SeedAttribution | None:
        """The group's attribution set-up (None without ``attribution`` or under FSDP)."""
        cfg = self.cfg
        if not cfg.attribution or self.dist.fsdp:
            return None
        return seed_attribution(
            models.policy, models.snapshot.params, g.batches, g.pre, g.flat.loss_mask,
            g.inputs.logp_behavior, rng_seed=seed, optimizer=cfg.optimizer,
            lr=math.nan if cfg.lr == "auto" else cfg.lr,  # columns() gets each lr
            sample_size=cfg.attribution_sample, thresholds=cfg.thresholds,
            temperature=self.pass_cfg.temperature, chunk_tokens=self.pass_cfg.chunk_tokens,
            dist=self.dist)

    def _updates(self, models: StepModels, seed: int, g: Group, attr: SeedAttribution | None,
                 timings: dict) -> tuple[list[pa.Table], dict]:
        """updates/v1 parts of the actual update (with a next checkpoint) and of each update
        mask's simulated one; each one's time into ``timings``; each simulated step's lr
        and ‖Δθ‖ by mask."""
        parts, steps = [], {}
        if models.next_policy is not None:
            t1 = time.perf_counter()
            keep = self.trainer_mask.keep(g.pre.stats, g.seqs)  # type: ignore[union-attr]
            parts.append(updates_part(g.flat, seed, ACTUAL, keep,
                                      self.updates.actual(models, g, attr)))
            timings[f"update_{ACTUAL}_s"] = time.perf_counter() - t1
            self.progress.tick(g.n)
        for name, mask in self.update_masks.items():
            t1, info = time.perf_counter(), StepInfo()
            cols = self.updates.simulate(models, g, mask.weight(g.pre.stats, g.seqs), attr,
                                         info)
            parts.append(updates_part(g.flat, seed, name, mask.keep(g.pre.stats, g.seqs),
                                      cols))
            timings[f"update_{name}_s"] = time.perf_counter() - t1
            steps[name] = {"lr": info.lr, "step_norm": info.step_norm}
            self.progress.tick(g.n)
        return parts, steps

    # -- finish: the run's numbers into the manifest ----------------------------------------

    def finish(self, finished: set[int], t0: float) -> ReplayResult:
        """Rank 0 pools every seed's parts into the summary and completes the manifest
        (``finished``: the seeds a resume kept; ``t0``: when the seeds started)."""
        layout, doc = self.layout, self.doc
        seeds = list(range(self.cfg.seeds))
        for s in seeds:
            doc = doc.with_seed(rec.SeedRecord.from_json(layout.read_done(s)))
        records = list(doc.seeds)
        summary = run_summary(layout, seeds, doc.to_json())
        dtype = self.source.options.behavior_dtype
        doc = doc.finished(mf.Finish(
            finished_at=now(), seeds_resumed=tuple(sorted(finished)),
            recompute_deviation=rec.pool([r.deviation for r in records if r.deviation]),
            tokens=sum(r.tokens for r in records), update_steps=rec.updates_by_seed(records),
            behavior_fidelity=rec.behavior_fidelity(records, dtype, DTYPES[dtype]),
            summary=tuple(summary), seeds_s=time.perf_counter() - t0,
            per_seed={str(r.seed): r.timings for r in records}))
        mf.save(layout, doc)
        return ReplayResult(run_dir=layout.root, state=doc, summary=summary)


def run_replay(cfg: ReplayConfig, on_progress: Progress | None = None,
               grad_reduce: GradReduce | None = None, dist: Dist = LOCAL) -> ReplayResult:
    """Run (or, with ``cfg.resume``, continue) a replay (:meth:`ReplayRecipe.run`);
    returns the manifest and summary."""
    return ReplayRecipe(cfg, on_progress, grad_reduce, dist).run()
