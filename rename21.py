#!/usr/bin/env python3
"""Issue 21, Deliver item 1: one name per concept. Run from the repository root AFTER
merging the other branches; idempotent; ``--check`` lists what still uses an old name
(exit 1 if anything does). ``--dry-run`` prints without writing. Delete after use.

    python rename21.py            # git mv + rewrite; prints every change
    python rename21.py --check    # exit 1 while an old name remains

Decision table
--------------
Modules (``git mv``; imports, dotted strings, ``python -m``, paths and ``:mod:`` rewritten):

  pdm_replay/run_masks.py          -> pdm_replay/commands/masks.py   (the ``masks`` command;
                                      commands/ mirrors cli/: cli/X = Typer layer, commands/X
                                      = a command whose work spans packages)
  pdm_replay/replay/run.py         -> pdm_replay/commands/replay.py  (the ``replay`` command's
                                      orchestration: replay + report.discover_run + threads)
  pdm_replay/report/run.py         -> pdm_replay/report/run_info.py  (RunInfo, discover_run)
  pdm_replay/ingest/tables.py      -> pdm_replay/ingest/ragged.py    (ragged rows -> padded)
  pdm_replay/replay/tables.py      -> pdm_replay/replay/outputs.py   (tokens/v1, updates/v1 parts)
  pdm_replay/ingest/records.py     -> pdm_replay/ingest/parsing.py   (what parsers yield: Rows,
                                      Reject, Location, IngestError, the shared JSON helpers)
  pdm_replay/replay/records.py     -> pdm_replay/replay/seed_records.py (done markers, pooling)
  pdm_replay/sample/records.py     -> pdm_replay/sample/trainer_rows.py (groups -> rows + log π)
  pdm_replay/report/stats.py       -> pdm_replay/report/paired_tests.py (sign, Wilcoxon, bootstrap)
  pdm_replay/sample/stats.py       -> pdm_replay/sample/log_checks.py   (SampleStats, checks)
  pdm_replay/replay/attribution.py -> pdm_replay/replay/attribution_pass.py (per-seed pass)
  pdm_replay/report/attribution.py -> pdm_replay/report/attribution_report.py
  pdm_replay/report/certificates.py-> pdm_replay/report/certificate_report.py
  kept: pdm_replay/math/attribution.py, math/certificates.py (the math); pdm_replay/masks.py
  (the registry: the public import path of user mask modules, docs/examples/my_masks.py);
  ingest/driver.py, report/produce.py, sample/make.py (commands living in their package).
  Test files keep their names (pytest's rootdir import mode needs unique basenames).

Symbols moved out of the masks command (definitions moved in an ordinary commit; this
script rewrites the imports): THRESHOLDS_KEY -> pdm_replay.schema, torch_threads ->
pdm_replay.threads.

Identifiers:
  behaviour/Behaviour/BEHAVIOUR -> behavior/... everywhere (no external producer uses the
      British spelling; checked: ingest mappings, verl/vLLM/SGLang/TRL names)
  PaddedBatch (ingest/padded.py)   -> PaddedRollouts (B x T x K rollout/v1 fields)
  PaddedBatch (replay/batching.py) -> MicroBatch     (prompt+response model inputs)
      (chosen per file: replay/ files, benchmarks and files importing replay.batching get
      MicroBatch; the others PaddedRollouts)
  µ(k): the schema has two names, one per layout, both kept: ``behavior_logprobs`` is
      the rollout/v1 per-sample list column (and what builds those rows: PaddedRollouts,
      RolloutLogger.log, GroupRollout, ingest), ``logp_behavior`` the tokens/v1 per-token
      column (and every flat per-token array: FlatTokens, TokenStats, LossInputs,
      loss.policy_loss). Renamed to it: ``logp_mu_k`` -> ``logp_behavior`` and
      ``logp_pi_k`` -> ``logp_train`` in math/divergence.py (kl_binary, tv_binary),
      math/direction.py (ratio_slope), replay/step.py (surrogate_loss), and as keyword
      arguments anywhere. Kept: ``mu``/``pi``/``logp_mu_s`` for distributions on S (as the
      schema's mu_tail, support_logp_mu), ExactStats.logp_mu_k (the *reloaded* µ(k)).
  SQL view ``seed_wins`` (per-seed rates) -> ``seed_rates`` (the query and api function
      that serve it already have that name); ``api.seed_wins`` (outcomes over seeds) kept.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

MOVES = {
    "pdm_replay/run_masks.py": "pdm_replay/commands/masks.py",
    "pdm_replay/replay/run.py": "pdm_replay/commands/replay.py",
    "pdm_replay/report/run.py": "pdm_replay/report/run_info.py",
    "pdm_replay/ingest/tables.py": "pdm_replay/ingest/ragged.py",
    "pdm_replay/replay/tables.py": "pdm_replay/replay/outputs.py",
    "pdm_replay/ingest/records.py": "pdm_replay/ingest/parsing.py",
    "pdm_replay/replay/records.py": "pdm_replay/replay/seed_records.py",
    "pdm_replay/sample/records.py": "pdm_replay/sample/trainer_rows.py",
    "pdm_replay/report/stats.py": "pdm_replay/report/paired_tests.py",
    "pdm_replay/sample/stats.py": "pdm_replay/sample/log_checks.py",
    "pdm_replay/replay/attribution.py": "pdm_replay/replay/attribution_pass.py",
    "pdm_replay/report/attribution.py": "pdm_replay/report/attribution_report.py",
    "pdm_replay/report/certificates.py": "pdm_replay/report/certificate_report.py",
}
COMMANDS_INIT = "pdm_replay/commands/__init__.py"
COMMANDS_DOC = ('"""Command implementations whose work spans packages (one module per command,\n'
                'as ``pdm_replay.cli`` has one Typer module per command)."""\n')
