"""`recompute --engine ray` on a real two-node Ray cluster on loopback
(``ray.cluster_utils.Cluster``: a head and a second node, one CPU each): the output equals
the local engine's, also when an actor is killed mid-job, and a bad row fails with the
local engine's message, leaving nothing.

Slow: on this 2-core machine under load (2026-12-06) the cluster took 20 s to start and
each test about 50 s (two actors, each importing torch and transformers, twice).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

# Imported (and assertion-rewritten) now, before Ray's driver threads run: CPython 3.11.7
# parses source for pytest's rewrite hook in a way that is not thread-safe (the
# hypothesis plugin imports hypothesis lazily between tests; twice here that import died
# with "SystemError: AST constructor recursion depth mismatch" while Ray ran: CPython
# gh-106905, pytest-dev/pytest#10763).
import hypothesis  # noqa: F401
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdm_replay.commands.recompute import RecomputeConfig, run_recompute
from test_recompute_command import TEMPLATE, sample_subset

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20}  # Ray's minimum store is 75 MiB


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args=NODE)
    c.add_node(**NODE)
    c.wait_for_nodes()
    try:
        yield c.address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample subset and a copy with a NaN in its last row."""
    d = tmp_path_factory.mktemp("recompute_ray")
    good = sample_subset(d / "log.parquet")
    rows = pq.read_table(good).to_pylist()
    rows[-1]["topk_logprobs"][2][0] = float("nan")
    bad = d / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(good)), bad)
    return good, bad


def _config(log: Path, out: Path, engine: str, address: str | None = None) -> RecomputeConfig:
    # task_rows 8: 6 units over 2 actors, so an actor runs several units of a step
    return RecomputeConfig(log=log, checkpoint=TEMPLATE, out=out, engine=engine,
                           task_rows=8, workers=2, ray_address=address)


def test_ray_output_equals_the_local_engine(cluster: str, logs: tuple[Path, Path],
                                            tmp_path: Path) -> None:
    good, _ = logs
    local = run_recompute(_config(good, tmp_path / "local.parquet", "local"))
    remote = run_recompute(_config(good, tmp_path / "ray.parquet", "ray", cluster))
    assert (remote.rows, remote.tokens, remote.units) == (local.rows, local.tokens, 6)
    a, b = pq.read_table(tmp_path / "ray.parquet"), pq.read_table(tmp_path / "local.parquet")
    assert a.schema.metadata == b.schema.metadata
    assert a.equals(b)  # row for row, bit for bit


def test_ray_bad_row_gives_the_local_message(cluster: str, logs: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    _, bad = logs
    said = {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.parquet"
        with pytest.raises(ValueError) as err:
            run_recompute(_config(bad, out, engine, cluster))
        said[engine] = str(err.value)
        assert not out.exists()
    assert said["ray"] == said["local"] and str(bad) in said["ray"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    _assert_disconnected()


def _assert_disconnected() -> None:
    """After a failed Ray run no Ray Data thread is left and the driver has disconnected:
    a thread calling into Ray after ``ray.shutdown`` would end this process."""
    from pdm_replay.cluster.ray_engine import data_threads
    assert data_threads() == [] and not ray.is_initialized()


def _kill_first_actor(stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL the first recompute actor process seen (Ray titles it after the class)."""
    import psutil  # a Ray dependency
    while not stop.is_set() and not killed:
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if "RecomputeActor" in " ".join(proc.info["cmdline"] or []):
                os.kill(proc.info["pid"], signal.SIGKILL)
                killed.append(proc.info["pid"])
                return
        time.sleep(0.2)


def test_a_killed_actor_is_replaced_and_no_row_is_lost_or_doubled(
        cluster: str, logs: tuple[Path, Path], tmp_path: Path) -> None:
    """An actor killed while the job runs (loading its step, or computing): Ray Data
    restarts it and reruns its unit; the output still equals the local engine's."""
    good, _ = logs
    local = tmp_path / "local.parquet"
    run_recompute(_config(good, local, "local"))
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_first_actor, args=(stop, killed), daemon=True)
    killer.start()
    try:
        run_recompute(_config(good, tmp_path / "ray.parquet", "ray", cluster))
    finally:
        stop.set()
        killer.join()
    assert killed, "no actor process was seen"
    assert pq.read_table(tmp_path / "ray.parquet").equals(pq.read_table(local))


def test_a_killed_driver_resumes_on_ray(cluster: str, logs: tuple[Path, Path],
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """The driver dies after staging 2 of the 6 units (here: its unit sink raises); the
    resumed Ray run computes only the other 4 and writes the local engine's bytes."""
    from pdm_replay.commands.recompute import UnitSink
    from pdm_replay.io.staged import PROGRESS_DIR, staging_path
    good, _ = logs
    local, out = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    run_recompute(_config(good, local, "local"))
    finished: list[str] = []
    real = UnitSink._finish

    def dies_after_two(self, key, table):
        if len(finished) == 2:
            raise RuntimeError("driver killed")
        finished.append(key)
        real(self, key, table)

    monkeypatch.setattr(UnitSink, "_finish", dies_after_two)
    with pytest.raises(RuntimeError, match="driver killed"):
        run_recompute(_config(good, out, "ray", cluster))
    _assert_disconnected()
    markers = sorted(p.stem for p in (staging_path(out) / PROGRESS_DIR).glob("*.json"))
    assert markers == sorted(finished) and not out.exists()
    monkeypatch.setattr(UnitSink, "_finish", real)
    sent: list[int] = []
    monkeypatch.setattr(UnitSink, "add", lambda self, t, add=UnitSink.add: (
        sent.append(t.num_rows), add(self, t))[1])
    cfg = replace(_config(good, out, "ray", cluster), resume=True)
    assert run_recompute(cfg).rows == 48 and sum(sent) == 32  # 4 units of 8 rows
    assert out.read_bytes() == local.read_bytes()
    assert not staging_path(out).exists()
