"""Multi-process replay (SPEC §7) on torch.distributed: one :class:`Dist` per process.

Started as ``torchrun --nproc_per_node N -m pdm_replay replay ...``: every rank draws the
same global batch of a seed, keeps a contiguous, cost-balanced shard of its samples for
the forward passes (:func:`shard_seed_batch`), normalizes the surrogate by the *global*
loss-token count (:meth:`Dist.sum_int`) and sums gradients over ranks before the
optimizer step (:meth:`Dist.grad_reduce`), so the simulated step is the single-process
step on the same global batch. Rank r writes ``part-<r>.parquet`` of every seed; rank 0
alone writes ``manifest.json`` and the seed's done marker, once every rank has reported
its parts written (:func:`finish_seed`). A seed is the unit of resume: its gradient needs
every rank, so an unfinished seed is redone by all ranks.

One process (no torchrun) is :data:`LOCAL`: every collective is the identity.

Examples
--------
>>> LOCAL.sum_int(7), LOCAL.broadcast("x"), LOCAL.gather({"a": 1})
(7, 'x', [{'a': 1}])
>>> shard_bounds([5, 5, 5, 5, 40], 2)  # rank 0: samples 0..3, rank 1: sample 4
[0, 4, 5]
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from pdm_replay.errors import FieldError
from pdm_replay.math.norms import is_dtensor
from pdm_replay.replay.batching import MicroBatch
from pdm_replay.replay.data import SeedBatch
from pdm_replay.replay.gpu import peak_memory
from pdm_replay.replay.manifest import RunLayout
from pdm_replay.replay.seed_records import STAT_KEYS, merge
from pdm_replay.replay.step import GradReduce

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

T = TypeVar("T")
BUCKET_BYTES = 64 << 20  # gradients are summed in flat buckets of this size
TIMEOUT = timedelta(minutes=30)  # a collective waiting longer than this fails the rank


@dataclass(frozen=True)
class Dist:
    """This process's place in the job; collectives over every rank (identity alone)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # "gloo" | "nccl"; None: a single process
    fsdp: bool = False
    # The job's device mesh once made (a list: the dataclass is frozen); see close().
    _mesh: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _tensor(self, value: int) -> Tensor:
        # NCCL only reduces device tensors; gloo takes host tensors.
        device = "cuda" if self.backend == "nccl" else "cpu"
        return torch.tensor([value], dtype=torch.int64, device=device)

    def _reduce_int(self, value: int, op: str) -> int:
        if not self.active:
            return int(value)
        import torch.distributed as dist
        t = self._tensor(int(value))
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        return int(t.item())

    def sum_int(self, value: int) -> int:
        """Σ over ranks of an integer (e.g. the global loss-token count)."""
        return self._reduce_int(value, "SUM")

    def max_int(self, value: int) -> int:
        return self._reduce_int(value, "MAX")

    def min_int(self, value: int) -> int:
        return self._reduce_int(value, "MIN")

    def all_gather_int(self, value: int) -> list[int]:
        """Every rank's integer, in rank order, on every rank."""
        if not self.active:
            return [int(value)]
        import torch.distributed as dist
        mine = self._tensor(int(value))
        out = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(out, mine)
        return [int(t.item()) for t in out]

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist
            dist.barrier()

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (picklable objects)."""
        if not self.active:
            return obj
        import torch.distributed as dist
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: T) -> list[T] | None:
        """Every rank's ``obj`` in rank order on rank 0; ``None`` on the other ranks."""
        if not self.active:
            return [obj]
        import torch.distributed as dist
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def from_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 only and hand its result, or its exception, to every rank.

        For checks that read or hash shared files: one rank does the work and every rank
        fails alike (no rank is left waiting in a collective for one that raised).
        """
        if not self.active:
            return fn()
        outcome: tuple[bool, Any] = (True, None)
        if self.is_main:
            try:
                outcome = (True, fn())
            except Exception as exc:  # noqa: BLE001  (re-raised on every rank below)
                outcome = (False, exc)
        ok, value = self.broadcast(outcome)
        if not ok:
            raise value
        return value

    def grad_reduce(self) -> GradReduce | None:
        """The :func:`~pdm_replay.replay.step.simulated_step` hook: Σ gradients over ranks."""
        return all_reduce_grads if self.active else None

    def describe(self) -> dict:
        return {"world_size": self.world_size, "backend": self.backend, "fsdp": self.fsdp}

    def device_mesh(self) -> DeviceMesh:
        """The 1-D mesh of every rank that ``--fsdp`` shards over, made on first use; every
        sharded model of the job shares it."""
        if not self._mesh:
            from torch.distributed.device_mesh import init_device_mesh
            device_type = "cuda" if self.backend == "nccl" else "cpu"
            self._mesh.append(init_device_mesh(device_type, (self.world_size,)))
        return self._mesh[0]

    def close(self) -> None:
        """Destroy the process group and free it now, while the interpreter is alive.

        ``destroy_process_group`` only unregisters the group; gloo's worker threads are
        joined by ``~ProcessGroupGloo`` when its last reference drops (its
        ``Backend::shutdown`` is a no-op, torch ``c10d/Backend.hpp``). Two holders outlived
        the models: under ``--fsdp``, the device mesh's ``_pg_registry`` (DTensor's
        sharding-propagation, redistribution-planner and ``MeshTopoInfo`` caches keep the
        mesh; pytorch PR #172504, Megatron-LM PR #7029), emptied here; in every run,
        ``torch.distributed.nn.functional``'s defaults, avoided by
        :func:`_import_before_group`. Freed only at exit, a gloo worker still releasing its
        last work item's tensors met a finalizing interpreter (``gil_scoped_acquire`` →
        ``PyThread_exit_thread`` → ``std::terminate``: "terminate called without an active
        exception", SIGABRT after a complete run; the race pytorch PR #179291 describes).
        """
        if not self.active:
            return
        import torch.distributed as dist
        for mesh in self._mesh:
            registry = getattr(mesh, "_pg_registry", None)  # older torch: group names only
            if isinstance(registry, dict):
                registry.clear()
        self._mesh.clear()
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()  # the fully_shard modules' reference cycles hold the mesh's groups too


LOCAL = Dist()


def _rank_device(device: str, local_rank: int, world: int) -> str:
    dev = torch.device(device)
    if dev.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise FieldError("{device} {got}: CUDA is not available on this machine", got=device)
    if dev.index is not None and world > 1:
        raise FieldError("{device} {got}: under torchrun pass {device} cuda; rank r uses "
                         "cuda:LOCAL_RANK (one GPU per process)", got=device)
    torch.cuda.set_device(local_rank)  # so "cuda" means this rank's GPU from here on
    return device


def init_from_env(device: str = "cpu", fsdp: bool = False,
                  env: dict[str, str] | None = None) -> Dist:
    """The job this process belongs to, from the torchrun environment (``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``); :data:`LOCAL` outside
    torchrun or with one process. Initializes the process group: NCCL for ``--device
    cuda``, gloo otherwise.

    >>> init_from_env("cpu", env={}) is LOCAL
    True
    """
    env = dict(os.environ) if env is None else env
    world = int(env.get("WORLD_SIZE", "1"))
    if world <= 1:
        return LOCAL
    rank, local_rank = int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"]))
    _rank_device(device, local_rank, world)
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    import torch.distributed as dist
    _import_before_group()
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=TIMEOUT)
    return Dist(rank=rank, world_size=world, local_rank=local_rank, backend=backend,
                fsdp=fsdp)


def _import_before_group() -> None:
    """Import ``torch.distributed.nn.functional`` while no process group exists.

    Its functions default to ``group=group.WORLD``, evaluated at import: imported after
    ``init_process_group`` (transformers' model modules import ``torch.distributed.fsdp``,
    which imports it) they keep the default group alive to interpreter exit (see
    :meth:`Dist.close`); imported before, the default is ``None``, resolved per call.
    """
    import torch.distributed.nn.functional  # noqa: F401


def _buckets(grads: Sequence[Tensor], limit: int) -> list[list[Tensor]]:
    """Consecutive runs of same-dtype, same-device gradients of at most ``limit`` bytes."""
    out: list[list[Tensor]] = []
    size = 0
    for g in grads:
        nbytes = g.numel() * g.element_size()
        last = out[-1][-1] if out else None
        if (last is None or last.dtype != g.dtype or last.device != g.device
                or size + nbytes > limit):
            out.append([])
            size = 0
        out[-1].append(g)
        size += nbytes
    return out


@torch.no_grad()
def all_reduce_grads(params: Sequence[nn.Parameter], bucket_bytes: int = BUCKET_BYTES
                     ) -> None:
    """Σ over ranks of ``p.grad`` for every parameter, in float32 (or wider) flat buckets.

    FSDP-sharded parameters (DTensor gradients) are skipped: their backward already
    reduce-scattered the sum.
    """
    import torch.distributed as dist
    grads = [p.grad for p in params if p.grad is not None and not is_dtensor(p.grad)]
    for bucket in _buckets(grads, bucket_bytes):
        wide = torch.promote_types(bucket[0].dtype, torch.float32)  # bf16 sums lose bits
        flat = torch.cat([g.reshape(-1).to(wide) for g in bucket])
        dist.all_reduce(flat)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def shard_bounds(costs: Sequence[int], world: int) -> list[int]:
    """Split points of ``len(costs)`` items into ``world`` contiguous, non-empty runs of
    about equal total cost: rank r takes items ``bounds[r]:bounds[r + 1]``.

    >>> shard_bounds([1] * 7, 3)
    [0, 2, 5, 7]
    """
    n = len(costs)
    if n < world:
        raise ValueError(f"{n} samples cannot be split over {world} ranks")
    cum = np.cumsum(np.asarray(costs, dtype=np.float64))
    bounds = [0]
    for r in range(1, world):
        target = cum[-1] * r / world
        i = int(np.searchsorted(cum, target))  # item i crosses the target
        cut = i + 1 if i < n and cum[i] - target < target - (cum[i - 1] if i else 0) else i
        bounds.append(min(max(cut, bounds[-1] + 1), n - (world - r)))
    return bounds + [n]


def shard_seed_batch(sb: SeedBatch, dist: Dist) -> SeedBatch:
    """This rank's contiguous share of a seed's samples, balanced by prompt + response
    length (the decoder's cost). Every rank reads and checks the whole batch first, so a
    bad row fails every rank alike."""
    if not dist.active:
        return sb
    costs = [len(p) + len(r) for p, r in zip(sb.prompts, sb.responses)]
    bounds = shard_bounds(costs, dist.world_size)
    lo, hi = bounds[dist.rank], bounds[dist.rank + 1]
    t_lo, t_hi = np.searchsorted(sb.flat.row, [lo, hi])  # tokens are in row order
    return SeedBatch(flat=sb.flat.take(slice(int(t_lo), int(t_hi))),
                     prompts=sb.prompts[lo:hi], responses=sb.responses[lo:hi],
                     sample_ids=sb.sample_ids[lo:hi])


def empty_batch() -> MicroBatch:
    """A one-token sequence predicting nothing: a forward that only runs the collectives."""
    one = torch.ones(1, 1, dtype=torch.long)
    return MicroBatch(input_ids=torch.zeros_like(one), attention_mask=one,
                      position_ids=torch.zeros_like(one),
                      target_index=torch.zeros(0, dtype=torch.long))


def lockstep(batches: list[MicroBatch], dist: Dist) -> list[MicroBatch]:
    """Pad every rank to the same number of micro-batches under FSDP, whose every forward
    and backward is a collective (all-gather, reduce-scatter) that all ranks must join."""
    if not dist.fsdp:
        return batches
    return batches + [empty_batch()] * (dist.max_int(len(batches)) - len(batches))


def check_world(dist: Dist, batch_size: int, n_rows: int) -> None:
    """Every rank needs at least one sample of every seed's batch."""
    samples = min(batch_size, n_rows)
    if samples < dist.world_size:
        raise FieldError("a seed's batch holds {samples} samples ({batch_size} {size}, "
                         "{rows} log rows) but {world} processes replay it: each needs one; "
                         "raise {batch_size} or lower torchrun's --nproc_per_node",
                         samples=samples, size=batch_size, rows=n_rows,
                         world=dist.world_size)


def _combine(seed: int, records: list[dict]) -> dict:
    """One done-marker record from every rank's (rank order): sums, merged |Δ| statistics,
    slowest timings; ``steps`` (lr and ‖Δθ‖ per update: the same on every rank, the
    gradients being summed) from rank 0."""
    keys = dict.fromkeys(k for r in records for k in r["timings"])
    out = {"seed": seed, "samples": sum(r["samples"] for r in records),
           "tokens": sum(r["tokens"] for r in records),
           "timings": {k: max(r["timings"].get(k, 0.0) for r in records) for k in keys},
           "world_size": len(records), "ranks": records}
    out.update({k: merge([r[k] for r in records]) for k in STAT_KEYS if k in records[0]})
    if "steps" in records[0]:
        out["steps"] = records[0]["steps"]
    return out


def finish_seed(layout: RunLayout, dist: Dist, seed: int, record: dict, device: str) -> dict:
    """Report this rank's parts of ``seed`` written; rank 0 writes the seed's done marker
    once every rank has. Returns the combined record on rank 0, this rank's elsewhere."""
    record = {**record, "rank": dist.rank, "peak_memory": peak_memory(device)}
    records = dist.gather(record)
    if records is None:
        return record
    combined = _combine(seed, records)
    layout.mark_done(seed, combined)
    return combined
