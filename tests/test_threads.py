"""Thread choice from affinity and cgroup quota (fake /proc and /sys files), and the
OpenMP wait policy a user's own environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdm_replay.threads import (WAIT_POLICY_ENV, CpuBudget, apply_wait_policy, cgroup_quota,
                                choose_threads, wait_policy_env)


def _cgroup_v2(tmp_path: Path, own: str, limits: dict[str, str]) -> tuple[Path, Path]:
    """A unified hierarchy under tmp_path/sys with ``cpu.max`` files at ``limits``."""
    root = tmp_path / "sys"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for rel, text in limits.items():
        d = root / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(text + "\n")
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


def test_v2_quota_is_quota_over_period(tmp_path: Path) -> None:
    root, proc = _cgroup_v2(tmp_path, "/job", {"/job": "150000 100000"})
    assert cgroup_quota(root, proc) == 1.5  # 150 ms of CPU per 100 ms period


def test_v2_unlimited_is_none(tmp_path: Path) -> None:
    root, proc = _cgroup_v2(tmp_path, "/job", {"/job": "max 100000"})
    assert cgroup_quota(root, proc) is None


def test_v2_tightest_ancestor_wins(tmp_path: Path) -> None:
    # The job is unlimited itself but its parent slice allows 2 CPUs (200000/100000).
    root, proc = _cgroup_v2(tmp_path, "/slice/job", {"/slice": "200000 100000",
                                                      "/slice/job": "max 100000"})
    assert cgroup_quota(root, proc) == 2.0


def test_v1_quota(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    d = root / "cpu,cpuacct" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("50000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n")
    assert cgroup_quota(root, proc) == 0.5


def test_v1_unlimited_quota_is_minus_one(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    d = root / "cpu"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("3:cpu:/\n")
    assert cgroup_quota(root, proc) is None


def test_no_cgroup_files_is_none(tmp_path: Path) -> None:
    assert cgroup_quota(tmp_path / "none", tmp_path / "missing") is None


@pytest.mark.parametrize("budget, processes, threads, source", [
    (CpuBudget(affinity=2, quota=None), 1, 2, "affinity"),
    (CpuBudget(affinity=16, quota=2.5), 1, 2, "cgroup quota"),   # floor(2.5) = 2 of 16
    (CpuBudget(affinity=4, quota=8.0), 1, 4, "affinity"),        # quota above the mask
    (CpuBudget(affinity=8, quota=0.5), 1, 1, "cgroup quota"),    # at least one thread
    (CpuBudget(affinity=8, quota=None), 3, 2, "affinity"),       # 8 // 3 ranks
    (CpuBudget(affinity=2, quota=None), 4, 1, "affinity"),       # more ranks than CPUs
])
def test_choose_threads(budget: CpuBudget, processes: int, threads: int, source: str) -> None:
    choice = choose_threads(None, budget, processes)
    assert (choice.threads, choice.source) == (threads, source)


def test_requested_threads_win() -> None:
    choice = choose_threads(6, CpuBudget(affinity=2, quota=1.0))
    assert (choice.threads, choice.source) == (6, "--threads")
    with pytest.raises(ValueError, match="threads 0: expected at least 1") as info:
        choose_threads(0, CpuBudget(affinity=2, quota=None))
    assert info.value.fields == ("threads",)  # the CLI says --threads (tests/cli)


@pytest.mark.parametrize("users", [{"OMP_WAIT_POLICY": "active"},
                                   {"GOMP_SPINCOUNT": "300000"}])
def test_wait_policy_respects_the_users_variables(users: dict[str, str]) -> None:
    env = {**users, "PATH": "/bin"}
    assert apply_wait_policy(env) == {}
    assert env == {**users, "PATH": "/bin"}  # neither variable added next to the user's


def test_wait_policy_default_is_passive_without_spinning() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    assert apply_wait_policy(env) == WAIT_POLICY_ENV
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["GOMP_SPINCOUNT"] == "0"
    assert wait_policy_env(env) == {}  # applying twice adds nothing
