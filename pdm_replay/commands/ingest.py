"""``pdm-replay ingest``: any supported input -> one rollout/v1 log, streamed, atomically.

Rows go through one path whatever the format: typed (rollout/v1), then
:func:`pdm_replay.ingest.accept.accept_rows` (padded, the padding rule of
:mod:`pdm_replay.ingest.padded`, ``validate``'s checks), the path ``RolloutLogger``'s
rows take too. Accepted rows are staged in a hidden temp
file; the footer (top-K width, sampler settings seen in the records) is only known at
the end, so the staged rows are then copied into the output, which is renamed into place.
Nothing is left under the output's name unless the whole run succeeds.

Examples
--------
>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> rec = {"request_id": "r", "advantage": 1.0, "outputs": [{"index": 0, "token_ids": [3],
...        "logprobs": [{"3": {"logprob": -0.1, "rank": 1}, "5": {"logprob": -2.5, "rank": 2}}]}]}
>>> _ = (d / "gen.jsonl").write_text(json.dumps(rec) + "\\n")
>>> s = ingest(IngestConfig(fmt="vllm", inputs=(d / "gen.jsonl",), out=d / "log.parquet",
...                         vocab_size=10))
>>> s.rows, s.tokens, s.rejected, s.meta.top_k, s.meta.topk_convention
(1, 1, 0, 2, 'plus_sampled')
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TextIO

import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.ingest.columns import load_mapping
from pdm_replay.ingest.formats import (IngestFormat, ParseContext, expand_inputs,
                                       load_format_module, resolve_format)
from pdm_replay.ingest.accept import accept_rows
from pdm_replay.ingest.padded import PaddedRollouts, topk_widths
from pdm_replay.ingest.parsing import IngestError, IngestFieldError, Location, Reject, Rows
from pdm_replay.ingest.tokenizer import TokenMapper, resolve_vocab_size
from pdm_replay.io.atomic import AtomicParquetWriter, temp_path_for
from pdm_replay.io.reader import open_parquet
from pdm_replay.io.rollouts import RolloutWriter, rollout_schema, rows_to_table
from pdm_replay.names import ON_ERROR
from pdm_replay.schema import CONVENTIONS, LOGPROBS_MODES, RolloutMeta


@dataclass(frozen=True)
class IngestConfig:
    """Options of ``pdm-replay ingest`` (1:1 with the CLI); None = from the records/format."""

    fmt: str
    inputs: tuple[Path, ...]
    out: Path
    tokenizer: Path | None = None
    vocab_size: int | None = None
    on_error: str = "fail"
    mapping: Path | None = None
    rejects: Path | None = None  # default: <out stem>.rejects.jsonl next to the output
    topk_convention: str | None = None
    logprobs_mode: str | None = None
    top_k: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k_sampling: int | None = None
    chunk_rows: int = 512
    format_modules: tuple[Path, ...] | None = None  # .py files registering formats: loaded first

    @property
    def rejects_path(self) -> Path:
        return self.rejects or self.out.with_suffix(".rejects.jsonl")


@dataclass
class IngestSummary:
    """What an ingest run wrote and found; printed by the CLI."""

    out: Path
    files: int = 0
    rows: int = 0
    tokens: int = 0
    rejected: int = 0
    reasons: Counter = field(default_factory=Counter)
    rejects_path: Path | None = None
    meta: RolloutMeta | None = None
    warnings: list[str] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)  # what parsers repaired, {what: count}


def _kind(reason: str) -> str:
    """A reject reason without its position, cut at the first colon: the summary key."""
    return re.sub(r"^pos \d+: ", "", reason).split(":")[0][:80]


class _Run:
    """State of one run: rejects, sampler hints, sample ids seen, the top-K width seen."""

    def __init__(self, cfg: IngestConfig, vocab: int, rejects: TextIO | None) -> None:
        self.cfg, self.vocab, self.rejects_fh = cfg, vocab, rejects
        self.summary = IngestSummary(out=cfg.out)
        self.hints: dict[str, tuple[Any, str]] = {}
        self.conflicts: set[str] = set()
        self.seen: set[str] = set()
        self.max_k = self.max_genuine = 0

    def reject(self, item: Reject) -> None:
        if self.cfg.on_error == "fail":
            raise IngestFieldError("{where}: {reason}\n(fix the input, or run with {on_error} "
                                   "skip to list every bad record in a rejects file)",
                                   where=item.where, reason=item.error or item.reason)
        self.summary.rejected += 1
        self.summary.reasons[_kind(item.reason)] += 1
        self.rejects_fh.write(json.dumps({**item.where.as_dict(), "reason": item.reason}) + "\n")

    def max_topk(self) -> int | None:
        """The most entries a top-K row may hold when K is known (``--top-k`` or the
        records' sampler settings, e.g. vLLM's ``logprobs``); None while it is not."""
        k = self.cfg.top_k if self.cfg.top_k is not None else self.hints.get("top_k",
                                                                             (None,))[0]
        if k is None:
            return None
        convention = (self.cfg.topk_convention or self.hints.get("topk_convention", (None,))[0]
                      or resolve_format(self.cfg.fmt).topk_convention)
        return RolloutMeta(vocab_size=1, top_k=int(k),
                           topk_convention=convention).max_topk_entries

    def hint(self, sampling: dict[str, Any], where: Location) -> None:
        for key, value in sampling.items():
            if key not in self.hints:
                self.hints[key] = (value, str(where))
            elif self.hints[key][0] != value and key not in self.conflicts:
                self.conflicts.add(key)
                self.summary.warnings.append(
                    f"{key} differs between records ({self.hints[key][0]!r} at "
                    f"{self.hints[key][1]}, {value!r} at {where}); the footer records the "
                    "first: split the inputs by sampler settings")


def _typed_rows(item: Rows, meta: RolloutMeta) -> tuple[pa.Table, list[int], dict[int, str]]:
    """rollout/v1-typed rows of ``item`` that convert, their indices, and the others' reasons."""
    try:
        return rows_to_table(item.rows, meta), list(range(len(item.where))), {}
    except (pa.ArrowException, TypeError, ValueError):
        pass
    pieces, kept, problems = [], [], {}
    for i in range(len(item.where)):
        one = item.rows[i:i + 1] if isinstance(item.rows, list) else item.rows.slice(i, 1)
        try:
            pieces.append(rows_to_table(one, meta))
            kept.append(i)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            problems[i] = f"a value has the wrong type: {exc}"
    return (pa.concat_tables(pieces) if pieces else rows_to_table([], meta)), kept, problems


