"""Multi-process replay: sharding, the all-reduced step, torchrun runs equal to one process,
FSDP, and a rank crashing mid-run then resumed. Processes talk over loopback only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import one_step_checkpoint

from pdm_replay.masks import MASK_SPECS, weight_masks
from pdm_replay.replay.distributed import (Dist, all_reduce_grads, empty_batch, shard_bounds,
                                           shard_seed_batch)
from pdm_replay.schema import weight_column
from tolerances import RUN_ATOL

# PYTHONFAULTHANDLER: a rank killed by a signal (SIGABRT from glibc or a C++ runtime)
# prints every thread's Python stack, so a failure says where it happened.
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
                "PYTHONFAULTHANDLER": "1"}
ATOL = RUN_ATOL  # one process vs two: tests/tolerances.py
# The same under Adam's first step, which divides each gradient coordinate by |g| + eps:
# where |g| is near the float32 rounding of the all-reduced sum, the two runs' steps differ
# in that coordinate by up to ~lr, not by lr x float32 eps. Measured (COMMON's lr 1e-2):
# 7.1e-5 on support_logp_post (an AMD EPYC, AVX2), under 1.5e-5 on the machine that set
# ATOL. 2^-12 = 2.4e-4 is 3.5x that and 40x below lr, the scale of a step's real effect.
ADAM_ATOL = 2.0 ** -12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- sharding ----------------------------------------------------------------------------

@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(1, 6))
@settings(max_examples=200, deadline=None)
def test_shard_bounds_contiguous_nonempty_balanced(costs, world):
    if len(costs) < world:
        with pytest.raises(ValueError, match="cannot be split"):
            shard_bounds(costs, world)
        return
    b = shard_bounds(costs, world)
    assert b[0] == 0 and b[-1] == len(costs) and len(b) == world + 1
    assert all(lo < hi for lo, hi in zip(b, b[1:]))  # every rank gets a sample
    loads = [sum(costs[lo:hi]) for lo, hi in zip(b, b[1:])]
    if min(loads) > 0 and all(hi - lo > 1 for lo, hi in zip(b, b[1:])):
        # No cut could be moved by one item to come closer to the ideal share.
        assert max(loads) - sum(costs) / world <= max(costs)


def test_shard_seed_batch_partitions_the_global_batch(replay_log):
    from pdm_replay.replay.data import seed_batch
    from pdm_replay.io.log import RolloutLog
    from pdm_replay.replay.log_index import LogIndex
    sb = seed_batch(LogIndex.of(RolloutLog.open(replay_log)), 11, 0, 384)
    shards = [shard_seed_batch(sb, Dist(rank=r, world_size=3, backend="gloo"))
              for r in range(3)]
    assert all(len(s.sample_ids) >= 1 for s in shards)
    assert sum((s.sample_ids for s in shards), []) == sb.sample_ids
    assert sum((s.responses for s in shards), []) == sb.responses
    for name in ("token_id", "pos", "advantage", "loss_mask", "topk_ids"):
        joined = np.concatenate([getattr(s.flat, name) for s in shards])
        assert np.array_equal(joined, getattr(sb.flat, name)), name
    for s in shards:  # each shard's tokens belong to its own samples
        assert set(s.flat.sample_id) <= set(s.sample_ids)


def test_empty_batch_runs_the_body_and_yields_zero_gradients(model_dir):
    """The FSDP lockstep filler: a forward with no target and a zero-loss backward."""
    from pdm_replay.math.support import build_support
    from pdm_replay.replay.checkpoint import load_policy
    from pdm_replay.replay.forward import (LossInputs, PassConfig, accumulate_gradients,
                                           forward_stats)
    policy = load_policy(model_dir)
    batch = empty_batch()
    none = torch.zeros(0, dtype=torch.long)
    stats = forward_stats(policy, [batch], build_support(none, none[:, None].expand(0, 3)),
                          PassConfig())
    assert stats.logp_s.shape == (0, 4) and stats.sum_pi2.shape == (0,)
    inputs = LossInputs(none, torch.zeros(0, dtype=torch.float64),
                        torch.zeros(0, dtype=torch.float64))
    params = list(policy.model.parameters())
    for lockstep, expect_grads in ((False, False), (True, True)):
        for p in params:
            p.grad = None
        accumulate_gradients(policy, [batch], inputs, torch.zeros(0, dtype=torch.float64), 1,
                             PassConfig(lockstep=lockstep))
        body = list(policy.model.get_decoder().layers.parameters())
        assert all((p.grad is not None) == expect_grads for p in body)
        assert all(p.grad is None or not p.grad.any() for p in params)


# --- the all-reduced step, two real gloo ranks on a toy model -----------------------------

def _toy_problem():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(10, 4)
    keep = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 1, 1], dtype=torch.float32)
    tokens = torch.tensor([1, 3, 2, 1, 4, 1, 2, 2, 1, 3])  # loss tokens per sample
    return model, x, keep, tokens


def _toy_step(model, x, keep, n_tokens, grad_reduce, optimizer):
    from pdm_replay.replay.step import ParamSnapshot, simulated_step
    params = list(model.parameters())
    snap = ParamSnapshot(params)

    def backward() -> None:
        if x.shape[0]:
            (-(keep * model(x)[:, 0]).sum() / n_tokens).backward()
    delta = simulated_step(params, snap, backward, optimizer=optimizer, lr=0.1,
                           grad_reduce=grad_reduce,
                           measure=lambda s: [d.clone() for d in s.delta()])
    return delta, snap.matches()


def _toy_rank(rank: int, world: int, out: str) -> None:
    import torch.distributed as dist
    torch.set_num_threads(1)
    # A file store, not a TCP port: a port found free and released can be taken by any
    # other process before rank 0 binds it (other jobs on a shared machine: issue 35). The
    # timeout bounds a wait for the other rank, which may still be starting on a loaded
    # machine; a rank that fails ends the test at once (start_processes joins).
    dist.init_process_group("gloo", init_method=f"file://{Path(out) / 'store'}", rank=rank,
                            world_size=world, timeout=timedelta(minutes=30))
    me = Dist(rank=rank, world_size=world, backend="gloo")
    try:
        model, x, keep, tokens = _toy_problem()
        b = shard_bounds(tokens.tolist(), world)
        sl = slice(b[rank], b[rank + 1])
        n = me.sum_int(int(tokens[sl].sum()))
        result = {"n": n, "gathered": me.gather(rank * 10), "bcast": me.broadcast(rank + 7)}
        for opt in ("sgd", "adam"):
            result[opt] = _toy_step(model, x[sl], keep[sl], n, me.grad_reduce(), opt)
        result["unreduced"] = _toy_step(model, x[sl], keep[sl], n, None, "sgd")[0]
        try:
            me.from_main(lambda: (_ for _ in ()).throw(ValueError("bad input on rank 0")))
        except ValueError as exc:
            result["error"] = str(exc)
        torch.save(result, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_step_equals_one_process(tmp_path, monkeypatch):
    import torch.multiprocessing as mp
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # the spawned ranks inherit it
    mp.start_processes(_toy_rank, args=(2, str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    model, x, keep, tokens = _toy_problem()
    n = int(tokens.sum())
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert [r["n"] for r in ranks] == [n, n]
    assert ranks[0]["gathered"] == [0, 10] and ranks[1]["gathered"] is None
    assert [r["bcast"] for r in ranks] == [7, 7]
    assert [r["error"] for r in ranks] == ["bad input on rank 0"] * 2
    for opt in ("sgd", "adam"):
        ref, _ = _toy_step(model, x, keep, n, None, opt)
        for r in ranks:
            delta, restored = r[opt]
            assert restored  # θ bit-exact after the step on every rank
            for d, e in zip(delta, ref):
                assert torch.allclose(d, e, atol=1e-7, rtol=1e-6), opt
    # Without the all-reduce a rank steps on its own shard only: a different step.
    ref, _ = _toy_step(model, x, keep, n, None, "sgd")
    assert max((d - e).abs().max() for d, e in zip(ranks[0]["unreduced"], ref)) > 1e-3


def test_all_reduce_grads_is_identity_on_one_rank(tmp_path):
    """A 1-process gloo group: bucketed flatten/copy-back leaves every gradient intact."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        ps = [torch.nn.Parameter(torch.randn(s)) for s in ((3, 2), (5,), (2, 2))]
        ps.append(torch.nn.Parameter(torch.randn(4).bfloat16()))
        for p in ps:
            p.grad = torch.randn_like(p)
        before = [p.grad.clone() for p in ps]
        all_reduce_grads(ps, bucket_bytes=16)  # tiny buckets: several of them
        assert all(torch.equal(p.grad, b) for p, b in zip(ps, before))
    finally:
        dist.destroy_process_group()



