"""verl (and sail-sg/Stable-RL): a :class:`~pdm_replay.RolloutLogger` set up from the
trainer's config.

In ``RayPPOTrainer.fit`` (verl 0.9.1 ``verl/trainer/ppo/ray_trainer.py``, driver
process)::

    from pdm_replay.integrations.verl import rollout_logger
    self.rollout_logger = rollout_logger("rollouts/", self.config)     # before the loop
    ...
    batch = compute_advantage(batch, ...)
    self.rollout_logger.log_verl(batch, step=self.global_steps)         # in the loop
    ...
    self.rollout_logger.close()                                         # after the loop

The footer comes from ``config.actor_rollout_ref``: ``rollout.temperature``,
``rollout.top_p``, ``rollout.top_k`` (-1: off), ``rollout.logprobs_mode`` (verl's default
``processed_logprobs``: ``processed``) and the vocabulary size of ``model.path``'s
``config.json``. The convention is ``replace_last``, the layout of Stable-RL's
``rollout_topk_*`` tensors (see :mod:`pdm_replay.ingest.verl`). Only attribute reads of
the config: an OmegaConf ``DictConfig`` or any object with those attributes works.

Examples
--------
>>> import tempfile
>>> from types import SimpleNamespace as NS
>>> cfg = NS(actor_rollout_ref=NS(model=NS(path="unused"), rollout=NS(
...     temperature=0.9, top_p=1.0, top_k=-1, logprobs_mode="processed_logprobs")))
>>> lg = rollout_logger(tempfile.mkdtemp(), cfg, vocab_size=151936)
>>> lg.meta.topk_convention, lg.meta.logprobs_mode, lg.meta.temperature, lg.meta.top_k_sampling
('replace_last', 'processed', 0.9, 0)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pdm_replay.ingest.formats import FORMATS
from pdm_replay.logger import RolloutLogger


def _vocab_size(model_path: str) -> int:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    return int(getattr(config.get_text_config(), "vocab_size", None) or config.vocab_size)


def rollout_logger(directory: Path | str, config: Any, *, vocab_size: int | None = None,
                   rank: int = 0, rows_per_shard: int = 0,
                   on_error: str = "fail") -> RolloutLogger:
    """A logger whose footer matches verl's rollout settings in ``config`` (see module).

    ``vocab_size``: the logits width, default read from ``actor_rollout_ref.model.path``.
    """
    arr = config.actor_rollout_ref
    rollout = arr.rollout
    mode = str(getattr(rollout, "logprobs_mode", None) or "processed_logprobs")
    if "logits" in mode:
        raise ValueError(f"rollout.logprobs_mode={mode!r}: the engine returns logits, not "
                         "log-probs; use processed_logprobs or raw_logprobs")
    top_k = getattr(rollout, "top_k", None)
    return RolloutLogger(
        directory, vocab_size or _vocab_size(str(arr.model.path)),
        topk_convention=FORMATS["verl"].topk_convention, logprobs_mode="processed" if "processed" in mode else "raw",
        temperature=float(rollout.temperature), top_p=float(getattr(rollout, "top_p", 1.0)),
        top_k_sampling=max(int(top_k), 0) if top_k is not None else None,
        rank=rank, rows_per_shard=rows_per_shard, on_error=on_error)