def _accepted(run: _Run, item: Rows, meta: RolloutMeta
              ) -> tuple[pa.Table, list[Location], list[Reject]]:
    """The accepted rows of ``item`` (:func:`accept_rows`), their locations, the rejects."""
    if isinstance(item.rows, PaddedRollouts):
        rows, where, rejects = item.rows, item.where, []
    else:
        rows, kept, bad = _typed_rows(item, meta)
        rejects = [Reject(item.where[i], r) for i, r in bad.items()]
        where = [item.where[i] for i in kept]
    out = accept_rows(rows, meta, zero_padded=item.zero_padded, seen=run.seen,
                      max_topk=run.max_topk())
    rejects += [Reject(where[i], out.problems[i]) for i in sorted(out.problems)]
    return out.table, [where[i] for i in out.kept], rejects


class _Stage(AtomicParquetWriter):
    """The staging file: rollout/v1 with a provisional footer, uncompressed (read once)."""

    def __init__(self, target: Path, meta: RolloutMeta) -> None:
        self.meta = meta
        super().__init__(target, rollout_schema(meta), compression="none",
                         row_group_size=1 << 14)


def _write(run: _Run, item: Rows, writer: _Stage) -> None:
    table, where, rejects = _accepted(run, item, writer.meta)
    order = {id(w): i for i, w in enumerate(item.where)}
    for r in sorted(rejects, key=lambda r: order[id(r.where)]):  # first bad record first
        run.reject(r)
    if table.num_rows:
        writer.write(table)
        run.summary.rows += table.num_rows
        run.summary.tokens += int(pc.sum(pc.list_value_length(table["response_ids"])).as_py()
                                  or 0)
        widest, genuine = topk_widths(table)
        run.max_k, run.max_genuine = max(run.max_k, widest), max(run.max_genuine, genuine)


def _final_meta(cfg: IngestConfig, run: _Run) -> RolloutMeta:
    fmt = resolve_format(cfg.fmt)
    hint = {k: v for k, (v, _) in run.hints.items()}

    def pick(key: str, default: Any = None) -> Any:
        own = getattr(cfg, key)
        return own if own is not None else hint.get(key, default)
    convention = pick("topk_convention", fmt.topk_convention)
    observed = run.max_genuine if convention == "plus_sampled" else run.max_k
    return RolloutMeta(
        vocab_size=run.vocab, top_k=pick("top_k", observed), topk_convention=convention,
        logprobs_mode=pick("logprobs_mode", fmt.logprobs_mode),
        tokenizer=str(cfg.tokenizer) if cfg.tokenizer else None,
        temperature=pick("temperature"), top_p=pick("top_p"),
        top_k_sampling=pick("top_k_sampling"), extra={"source_format": cfg.fmt})


def footer_warnings(meta: RolloutMeta, max_k: int) -> list[str]:
    """Warnings about what the footer says of the behavior policy (SPEC §1)."""
    out = []
    if meta.truncated_sampler:
        how = f"top_p={meta.top_p}, top_k={meta.top_k_sampling}"
        if meta.logprobs_mode == "processed":
            out.append(f"the sampler truncated ({how}) and log-probs are processed: the "
                       "logged mu is renormalized over the kept tokens, so the top-K tail "
                       "mass is the truncated sampler's, not the model's")
        else:
            out.append(f"the sampler truncated ({how}) but log-probs are raw: tokens were "
                       "drawn from the renormalized truncated distribution, not the logged mu")
    if max_k == 0:
        out.append("no top-K log-probs in the input: every support is {k}; only the binary "
                   "and ratio masks are informative")
    return out


