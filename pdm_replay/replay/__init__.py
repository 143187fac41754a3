"""Replay (SPEC §6): reload a checkpoint, recompute π at the logged supports, simulate one
optimizer step per update mask, and measure the realized divergence change per token.

Building blocks, smallest first: :mod:`.batching` (prompt + response micro-batches),
:mod:`.recompute` (chunked full-vocabulary statistics from hidden states, pure torch),
:mod:`.step` (one simulated step and the bit-exact restore), :mod:`.forward` (model passes),
:mod:`.outputs` (Arrow outputs; the end-of-run numbers are the report's headline);
:mod:`.checkpoint`, :mod:`.log_index`, :mod:`.data` and :mod:`.manifest` do the I/O,
:mod:`.seeds` plans each seed's rows and :mod:`.models` loads each logged step's models.
None of them reads the configuration: the recipe,
:class:`~pdm_replay.commands.replay.ReplayRecipe`, is the one reader of
:class:`~pdm_replay.replay.config.ReplayConfig` and passes each block its arguments.
:mod:`.distributed` (torchrun: sharded samples, summed gradients), :mod:`.fsdp` (FSDP2)
and :mod:`.gpu` (chunk size from free memory, pinned copies) scale it out.
:mod:`.attribution_pass` splits each update's ΔD_kl into first-order parts (forward-mode
:mod:`.tangent` passes, :mod:`.head_tangents` per LM-head chunk).
"""

from __future__ import annotations

from pdm_replay.replay.config import DEFAULT_UPDATE_MASKS, ReplayConfig

# The orchestration (run_replay, ReplayResult) is a command: pdm_replay.commands.replay.
__all__ = ["DEFAULT_UPDATE_MASKS", "ReplayConfig"]
