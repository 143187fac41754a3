"""Decoded text for the dashboard: find and load the run's tokenizer, render a token in its
context as HTML. Without a tokenizer, token ids are shown instead.

Tokenizer candidates, in order: ``--tokenizer``; the ``tokenizer`` of the log metadata
(``manifest.json`` ``log_meta``, else the log file's footer), a relative path resolved
against the log's directory, the run directory and the working directory; the replayed
checkpoint. Loading never downloads (``local_files_only``): a hub name works when it is in
the local Hugging Face cache.

Examples
--------
>>> html = context_html(None, [(3, 11), (4, 12), (6, 14)], pos=4)
>>> "<mark" in html and "[12]" in html and "⋯" in html
True
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from pdm_replay.io.reader import read_meta
from pdm_replay.report.run_info import RunInfo

MARK_STYLE = ("background:#ffd54f;color:#000;border-radius:3px;padding:0 2px;"
              "outline:2px solid #e65100")


@dataclass(frozen=True)
class LoadedTokenizer:
    """The tokenizer that loaded (``None`` if none did), from where, and what failed."""

    tokenizer: Any | None
    source: str | None
    tried: tuple[str, ...] = ()


def _path_candidates(value: str, bases: Iterable[Path]) -> list[str]:
    path = Path(value).expanduser()
    if path.is_absolute():
        return [str(path)]
    found = [str((b / path).resolve()) for b in bases if (b / path).exists()]
    return found or [value]  # not a local path: maybe a hub name in the local cache


def _log_tokenizer(manifest: dict, bases: list[Path]) -> tuple[str | None, list[Path]]:
    """The log metadata's tokenizer and the directories a relative one is resolved in."""
    log = (manifest.get("config") or {}).get("log")
    log_paths = [Path(p) for p in _path_candidates(log, bases)] if log else []
    log_path = next((p for p in log_paths if p.exists()), None)
    dirs = [log_path if log_path.is_dir() else log_path.parent] if log_path else []
    named = (manifest.get("log_meta") or {}).get("tokenizer")
    if named is None and log_path is not None:
        try:
            named = read_meta(log_path).tokenizer
        except (OSError, ValueError):
            named = None
    return named, dirs


def _masks_manifest(info: RunInfo) -> dict:
    """For `pdm-replay masks` output (no manifest): the log and its tokenizer as the
    tokens footer records them (``source_log``, ``tokenizer``), in manifest form."""
    if not info.tokens_files:
        return {}
    import pyarrow.parquet as pq

    md = {k.decode(): v.decode()
          for k, v in (pq.read_schema(info.tokens_files[0]).metadata or {}).items()}
    out: dict = {"config": {"log": md["source_log"]}} if "source_log" in md else {}
    if "tokenizer" in md:
        out["log_meta"] = {"tokenizer": md["tokenizer"]}
    return out


def tokenizer_candidates(info: RunInfo, explicit: str | None = None) -> list[tuple[str, str]]:
    """``(origin, name or path)`` pairs to try, best first.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.run_info import discover_run
    >>> tokenizer_candidates(discover_run(example_run()), "gpt2")
    [('--tokenizer', 'gpt2')]
    """
    run_dir = info.source if info.source.is_dir() else info.source.parent
    bases = [run_dir, run_dir.parent, Path.cwd()]
    out: list[tuple[str, str]] = []
    if explicit:
        out += [("--tokenizer", p) for p in _path_candidates(explicit, [Path.cwd(), *bases])]
    manifest = dict(info.manifest or {}) or _masks_manifest(info)
    named, log_dirs = _log_tokenizer(manifest, bases)
    if named:
        out += [("log metadata", p) for p in _path_candidates(named, [*log_dirs, *bases])]
    checkpoint = (manifest.get("config") or {}).get("checkpoint")
    if checkpoint:
        out += [("checkpoint", p) for p in _path_candidates(checkpoint, bases)]
    return list(dict.fromkeys(out))


def load_tokenizer(candidates: Sequence[tuple[str, str]]) -> LoadedTokenizer:
    """The first candidate ``AutoTokenizer`` loads offline; every failure is recorded."""
    tried: list[str] = []
    if not candidates:
        return LoadedTokenizer(None, None, ("no tokenizer named by --tokenizer, the log "
                                            "metadata or the manifest",))
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        return LoadedTokenizer(None, None, (f"transformers is not importable: {err}",))
    for origin, name in candidates:
        try:
            tok = AutoTokenizer.from_pretrained(name, local_files_only=True)
        except Exception as err:  # noqa: BLE001 (any loader failure means: try the next)
            tried.append(f"{origin} `{name}`: {type(err).__name__}: {str(err)[:200]}")
            continue
        return LoadedTokenizer(tok, f"{origin} `{name}`", tuple(tried))
    return LoadedTokenizer(None, None, tuple(tried))


def token_texts(tokenizer: Any | None, ids: Sequence[int]) -> list[str]:
    """Each id decoded on its own (``[id]`` without a tokenizer), for table columns.

    >>> token_texts(None, [5, 7])
    ['[5]', '[7]']
    """
    if tokenizer is None:
        return [f"[{i}]" for i in ids]
    return [tokenizer.decode([int(i)], clean_up_tokenization_spaces=False) for i in ids]


def _pieces(tokenizer: Any | None, ids: Sequence[int]) -> list[str]:
    """The text each token adds to the decoded run ``ids`` (keeps tokenizers' spacing):
    piece t = decode(ids[:t+1]) minus decode(ids[:t]) when that is a prefix."""
    if tokenizer is None:
        return [f"[{i}] " for i in ids]
    pieces, before = [], ""
    for t in range(len(ids)):
        upto = tokenizer.decode([int(i) for i in ids[: t + 1]],
                                clean_up_tokenization_spaces=False)
        ok = upto.startswith(before)
        pieces.append(upto[len(before):] if ok else token_texts(tokenizer, [ids[t]])[0])
        before = upto
    return pieces


def _runs(rows: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split ``(pos, token_id)`` rows into runs of consecutive positions."""
    runs: list[list[tuple[int, int]]] = []
    for row in rows:
        if runs and row[0] == runs[-1][-1][0] + 1:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def context_html(tokenizer: Any | None, rows: Sequence[tuple[int, int]], pos: int) -> str:
    """HTML of the response tokens ``rows`` (``(pos, token_id)``, sorted) with the token at
    ``pos`` highlighted; ``⋯`` marks positions not in the table (outside the loss mask)."""
    parts: list[str] = []
    for n, run in enumerate(_runs(rows)):
        if n:
            parts.append('<span style="color:#888"> ⋯ </span>')
        for (p, token_id), piece in zip(run, _pieces(tokenizer, [r[1] for r in run])):
            text = html.escape(piece).replace("\n", "↵<br>")
            if p == pos:
                text = (f'<mark style="{MARK_STYLE}" title="pos {p}, id {token_id}">'
                        f"{text or '∅'}</mark>")
            parts.append(text)
    return ('<div style="font-family:monospace;white-space:pre-wrap;line-height:1.8">'
            + "".join(parts) + "</div>")