def _check(cfg: IngestConfig) -> IngestFormat:
    """Load ``cfg.format_modules``, then check the settings; the format of ``cfg.fmt``."""
    for path in cfg.format_modules or ():
        load_format_module(path)  # registers its formats before the name is resolved
    fmt = resolve_format(cfg.fmt)
    if fmt.topk_convention not in CONVENTIONS or fmt.logprobs_mode not in LOGPROBS_MODES:
        raise IngestError(f"format {fmt.name!r} records topk_convention "
                          f"{fmt.topk_convention!r} and logprobs_mode {fmt.logprobs_mode!r}; "
                          f"expected one of {CONVENTIONS} and one of {LOGPROBS_MODES}")
    if cfg.on_error not in ON_ERROR:
        raise IngestFieldError("{on_error} must be one of {known}, got {got!r}",
                               known=ON_ERROR, got=cfg.on_error)
    if cfg.topk_convention not in (None, *CONVENTIONS):
        raise IngestFieldError("{topk_convention} must be one of {known}", known=CONVENTIONS)
    if cfg.logprobs_mode not in (None, *LOGPROBS_MODES):
        raise IngestFieldError("{logprobs_mode} must be one of {known}", known=LOGPROBS_MODES)
    return fmt


def _stage(cfg: IngestConfig, fmt: IngestFormat, run: _Run, stage: Path,
           on_progress: Callable[[int, int], None] | None) -> None:
    """Parse every input into ``stage`` (a rollout/v1 file with a provisional footer)."""
    files = expand_inputs(tuple(cfg.inputs), fmt)
    run.summary.files = len(files)
    ctx = ParseContext(TokenMapper(cfg.tokenizer),
                       load_mapping(cfg.mapping) if fmt.needs_mapping else None,
                       cfg.chunk_rows)
    provisional = RolloutMeta(vocab_size=run.vocab, top_k=0)
    with _Stage(stage, provisional) as writer:
        pending: list[Rows] = []
        for index, path in enumerate(files):
            for item in fmt.parse(path, replace(ctx, index=index)):
                if isinstance(item, Reject):
                    run.reject(item)
                    continue
                if not item.where:  # an empty chunk (a file of no rows)
                    continue
                run.hint(item.sampling, item.where[0])
                run.summary.notes.update(item.notes)
                if isinstance(item.rows, list):
                    pending.append(item)
                    if sum(len(p.where) for p in pending) >= cfg.chunk_rows:
                        _write(run, _merge(pending), writer)
                        pending = []
                else:
                    _write(run, item, writer)
            if on_progress:
                on_progress(index + 1, run.summary.rows)
        if pending:
            _write(run, _merge(pending), writer)


def _merge(items: list[Rows]) -> Rows:
    """Dict rows of several records as one chunk (hints from the first record)."""
    rows = [r for it in items for r in it.rows]
    where = [w for it in items for w in it.where]
    return Rows(rows, where, items[0].sampling, items[0].zero_padded)


def ingest(cfg: IngestConfig, on_progress: Callable[[int, int], None] | None = None
           ) -> IngestSummary:
    """Ingest ``cfg.inputs`` into ``cfg.out``; raises :class:`IngestError` on the first
    bad record with ``on_error="fail"`` (and leaves no output behind).

    ``on_progress(files_done, rows_written)`` is called after each input file.
    """
    fmt = _check(cfg)
    vocab = resolve_vocab_size(cfg.vocab_size, cfg.tokenizer)
    stage = temp_path_for(cfg.out)
    rejects_tmp = temp_path_for(cfg.rejects_path) if cfg.on_error == "skip" else None
    fh = rejects_tmp.open("w") if rejects_tmp else None
    run = _Run(cfg, vocab, fh)
    try:
        _stage(cfg, fmt, run, stage, on_progress)
        if fh:
            fh.close()
            rejects_tmp.replace(cfg.rejects_path)
            run.summary.rejects_path = cfg.rejects_path
        if run.summary.rows == 0:
            names = ", ".join(str(p) for p in cfg.inputs[:3]) + (
                f" and {len(cfg.inputs) - 3} more" if len(cfg.inputs) > 3 else "")
            raise IngestFieldError("{names}: no usable records in {n} input(s)"
                                   + ("; reasons in {rejects}" if fh else
                                      "; check {fmt} matches the files' format"),
                                   names=names, n=len(cfg.inputs), rejects=cfg.rejects_path)
        meta = _final_meta(cfg, run)
        with RolloutWriter(cfg.out, meta) as writer:
            for batch in open_parquet(stage).iter_batches(batch_size=cfg.chunk_rows):
                writer.append(pa.Table.from_batches([batch]))
    finally:
        if fh and not fh.closed:
            fh.close()
        for tmp in (stage, rejects_tmp):
            if tmp is not None:
                tmp.unlink(missing_ok=True)
    run.summary.meta = meta
    run.summary.warnings += [f"{n} {what}" for what, n in sorted(run.summary.notes.items())]
    run.summary.warnings += footer_warnings(meta, run.max_k)
    return run.summary