# (module, symbol) -> module now defining it; the module may be the old or the new path
SYMBOL_MOVES = {("pdm_replay.run_masks", "THRESHOLDS_KEY"): "pdm_replay.schema",
                ("pdm_replay.run_masks", "torch_threads"): "pdm_replay.threads"}
EXTS = (".py", ".sql", ".md", ".toml", ".json", ".yml", ".yaml", ".txt", ".cfg", ".ini")
SKIP = {"rename21.py", "tools_rename21.py"}
MU_FILES = ("pdm_replay/math/divergence.py", "pdm_replay/math/direction.py",
            "pdm_replay/replay/step.py")
# exact text of places that list the SQL views by name (README, the sql command's help)
VIEW_LISTS = (("`seed_wins`, …", "`seed_rates`, …"),
              ("alignment_by_seed, seed_wins, ", "alignment_by_seed, seed_rates, "),
              ("``seed_wins``, ``kept_measured``", "``seed_rates``, ``kept_measured``"))


def dotted(path: str) -> str:
    return path[:-3].replace("/", ".")


MODS = {dotted(a): dotted(b) for a, b in MOVES.items()}
SYM_NEW = {(m, s): t for (m, s), t in SYMBOL_MOVES.items()}
SYM_NEW.update({(MODS[m], s): t for (m, s), t in SYMBOL_MOVES.items()})


def mod_re(name: str) -> re.Pattern:
    return re.compile(r"(?<![\w.])" + re.escape(name) + r"(?![\w])")


MOD_RES = [(mod_re(a), b) for a, b in MODS.items()]
PATH_RES = [(re.compile(r"(?<![\w/])" + re.escape(a) + r"(?![\w])"), b) for a, b in MOVES.items()]
IMPORT_RE = re.compile(r"^(?P<ind>[ \t]*)from (?P<mod>pdm_replay[\w.]*) import "
                       r"(?P<names>\([^)]*\)|[^\n#]*[^\s#])(?P<tail>[ \t]*(?:#[^\n]*)?)$", re.M)
BRIT = re.compile(r"(b)(ehaviou)(r)", re.I)


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if f.endswith(EXTS) and Path(f).name not in SKIP
            and Path(f).is_file()]


def _split_names(names: str) -> list[tuple[str, str | None]]:
    body = names.strip().strip("()")
    body = re.sub(r"#[^\n]*", "", body)
    out = []
    for part in body.replace("\n", " ").split(","):
        part = part.strip()
        if part:
            name, _, alias = part.partition(" as ")
            out.append((name.strip(), alias.strip() or None))
    return out


def _fmt(ind: str, mod: str, items: list[tuple[str, str | None]]) -> str:
    names = ", ".join(n if a is None or a == n else f"{n} as {a}" for n, a in items)
    line = f"{ind}from {mod} import {names}"
    if len(line) <= 100:
        return line
    head = f"{ind}from {mod} import ("
    lines, cur = [], head
    for i, (n, a) in enumerate(items):
        piece = (n if a is None or a == n else f"{n} as {a}") + ("," if i < len(items) - 1
                                                                  else ")")
        if len(cur) + len(piece) + 1 > 95 and cur != head:
            lines.append(cur.rstrip())
            cur = " " * len(head) + piece + " "
        else:
            cur += piece + " "
    lines.append(cur.rstrip())
    return "\n".join(lines)


def _rewrite_import(m: re.Match) -> str:
    """``from P import a, b as c``: moved modules and symbols get their own lines."""
    ind, mod, tail = m["ind"], m["mod"], m["tail"]
    items = _split_names(m["names"])
    keep: list[tuple[str, str | None]] = []
    extra: dict[str, list[tuple[str, str | None]]] = {}
    for name, alias in items:
        full = f"{mod}.{name}"
        if full in MODS:  # a module imported from its package
            pkg, new = MODS[full].rsplit(".", 1)
            extra.setdefault(pkg, []).append((new, alias or (name if new != name else None)))
        elif (mod, name) in SYM_NEW:
            extra.setdefault(SYM_NEW[(mod, name)], []).append((name, alias))
        else:
            keep.append((name, alias))
    if not extra:
        return m.group(0)
    lines = [_fmt(ind, mod, keep)] if keep else []
    lines += [_fmt(ind, pkg, its) for pkg, its in extra.items()]
    lines[0] += tail
    return "\n".join(lines)


