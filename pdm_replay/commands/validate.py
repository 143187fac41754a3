"""``pdm-replay validate``: every check of :mod:`pdm_replay.checks` over a whole log.

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.fixtures import write_synthetic_log
>>> p = write_synthetic_log(pathlib.Path(tempfile.mkdtemp()) / "l.parquet", n_samples=4)
>>> report = validate_log(p)
>>> report.ok, report.samples, report.tokens
(True, 4, 64)
"""

from __future__ import annotations

from pathlib import Path

from pdm_replay.checks import Problem, ValidationReport, check_batch, check_columns
from pdm_replay.errors import InputError
from pdm_replay.io.log import list_log_files, read_footer
from pdm_replay.io.reader import BATCH_TOKENS, file_batches


def validate_log(path: Path | str, *, max_errors: int = 50,
                 batch_rows: int = 1024) -> ValidationReport:
    """Check every file of the log at ``path``; never raises on bad data, reports it."""
    report = ValidationReport(str(path), max_errors=max_errors)
    try:
        filesystem, files = list_log_files(path)
    except FileNotFoundError as exc:
        report.add(Problem(str(path), None, None, "not-found", str(exc)))
        return report
    report.files = len(files)
    seen: set[str] = set()
    for f in files:
        try:
            part, meta = read_footer(f, filesystem)
        except InputError as exc:
            report.add(Problem(str(f), None, None, "unreadable", exc.message
                               + (f"; {exc.fix}" if exc.fix else "")))
            continue
        except (ValueError, OSError) as exc:
            report.add(Problem(str(f), None, None, "footer", str(exc)))
            continue
        report.meta = report.meta or meta
        if not check_columns(part.schema, str(f), report):
            continue
        try:
            for _, first, batch in file_batches(f, batch_rows=batch_rows,
                                                max_tokens=BATCH_TOKENS,
                                                filesystem=filesystem):
                check_batch(batch, str(f), first, meta.vocab_size, report, seen,
                            max_topk=meta.max_topk_entries)
        except InputError as exc:  # a corrupt page: the rest of this file is unreadable
            report.add(Problem(str(f), None, None, "unreadable", exc.message
                               + (f"; {exc.fix}" if exc.fix else "")))
    if report.meta and report.meta.truncated_sampler and report.meta.logprobs_mode == "processed":
        report.warning_counts["truncated-sampler"] += 1
    return report