# --- shutdown: the process group is freed in Dist.close(), not at interpreter exit -----

def _close_rank(rank: int, world: int, port: int, model_dir: str, out: str,
                fsdp: bool) -> None:
    import weakref

    import torch.distributed as dist

    from pdm_replay.replay.checkpoint import load_policy
    from pdm_replay.replay.distributed import init_from_env
    from pdm_replay.replay.fsdp import shard_policy
    torch.set_num_threads(1)
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    os.environ.update(env)  # init_process_group reads the store address from os.environ
    me = init_from_env("cpu", fsdp=fsdp, env=env)
    policy = load_policy(Path(model_dir))  # imports transformers' modeling after the group
    if fsdp:
        shard_policy(policy, "cpu", me.device_mesh())
    policy.model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.sum().backward()
    me.sum_int(1)
    group = weakref.ref(dist.group.WORLD)
    del policy
    me.close()
    torch.save({"freed": group() is None, "initialized": dist.is_initialized()},
               f"{out}/rank{rank}.pt")


@pytest.mark.parametrize("fsdp", [False, True])
def test_close_frees_the_process_group(tmp_path, monkeypatch, model_dir, fsdp):
    """After a forward and backward (sharded or not), ``close()`` frees the gloo group, so
    its worker threads are joined while the interpreter is alive. Left to exit (the group
    kept by ``torch.distributed.nn.functional``'s defaults and, under FSDP, by DTensor's
    caches through the mesh), a worker met the finalizing interpreter: SIGABRT after a
    complete ``--fsdp`` run in 4 of 30 torchrun runs before the fix, 0 of 30 after."""
    import torch.multiprocessing as mp
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # the spawned ranks inherit it
    mp.start_processes(_close_rank, args=(2, free_port(), str(model_dir), str(tmp_path), fsdp),
                       nprocs=2, join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert ranks == [{"freed": True, "initialized": False}] * 2

def test_auto_chunk_tokens_is_recorded(tmp_path, replay_log, model_dir):
    from pdm_replay.replay.config import ReplayConfig
    from pdm_replay.commands.replay import run_replay
    res = run_replay(ReplayConfig(log=replay_log, checkpoint=model_dir, out=tmp_path / "run",
                                  seeds=1, batch_size=4, update_masks=("none",),
                                  attribution=False, fsdp=True))
    assert "--fsdp without torchrun (one process): nothing to shard" in res.manifest["warnings"]
    chunk = res.manifest["chunk_tokens"]
    assert res.manifest["config"]["chunk_tokens"] is None and 16 <= chunk <= 8192
    assert res.manifest["distributed"] == {"world_size": 1, "backend": None, "fsdp": False}
    marker = json.loads((tmp_path / "run" / "done" / "seed=0.json").read_text())
    assert marker["world_size"] == 1 and marker["ranks"][0]["peak_memory"]["rss_bytes"] > 0


# --- torchrun end to end (slow: every launch starts fresh interpreters) ------------------

COMMON = ["--seeds", "2", "--batch-size", "5", "--micro-batch-size", "1", "--lr", "1e-2",
          "--chunk-tokens", "16"]


def torchrun(args: list[str], nproc: int = 2, script: Path | None = None,
             timeout: int = 400) -> subprocess.CompletedProcess:
    target = [str(script)] if script else ["-m", "pdm_replay", "replay"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *target, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **LOOPBACK_ENV})