def _padded_name(path: str, text: str) -> str:
    micro = (path.startswith(("pdm_replay/replay/", "pdm_replay/commands/replay",
                              "benchmarks/", "tests/replay/"))
             or "replay.batching" in text)
    return "MicroBatch" if micro else "PaddedRollouts"


def _package_local(path: str, text: str) -> str:
    """Bare module names of a package's own lazy maps (``_HOME``) and ``:mod:`.x```."""
    pkg = str(Path(path).parent)
    if not path.endswith("__init__.py"):
        return text
    for old, new in MOVES.items():
        o, n = Path(old).stem, Path(new).stem
        if str(Path(old).parent) == pkg == str(Path(new).parent):
            text = re.sub(r'(:\s*)"' + o + r'"', r'\1"' + n + '"', text)
            text = re.sub(r":mod:`\." + o + r"`", f":mod:`.{n}`", text)
        elif str(Path(old).parent) == pkg:  # moved out of this package
            text = re.sub(r":mod:`\." + o + r"`", f":mod:`~{dotted(new)}`", text)
    return text


def rewrite(path: str, text: str) -> str:
    if path.endswith(".py"):
        text = IMPORT_RE.sub(_rewrite_import, text)
    for rx, new in MOD_RES:
        text = rx.sub(new, text)
    for rx, new in PATH_RES:
        text = rx.sub(new, text)
    text = _package_local(path, text)
    text = BRIT.sub(lambda m: m[1] + m[2][:-1] + m[3], text)
    if "PaddedBatch" in text:
        text = re.sub(r"\bPaddedBatch\b", _padded_name(path, text), text)
    if path in MU_FILES:
        text = re.sub(r"\blogp_mu_k\b", "logp_behavior", text)
        text = re.sub(r"\blogp_pi_k\b", "logp_train", text)
    elif path.endswith(".py"):  # keyword arguments to those functions, anywhere
        text = re.sub(r"(?<=[(,\s])logp_mu_k=(?!=)", "logp_behavior=", text)
        text = re.sub(r"(?<=[(,\s])logp_pi_k=(?!=)", "logp_train=", text)
    if path.endswith(".sql"):
        text = re.sub(r"\bseed_wins\b", "seed_rates", text)
    for old, new in VIEW_LISTS:
        text = text.replace(old, new)
    return text


def check(files: list[str]) -> list[str]:
    bad = [f"{a}: still exists" for a in MOVES if Path(a).exists()]
    pats = [(rx, f"module {a}") for a, (rx, _) in zip(MODS, MOD_RES)]
    pats += [(rx, f"path {a}") for a, (rx, _) in zip(MOVES, PATH_RES)]
    pats += [(BRIT, "behaviour"), (re.compile(r"\bPaddedBatch\b"), "PaddedBatch")]
    for f in files:
        text = Path(f).read_text(encoding="utf-8", errors="replace")
        if rewrite(f, text) != text:
            for i, line in enumerate(text.splitlines(), 1):
                if rewrite(f, line) != line or any(rx.search(line) for rx, _ in pats):
                    bad.append(f"{f}:{i}: {line.strip()[:90]}")
            if not any(b.startswith(f + ":") for b in bad):
                bad.append(f"{f}: an import of a moved module or symbol")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.check:
        bad = check(tracked())
        print("\n".join(bad) if bad else "rename21: no old names left")
        return 1 if bad else 0
    if not Path(COMMANDS_INIT).exists() and not args.dry_run:
        Path(COMMANDS_INIT).parent.mkdir(parents=True, exist_ok=True)
        Path(COMMANDS_INIT).write_text(COMMANDS_DOC, encoding="utf-8")
        subprocess.run(["git", "add", COMMANDS_INIT], check=True)
        print(f"created {COMMANDS_INIT}")
    for old, new in MOVES.items():
        if Path(old).exists():
            if Path(new).exists():
                print(f"CONFLICT: both {old} and {new} exist; merge them by hand")
                continue
            print(f"git mv {old} {new}")
            if not args.dry_run:
                subprocess.run(["git", "mv", old, new], check=True)
    changed = 0
    for f in tracked():
        text = Path(f).read_text(encoding="utf-8", errors="surrogateescape")
        new = rewrite(f, text)
        if new != text:
            changed += 1
            n = sum(1 for d in difflib.ndiff(text.splitlines(), new.splitlines())
                    if d.startswith("- "))
            print(f"rewrote {f} ({n} lines)")
            if not args.dry_run:
                Path(f).write_text(new, encoding="utf-8", errors="surrogateescape")
    print(f"rename21: {changed} files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
