"""``pdm-replay masks --engine ray`` on a real two-node Ray cluster on loopback
(``ray.cluster_utils.Cluster``: a head and a second node, one CPU and 80 MB of object
store each, so the two map tasks in flight run on different nodes): equal to the local
command bit for bit, surviving a killed worker and a killed driver.

One cluster for the module (starting it takes ~30 s here). The sample's equality is in
the default suite; the rest is marked slow (each job takes tens of seconds on 2 shared
cores)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.commands.masks_ray import run_masks_ray
from pdm_replay.testing.fixtures import write_synthetic_log
from pdm_replay.io.staged import PROGRESS_DIR, staging_path

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
psutil = pytest.importorskip("psutil")

SAMPLE = Path(__file__).parents[1] / "sample_data" / "rollouts"
SORT = [("sample_id", "ascending"), ("pos", "ascending")]
NODE = {"num_cpus": 1, "object_store_memory": 80 << 20}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    c.add_node(**NODE)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    yield c
    ray.shutdown()
    c.shutdown()


def _rows(out: Path) -> pa.Table:
    parts = sorted(out.glob("step=*/*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts]).sort_by(SORT)


def assert_same_as_local(out: Path, local: Path) -> None:
    """Row for row, bit for bit (sorted: the parts have no global order), same schema
    and footer in every part; the manifest lists exactly the parts."""
    import json
    expected = pq.read_table(local)
    for part in out.glob("step=*/*.parquet"):
        assert pq.read_schema(part).equals(expected.schema, check_metadata=True)
    got = _rows(out)
    assert got.num_rows == expected.num_rows
    assert got.equals(expected.sort_by(SORT))
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["parts"]) == sorted(
        str(p.relative_to(out)) for p in out.glob("step=*/*.parquet"))


def test_sample_equals_local(cluster, tmp_path: Path) -> None:
    local = tmp_path / "local.parquet"
    want = run_masks(MasksConfig(log=SAMPLE, out=local))
    got = run_masks_ray(MasksConfig(log=(SAMPLE,), out=tmp_path / "ray", engine="ray",
                                    ray_address=cluster.address))
    assert_same_as_local(tmp_path / "ray", local)
    assert (got.tokens, got.keep_fraction, got.disagreements) == (
        want.tokens, want.keep_fraction, want.disagreements)
    assert not staging_path(tmp_path / "ray").exists()


def _log(d: Path, files: int, n_samples: int, response_len: int) -> Path:
    for i in range(files):
        f = write_synthetic_log(d / f"part-{i:03d}.parquet", n_samples=n_samples,
                                response_len=response_len, rng_seed=i, vocab_size=200,
                                chunk_samples=2)  # bounds the generator's (n, T, V) logits
        t = pq.read_table(f)  # ids unique across files, as in a real log
        ids = pc.binary_join_element_wise(f"f{i}-", t.column("sample_id"), "")
        pq.write_table(t.set_column(0, t.schema.field("sample_id"), ids), f)
    return d


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """8 files of 24 x 4,096-token responses (786k tokens) and the local command's output."""
    d = tmp_path_factory.mktemp("many")
    log = _log(d / "log", files=8, n_samples=24, response_len=4096)
    run_masks(MasksConfig(log=log, out=d / "local.parquet", masks=["none", "dppo_topk_kl",
                                                                   "pdm_kl_agg"]))
    return log, d / "local.parquet"


@pytest.mark.slow
def test_long_responses_equal_local(cluster, tmp_path: Path) -> None:
    log = _log(tmp_path / "log", files=2, n_samples=3, response_len=70_000)  # > WORK_TOKENS
    run_masks(MasksConfig(log=log, out=tmp_path / "local.parquet"))
    run_masks_ray(MasksConfig(log=(log,), out=tmp_path / "ray", engine="ray",
                              ray_address=cluster.address))
    assert_same_as_local(tmp_path / "ray", tmp_path / "local.parquet")


def _map_workers() -> list:
    return [p for p in psutil.process_iter(["cmdline"])
            if "MapBatches" in " ".join(p.info["cmdline"] or [])]


@pytest.mark.slow
def test_a_killed_worker_is_retried_without_duplicates(cluster, tmp_path: Path,
                                                       many_files) -> None:
    log, local = many_files
    cfg = MasksConfig(log=(log,), out=tmp_path / "ray", engine="ray",
                      ray_address=cluster.address, masks=["none", "dppo_topk_kl",
                                                          "pdm_kl_agg"])
    job = threading.Thread(target=run_masks_ray, args=(cfg,))
    job.start()
    killed = None
    while job.is_alive() and killed is None:
        for proc in _map_workers():
            proc.send_signal(signal.SIGKILL)
            killed = proc.pid
            break
        time.sleep(0.02)
    job.join()
    assert killed is not None, "the job ended before a map task could be killed"
    assert_same_as_local(cfg.out, local)


@pytest.mark.slow
def test_a_killed_driver_resumes(cluster, tmp_path: Path, many_files) -> None:
    log, local = many_files
    out = tmp_path / "ray"
    masks = "none,dppo_topk_kl,pdm_kl_agg"
    driver = subprocess.Popen(
        [sys.executable, "-m", "pdm_replay", "masks", str(log), "--out", str(out),
         "--masks", masks, "--engine", "ray", "--ray-address", cluster.address],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = staging_path(out) / PROGRESS_DIR
    while driver.poll() is None and len(list(progress.glob("*.json"))) < 2:
        time.sleep(0.02)
    driver.kill()
    driver.wait()
    done = {p.name: p.stat().st_mtime_ns for p in progress.glob("*.json")}
    assert 2 <= len(done) < 8 and not out.exists(), "kill the driver mid-job"
    run_masks_ray(MasksConfig(log=(log,), out=out, engine="ray", resume=True,
                              ray_address=cluster.address, masks=masks.split(",")))
    assert_same_as_local(out, local)
    import json
    assert len(json.loads((out / "manifest.json").read_text())["inputs"]) == 8
