"""Replay (SPEC §6): reload a checkpoint, recompute π at the logged supports, simulate one
optimizer step per update mask, and measure the realized divergence change per token.

Building blocks, smallest first: :mod:`.batching` (prompt + response micro-batches),
:mod:`.recompute` (chunked full-vocabulary statistics from hidden states, pure torch),
:mod:`.step` (one simulated step and the bit-exact restore), :mod:`.forward` (model passes),
:mod:`.tables` (Arrow outputs; the end-of-run numbers are the report's headline);
:mod:`.checkpoint`, :mod:`.data` and :mod:`.manifest` do the I/O and :mod:`.run` the
orchestration, configured by :class:`~pdm_replay.replay.config.ReplayConfig`.
:mod:`.distributed` (torchrun: sharded samples, summed gradients), :mod:`.fsdp` (FSDP2)
and :mod:`.gpu` (chunk size from free memory, pinned copies) scale it out.
:mod:`.attribution` splits each update's ΔD_kl into first-order parts (forward-mode
:mod:`.tangent` passes, :mod:`.head_tangents` per LM-head chunk).
"""

from __future__ import annotations

from typing import Any

from pdm_replay.replay.config import DEFAULT_UPDATE_MASKS, ReplayConfig

__all__ = ["DEFAULT_UPDATE_MASKS", "ReplayConfig", "ReplayResult", "run_replay"]


def __getattr__(name: str) -> Any:
    # The orchestration (torch, transformers) loads on first use: importing the config,
    # as the CLI does to build --help, stays light.
    if name in ("ReplayResult", "run_replay"):
        from pdm_replay.replay import run
        return getattr(run, name)
    raise AttributeError(f"module 'pdm_replay.replay' has no attribute {name!r}")