def failure_output(res: subprocess.CompletedProcess, keep: int = 6000) -> str:
    """A failed torchrun's stderr: the ranks' own messages (a traceback, glibc's or a C++
    runtime's abort message) come first, torchrun's error summary last; keep both ends."""
    err = res.stderr
    return err if len(err) <= 2 * keep else f"{err[:keep]}\n[...]\n{err[-keep:]}"


def read_parts(run: Path, kind: str) -> pl.DataFrame:
    key = ["seed", "sample_id", "pos"] + (["update_mask"] if kind == "updates" else [])
    return pl.read_parquet(run / kind / "*" / "*.parquet").sort(key)


def assert_same_results(a: Path, b: Path, tol: float = ATOL) -> None:
    """Same rows, equal non-float columns, float columns (and lists of floats, such as
    ``support_logp_post``) within ``tol``, NaN alike; IS weights within ``tol`` relative.

    A weight w = g(r) of the ratio r = exp(log π − log µ) is r-proportional or constant
    piecewise (|d log w / d log r| <= 1), so a log π error of at most tol moves it by at
    most tol·|w| (first order; float32's own rounding of w, 6e-8 relative, is far below):
    an absolute bound would fail on a weight of 728 that differs by its 7th digit."""
    weights = {weight_column(m) for m in weight_masks(MASK_SPECS)}
    for kind in ("tokens", "updates"):
        x, y = read_parts(a, kind), read_parts(b, kind)
        assert x.columns == y.columns and x.height == y.height > 0, kind
        for c in x.columns:
            u, v = x[c], y[c]
            if isinstance(u.dtype, pl.List) and u.dtype.inner.is_float():
                assert u.list.len().equals(v.list.len()), (kind, c)  # same ragged shape
                u, v = u.explode(), v.explode()
            if u.dtype.is_float():
                u, v = u.fill_null(np.nan).to_numpy(), v.fill_null(np.nan).to_numpy()
                assert np.array_equal(np.isnan(u), np.isnan(v)), (kind, c)
                atol, rtol = (0, tol) if c in weights else (tol, 0)
                assert np.allclose(u, v, atol=atol, rtol=rtol, equal_nan=True), (kind, c)
            else:
                assert u.equals(v), (kind, c)


