"""``RolloutLogger``: write rollout/v1 shards from inside a training loop.

Call :meth:`RolloutLogger.log` once per step with padded tensors (torch, numpy) or
ragged lists. Each flush writes one Parquet shard into the directory through a temp file
and a rename, so a crash, an exception or SIGKILL leaves only complete shards (a killed
write leaves a hidden ``.part-*.tmp`` that readers skip and the next logger of the same
rank removes). Memory holds at most ``rows_per_shard`` buffered samples. The directory is
a rollout/v1 log: ``pdm-replay validate DIR``, ``pdm-replay masks DIR``.

Importing this module imports neither torch nor the checks; they load on first use.

Examples
--------
>>> import tempfile, pathlib, numpy as np
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with RolloutLogger(d, vocab_size=50) as logger:
...     n = logger.log(step=0, response_ids=np.array([[4, 7, 0]]),
...                    response_mask=np.array([[1, 1, 0]]), advantages=np.array([0.5]),
...                    behavior_logprobs=np.array([[-0.2, -1.1, 0.0]]),
...                    topk_ids=np.array([[[4, 9], [7, 0], [0, 0]]]),
...                    topk_logprobs=np.array([[[-0.2, -1.9], [-1.1, 0.0], [0.0, 0.0]]]))
>>> n, [p.name.startswith("part-r0000-s000000000") for p in sorted(d.glob("*.parquet"))]
(1, [True])
"""

from __future__ import annotations

import uuid
import warnings
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from pdm_replay.names import ON_ERROR
from pdm_replay.schema import ROLLOUT_COLUMNS, RolloutMeta

# on_error's former spelling of "fail" (before the one vocabulary of pdm_replay.names):
# still accepted, with a DeprecationWarning, for one release
DEPRECATED_ON_ERROR = {"raise": "fail"}
ROLLOUT_NAMES = frozenset(c.name for c in ROLLOUT_COLUMNS)
# A per-sample scalar column (schema.py) is passed as a (B,) sequence under its plural:
# ``rewards`` -> ``reward``, ``group_ids`` -> ``group_id`` (``sample_ids`` -> ``sample_id``
# too); ``step`` is one int per call. Other keywords are rollout/v1 names or padded inputs.
COLUMN_OF = {f"{c.name}s": c.name for c in ROLLOUT_COLUMNS
             if not pa.types.is_list(c.type) and c.name != "step"}


def _session() -> str:
    return uuid.uuid4().hex[:8]


