"""CPU threads for torch on shared machines: how many, and how idle threads wait.

torch sizes its intra-op pool from the machine's cores, not from what this process may
use: a container limited by a cgroup CPU quota, or a job pinned to a few cores by
``taskset`` / a scheduler, would run more threads than it gets CPUs. And OpenMP threads
(torch's CPU wheel uses GNU libgomp) spin-wait between parallel regions: next to other
busy processes they burn the time slices their partner thread needs, so a replay next to
a training job ran up to 35x slower instead of the fair-share ~2-3x.

:func:`available_cpus` reads the affinity mask and the cgroup quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``); :func:`wait_policy_env` gives the
environment that makes idle OpenMP threads sleep instead of spin. That environment must
be in place before torch (which loads libgomp, which reads it once) is first imported,
so this module imports nothing heavy; :mod:`pdm_replay.cli` applies it first thing.

Examples
--------
>>> choose_threads(None, CpuBudget(affinity=8, quota=2.5)).threads
2
>>> choose_threads(4, CpuBudget(affinity=8, quota=None)).source
'--threads'
>>> wait_policy_env({})
{'OMP_WAIT_POLICY': 'PASSIVE', 'GOMP_SPINCOUNT': '0'}
>>> wait_policy_env({"OMP_WAIT_POLICY": "ACTIVE"})  # the user's choice stands, whole
{}
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Mapping, MutableMapping

from pdm_replay.errors import FieldError

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Idle OpenMP threads sleep (futex) at once instead of spinning: libgomp's default spins
# about 300,000 iterations (~3 ms) first. GOMP_SPINCOUNT=0 is what PASSIVE implies in
# libgomp, spelled out. A short spin (10,000) was measured too and was slower both next to
# a CPU hog and on the shared machine without one (benchmarks/README.md, contention).
WAIT_POLICY_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}


@dataclass(frozen=True)
class CpuBudget:
    """CPUs this process may use: ``affinity`` (CPUs in its mask) and ``quota`` (cgroup
    CPU limit in CPUs, ``None`` when unlimited)."""

    affinity: int
    quota: float | None

    @property
    def cpus(self) -> int:
        """Whole CPUs usable at once: the affinity, capped by the quota (at least 1)."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota)))


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count used and why (recorded in the replay manifest)."""

    threads: int
    source: str  # "--threads" | "affinity" | "cgroup quota"
    affinity: int
    quota: float | None

    def to_json(self) -> dict:
        return asdict(self)


def affinity_cpus() -> int:
    """CPUs in this process's affinity mask (``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _own_cgroup(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """This process's cgroup paths: ``(v2 path, v1 cpu-controller path)``."""
    v2 = v1 = None
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _v2_quota(root: Path, path: str) -> float | None:
    """The tightest ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") from ``path`` up to root."""
    best = None
    node = root / path.lstrip("/")
    while True:
        text = _read(node / "cpu.max")
        if text and not text.startswith("max"):
            quota, period = (int(x) for x in text.split())
            best = quota / period if best is None else min(best, quota / period)
        if node == root or root not in node.parents:
            return best
        node = node.parent


def _v1_quota(root: Path, path: str) -> float | None:
    """``cpu.cfs_quota_us / cpu.cfs_period_us`` of the cpu controller (-1: unlimited)."""
    for base in (root / "cpu" / path.lstrip("/"), root / "cpu,cpuacct" / path.lstrip("/"),
                 root / "cpu", root / "cpu,cpuacct"):
        quota, period = _read(base / "cpu.cfs_quota_us"), _read(base / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return None if int(quota) <= 0 else int(quota) / int(period)
    return None


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
                 ) -> float | None:
    """The cgroup CPU limit of this process in CPUs (e.g. 1.5), ``None`` when unlimited or
    unknown (v2 when the unified hierarchy holds the process, else v1)."""
    v2, v1 = _own_cgroup(proc_cgroup)
    if v2 is not None and (root / "cgroup.controllers").exists():
        return _v2_quota(root, v2)
    if v1 is not None:
        return _v1_quota(root, v1)
    return None


def cpu_budget() -> CpuBudget:
    """This process's :class:`CpuBudget`, read from the affinity mask and the cgroup."""
    return CpuBudget(affinity=affinity_cpus(), quota=cgroup_quota())


def choose_threads(requested: int | None, budget: CpuBudget, processes: int = 1
                   ) -> ThreadChoice:
    """``requested`` (``--threads``) when given, else the usable CPUs shared out over the
    ``processes`` of this machine (torchrun ranks on CPU), at least one each."""
    if requested is not None:
        if requested < 1:
            raise FieldError("{threads} {got}: expected at least 1", got=requested)
        return ThreadChoice(requested, "--threads", budget.affinity, budget.quota)
    capped = budget.quota is not None and budget.cpus < budget.affinity
    return ThreadChoice(max(1, budget.cpus // max(1, processes)),
                        "cgroup quota" if capped else "affinity", budget.affinity,
                        budget.quota)


def wait_policy_env(environ: Mapping[str, str]) -> dict[str, str]:
    """:data:`WAIT_POLICY_ENV`, or nothing when ``environ`` sets either variable already: a
    user's own policy wins, and a spin count of ours would change what it means."""
    if any(k in environ for k in WAIT_POLICY_ENV):
        return {}
    return dict(WAIT_POLICY_ENV)


def apply_wait_policy(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the passive wait policy in ``environ`` (default ``os.environ``) where unset;
    returns what was set. Effective only before torch is first imported."""
    environ = os.environ if environ is None else environ
    added = wait_policy_env(environ)
    environ.update(added)
    return added


def wait_policy_record(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The wait-policy variables as this process sees them (for the manifest)."""
    environ = os.environ if environ is None else environ
    return {k: environ.get(k) for k in WAIT_POLICY_ENV}


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the previous count.

    The metrics are elementwise passes over L2-sized chunks, already run by parallel
    workers: extra intra-op threads gain little and oversubscribe small machines badly.
    """
    import torch  # here, not at the top: this module must load before torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