def one_process(log: Path, ckpt: Path, out: Path, args: list[str]) -> Path:
    from typer.testing import CliRunner

    from pdm_replay.cli import app
    res = CliRunner().invoke(app, ["replay", str(log), "--checkpoint", str(ckpt), "--out",
                                   str(out), *args])
    assert res.exit_code == 0, res.output
    return out


def assert_sharded(run: Path, seeds: int, world: int) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["distributed"]["world_size"] == world
    for s in range(seeds):
        names = sorted(p.name for p in (run / "tokens" / f"seed={s}").iterdir())
        assert names == [f"part-{r}.parquet" for r in range(world)]
        marker = json.loads((run / "done" / f"seed={s}.json").read_text())
        assert [r["rank"] for r in marker["ranks"]] == list(range(world))
        assert all(r["samples"] >= 1 for r in marker["ranks"])


@pytest.mark.slow
def test_torchrun_two_processes_equal_one_process(tmp_path, replay_log, model_dir,
                                                  behavior_dir):
    """DDP semantics: SGD (sensitive to the global normalizer, unlike Adam's first step),
    exact columns, attribution columns (self/cross: SGD only); sharded parts per rank.
    lr 1e-2 keeps the attribution terms O(1): at lr 0.5 they reach ~144, where float32
    leaves ~5e-5 of absolute agreement (4e-7 relative)."""
    # --attribution-sample 2: fewer than the candidates, so the self term's token sample
    # must be drawn over the global batch to match (not 2 per rank); the actual update
    # (with its linear term along θ_{t+1} − θ_t) runs sharded too
    nxt = one_step_checkpoint(model_dir, tmp_path / "next", replay_log)
    args = [*COMMON, "--optimizer", "sgd", "--behavior-checkpoint", str(behavior_dir),
            "--attribution-sample", "2", "--next-checkpoint", str(nxt),
            "--trainer-mask", "pdm_kl_agg"]
    ref = one_process(replay_log, model_dir, tmp_path / "one", args)
    res = torchrun([str(replay_log), "--checkpoint", str(model_dir), "--out",
                    str(tmp_path / "two"), *args])
    assert res.returncode == 0, failure_output(res)
    assert "replayed" in res.stdout and res.stdout.count("replayed") == 1  # rank 0 prints
    assert_sharded(tmp_path / "two", 2, 2)
    assert_same_results(ref, tmp_path / "two")
    one = json.loads((ref / "manifest.json").read_text())
    two = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert one["tokens"] == two["tokens"]
    assert one["summary"] == two["summary"]