class RolloutLogger:
    """Append rollout/v1 shards to ``directory``; a context manager.

    ``meta`` (or ``vocab_size`` plus the keyword footer fields) describes the behavior
    policy; ``top_k=None`` takes K from the first logged top-K tensor. ``rank`` keeps
    shards of data-parallel ranks apart. ``rows_per_shard=0`` writes one shard per
    :meth:`log` call; a positive value buffers samples until that many are pending.
    Top-K tensors: zero-padded (``zero_padded_topk``, the rule of
    :mod:`pdm_replay.ingest.padded`), in the order ``topk_convention`` says: genuine
    top-K first and the sampled token (if outside) after them (``plus_sampled``), or K
    slots whose last one the sampled token overwrites when outside (``replace_last``).
    ``on_error`` is ``"fail"`` (raise on a sample that fails the ``validate`` checks) or
    ``"skip"`` (drop it with a warning), as ``ingest``'s; ``"raise"``, the former name of
    ``"fail"``, is accepted with a ``DeprecationWarning``.
    """

    def __init__(self, directory: Path | str, vocab_size: int | None = None, *,
                 meta: RolloutMeta | None = None, top_k: int | None = None,
                 topk_convention: str = "plus_sampled", logprobs_mode: str = "raw",
                 temperature: float | None = None, top_p: float | None = None,
                 top_k_sampling: int | None = None, tokenizer: str | None = None,
                 rank: int = 0, rows_per_shard: int = 0, zero_padded_topk: bool = True,
                 on_error: str = "fail") -> None:
        if meta is None and vocab_size is None:
            raise ValueError("RolloutLogger needs vocab_size (the logits width) or meta")
        on_error = on_error_value(on_error)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.meta = meta or RolloutMeta(
            vocab_size=int(vocab_size), top_k=-1 if top_k is None else top_k,
            topk_convention=topk_convention, logprobs_mode=logprobs_mode,
            temperature=temperature, top_p=top_p, top_k_sampling=top_k_sampling,
            tokenizer=tokenizer, extra={"source_format": "RolloutLogger"})
        self.rank, self.rows_per_shard = rank, rows_per_shard
        self.zero_padded = zero_padded_topk
        self.on_error = on_error
        self.session, self.rejected, self.shards = _session(), 0, []
        self._pending: list[pa.Table] = []
        self._pending_step: int | None = None
        self._serial = 0
        self._closed = False
        self._seen: set[str] = set()
        for stale in self.directory.glob(f".part-r{rank:04d}-*.tmp"):
            stale.unlink(missing_ok=True)  # a killed write of this rank; never a shard

    # -- logging -----------------------------------------------------------------
    def log(self, step: int, *, response_ids: Any, advantages: Any, behavior_logprobs: Any,
            response_mask: Any = None, lengths: Any = None, loss_mask: Any = None,
            topk_ids: Any = None, topk_logprobs: Any = None, topk_valid: Any = None,
            train_logprobs: Any = None, train_topk_logprobs: Any = None,
            prompt_ids: Any = None, prompt_mask: Any = None, rewards: Any = None,
            group_ids: Sequence[Any] | None = None,
            sample_ids: Sequence[str] | None = None) -> int:
        """Log one batch of B samples; returns how many were kept.

        Padded inputs: ``response_ids`` (B, T); per-token inputs (B, T) — ``advantages``
        may be (B,); top-K inputs (B, T, K). The response length of a sample is one past
        its last nonzero ``response_mask`` entry (or ``lengths`` (B,), or T); positions
        where ``response_mask`` (or ``loss_mask``) is 0 inside the response get
        ``loss_mask`` False. ``prompt_ids`` (B, P) with ``prompt_mask`` (B, P) may be left-
        or right-padded. Ragged inputs: lists of per-sample lists (no masks needed).
        """
        if self._closed:
            raise ValueError("RolloutLogger is closed")
        given = dict(response_ids=response_ids, advantages=advantages,
                     behavior_logprobs=behavior_logprobs, response_mask=response_mask,
                     lengths=lengths, loss_mask=loss_mask, topk_ids=topk_ids,
                     topk_logprobs=topk_logprobs, topk_valid=topk_valid,
                     train_logprobs=train_logprobs, train_topk_logprobs=train_topk_logprobs,
                     prompt_ids=prompt_ids, prompt_mask=prompt_mask, rewards=rewards,
                     group_ids=group_ids)
        fields = {COLUMN_OF.get(k, k): v for k, v in given.items() if v is not None}
        if isinstance(response_ids, (list, tuple)) and response_ids and \
                isinstance(response_ids[0], (list, tuple)):
            return self._log_ragged(step, sample_ids, fields)
        return self._add(step, self._padded(step, sample_ids, fields))

    def _padded(self, step: int, sample_ids: Any, fields: Mapping[str, Any]) -> Any:
        """Padded inputs (``fields`` under their rollout/v1 names) -> a ``PaddedRollouts``."""
        from pdm_replay.ingest.padded import PaddedRollouts, as_numpy, lengths_from_mask

        arrays = {k: as_numpy(v) for k, v in fields.items() if k != "group_id"}
        resp, mask = arrays["response_ids"], arrays.pop("response_mask", None)
        lens = arrays.pop("lengths", None)
        if lens is not None:
            lens = lens.astype(np.int64)
        elif mask is not None:
            lens = lengths_from_mask(mask)
        else:
            lens = np.full(resp.shape[0], resp.shape[1] if resp.ndim == 2 else 0)
        arrays.setdefault("loss_mask", mask)  # positions masked out are not trained on
        groups = fields.get("group_id")
        b = resp.shape[0]
        group_id = None if groups is None else [str(g) for g in _tolist(groups)]
        return PaddedRollouts(sample_id=self._ids(step, b, sample_ids),
                              step=np.full(b, int(step)), lengths=lens, **arrays,
                              group_id=group_id)

    def log_verl(self, batch: Any, step: int) -> int:
        """Log a verl ``DataProto`` (``batch.batch`` tensors + ``batch.non_tensor_batch``).

        Keys as in :mod:`pdm_replay.ingest.verl` (``responses``, ``attention_mask``,
        ``prompts``, ``response_mask``, ``rollout_log_probs``, ``old_log_probs``,
        ``advantages``, ``uid``, Stable-RL's ``rollout_topk_*``). Those top-K tensors are
        ``replace_last``: a logger of another convention refuses them (create it with
        :func:`pdm_replay.integrations.verl.rollout_logger`).
        """
        from pdm_replay.ingest.formats import FORMATS
        from pdm_replay.ingest.verl import padded_from_verl
        convention = FORMATS["verl"].topk_convention

        data = {**dict(batch.batch.items()), **dict(getattr(batch, "non_tensor_batch", {}))}
        if data.get("rollout_topk_token_ids") is not None and \
                self.meta.topk_convention != convention:
            raise ValueError(f"RolloutLogger({self.directory}) records topk_convention="
                             f"{self.meta.topk_convention!r}, but verl's rollout_topk_* "
                             f"tensors are {convention!r}: create the logger with "
                             f"topk_convention={convention!r} (or "
                             "pdm_replay.integrations.verl.rollout_logger)")
        padded = padded_from_verl(data, step, "")
        padded.sample_id = self._ids(step, len(padded.sample_id), data.get("sample_id"))
        padded.step = np.full(len(padded.sample_id), int(step))
        return self._add(step, padded)

    def _log_ragged(self, step: int, sample_ids: Any, fields: Mapping[str, Any]) -> int:
        """Ragged per-sample lists (rollout/v1 names; masks and lengths are padded inputs'
        only and ignored here) -> a rollout/v1-typed table -> :meth:`_add`."""
        from pdm_replay.io.rollouts import rows_to_table

        cols = {k: _tolist(v) for k, v in fields.items() if k in ROLLOUT_NAMES}
        b = len(cols["response_ids"])
        cols.update(sample_id=self._ids(step, b, sample_ids), step=[int(step)] * b)
        cols["advantages"] = [a if isinstance(a, list) else [float(a)] * len(r)
                              for a, r in zip(cols["advantages"], cols["response_ids"])]
        if "topk_ids" not in cols:  # no top-K logged: every support is {k}
            cols["topk_ids"] = cols["topk_logprobs"] = [[[] for _ in r]
                                                        for r in cols["response_ids"]]
        return self._add(step, rows_to_table(pa.Table.from_pydict(cols), self.meta))

    # -- buffering and shards ----------------------------------------------------
    def _ids(self, step: int, b: int, given: Any) -> list[str]:
        if given is not None:
            return [str(s) for s in _tolist(given)]
        first, self._serial = self._serial, self._serial + b
        return [f"s{step}-r{self.rank}-{self.session}-{first + i}" for i in range(b)]

    def _fix_top_k(self, table: pa.Table) -> None:
        """``top_k=None``: K from the first logged samples (genuine top-K entries per row,
        as ``ingest`` counts them), then fixed: every shard carries the same footer."""
        from pdm_replay.ingest.padded import topk_widths

        if self.meta.top_k < 0:
            widest, genuine = topk_widths(table)
            k = genuine if self.meta.topk_convention == "plus_sampled" else widest
            self.meta = replace(self.meta, top_k=k)

    def _add(self, step: int, rows: Any) -> int:
        """Buffer the accepted rows of ``rows`` (a ``PaddedRollouts`` or rollout/v1 table)."""
        from pdm_replay.ingest.accept import accept_rows

        out = accept_rows(rows, self.meta, zero_padded=self.zero_padded, seen=self._seen)
        if out.problems:
            self._handle(out.rows, out.problems)
        table = out.table
        if table.num_rows:
            self._fix_top_k(table)
            if self._pending_step is None:
                self._pending_step = int(step)
            self._pending.append(table)
        if sum(t.num_rows for t in self._pending) >= max(self.rows_per_shard, 1):
            self.flush()
        return table.num_rows

    def _handle(self, table: pa.Table, bad: dict[int, str]) -> None:
        ids = table.column("sample_id").to_pylist()
        text = "; ".join(f"sample {ids[i]!r}: {r}" for i, r in sorted(bad.items())[:5])
        if self.on_error == "fail":
            raise ValueError(f"RolloutLogger({self.directory}): {len(bad)} bad sample(s): "
                             f"{text}")
        self.rejected += len(bad)
        warnings.warn(f"RolloutLogger dropped {len(bad)} sample(s): {text}", stacklevel=3)

    def flush(self) -> Path | None:
        """Write the buffered samples as one shard (temp file + rename); its path or None."""
        if not self._pending:
            return None
        from pdm_replay.io.rollouts import write_rollouts

        name = f"part-r{self.rank:04d}-s{self._pending_step:09d}-{self.session}-" \
               f"{len(self.shards):05d}.parquet"
        path = write_rollouts(self.directory / name, pa.concat_tables(self._pending), self.meta)
        self._pending, self._pending_step = [], None
        self.shards.append(path)
        return path

    def close(self) -> None:
        """Flush what is buffered; idempotent."""
        if not self._closed:
            try:
                self.flush()
            finally:
                self._closed = True

    def __enter__(self) -> "RolloutLogger":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # Samples logged before an exception are complete and valid: keep them.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never mask the trainer's own exception
            if exc_type is None:
                raise


def on_error_value(on_error: str) -> str:
    """``on_error`` as one of :data:`pdm_replay.names.ON_ERROR`; ``"raise"`` -> ``"fail"``
    with a ``DeprecationWarning`` (the caller's line is named)."""
    if on_error in DEPRECATED_ON_ERROR:
        new = DEPRECATED_ON_ERROR[on_error]
        warnings.warn(f"on_error={on_error!r} is deprecated: use on_error={new!r} (the same "
                      "behavior; one vocabulary with ingest's on_error)", DeprecationWarning,
                      stacklevel=3)
        return new
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    return on_error


def _tolist(value: Any) -> list:
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value)