@pytest.mark.slow
def test_torchrun_fsdp_equals_one_process(tmp_path, replay_log, model_dir):
    """FSDP2 on CPU/gloo: uneven micro-batch counts per rank (lockstep padding), SGD; the
    next checkpoint sharded like the policy for the actual update."""
    nxt = one_step_checkpoint(model_dir, tmp_path / "next", replay_log)
    args = [*COMMON, "--optimizer", "sgd", "--lr", "0.5", "--no-attribution",
            "--next-checkpoint", str(nxt), "--trainer-mask", "none"]
    ref = one_process(replay_log, model_dir, tmp_path / "one", args)
    res = torchrun([str(replay_log), "--checkpoint", str(model_dir), "--out",
                    str(tmp_path / "fsdp"), *args, "--fsdp"])
    assert res.returncode == 0, failure_output(res)
    assert_sharded(tmp_path / "fsdp", 2, 2)
    assert json.loads((tmp_path / "fsdp" / "manifest.json").read_text())["distributed"][
        "fsdp"] is True
    assert_same_results(ref, tmp_path / "fsdp")


CRASH_DRIVER = textwrap.dedent("""
    import os, sys
    from pdm_replay.commands import replay as run_mod
    if os.environ["RANK"] == "1":
        write = run_mod.write_table_atomic
        def write_then_die(target, table):
            write(target, table)
            if "seed=1" in str(target):  # rank 1's seed-1 tokens part is in place
                os._exit(3)
        run_mod.write_table_atomic = write_then_die
    from pdm_replay.cli import main
    sys.argv = ["pdm-replay", "replay", *sys.argv[1:]]
    main()
""")


@pytest.mark.slow
def test_rank_crash_mid_run_then_resume_completes(tmp_path, replay_log, model_dir):
    """Adam (the default optimizer); rank 1 dies in seed 1 after writing one of its parts."""
    args = [*COMMON, "--seeds", "3", "--no-attribution"]
    run = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(CRASH_DRIVER)
    crashed = torchrun([str(replay_log), "--checkpoint", str(model_dir), "--out", str(run),
                        *args], script=driver)
    assert crashed.returncode != 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] in ("running", "failed")  # rank 0 was killed or saw the loss
    assert sorted(p.name for p in (run / "done").iterdir()) == ["seed=0.json"]
    assert (run / "tokens" / "seed=1" / "part-1.parquet").exists()  # a half-written seed
    resumed = torchrun([str(replay_log), "--checkpoint", str(model_dir), "--out", str(run),
                        *args, "--resume"])
    assert resumed.returncode == 0, failure_output(resumed)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["seeds_resumed"] == [0]
    assert_sharded(run, 3, 2)
    assert not list(run.rglob("*.tmp"))
    ref = one_process(replay_log, model_dir, tmp_path / "one", args)
    assert_same_results(ref, run, ADAM_ATOL)
