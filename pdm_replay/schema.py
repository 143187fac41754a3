"""Arrow schemas of the three data contracts (SPEC §5): the single source of truth.

``schemas/*.json`` is generated from this module by ``python -m pdm_replay.schema``;
``tests/test_schema.py`` fails when the two drift.

Examples
--------
>>> from pdm_replay.schema import ROLLOUT_V1, required_rollout_columns
>>> ROLLOUT_V1.field("topk_ids").type
ListType(list<item: list<item: int32>>)
>>> "response_ids" in required_rollout_columns()
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pyarrow as pa

from pdm_replay.masks import weight_masks  # the registry says which masks weigh

ROLLOUT_SCHEMA_ID = "rollout/v1"
TOKENS_SCHEMA_ID = "tokens/v1"
UPDATES_SCHEMA_ID = "updates/v1"
SCHEMA_KEY = "pdm_replay.schema"
# tokens footer: the Thresholds the masks were decided with (JSON)
THRESHOLDS_KEY = "pdm_replay.thresholds"
# tokens footer: each sweep variant `<mask>@<value>` -> {"mask": ..., "<field>": value}
VARIANTS_KEY = "pdm_replay.mask_variants"
# rollout footer, written by `pdm-replay recompute`: the checkpoint (a {step} template
# as given) and the weight dtype its train_logprobs / train_topk_logprobs were computed with
RECOMPUTE_CHECKPOINT_KEY = "pdm_replay.recompute.checkpoint"
RECOMPUTE_DTYPE_KEY = "pdm_replay.recompute.dtype"
CONVENTIONS = ("plus_sampled", "replace_last")
LOGPROBS_MODES = ("raw", "processed")

_I32 = pa.int32()
_F32 = pa.float32()


@dataclass(frozen=True)
class Column:
    """One column of a data contract: Arrow type, whether required, meaning."""

    name: str
    type: pa.DataType
    required: str  # "yes", "no", "replay" (needed by replay only)
    doc: str

    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=self.required != "yes",
                        metadata={"doc": self.doc, "required": self.required})


ROLLOUT_COLUMNS: tuple[Column, ...] = (
    Column("sample_id", pa.string(), "yes", "unique per row"),
    Column("step", pa.int64(), "yes", "trainer step (policy version) of this rollout batch"),
    Column("group_id", pa.string(), "no", "prompt group (GRPO)"),
    Column("prompt_ids", pa.list_(_I32), "replay", "prompt tokens"),
    Column("response_ids", pa.list_(_I32), "yes", "sampled tokens k_t, length T"),
    Column("advantages", pa.list_(_F32), "yes", "advantage A_t, length T"),
    Column("behavior_logprobs", pa.list_(_F32), "yes", "log mu(k_t)"),
    Column("topk_ids", pa.list_(pa.list_(_I32)), "yes", "mu's top-K ids per position"),
    Column("topk_logprobs", pa.list_(pa.list_(_F32)), "yes", "log mu at topk_ids"),
    Column("loss_mask", pa.list_(pa.bool_()), "no", "default all True"),
    Column("train_logprobs", pa.list_(_F32), "no", "log pi_theta(k_t) recomputed by the trainer"),
    Column("train_topk_logprobs", pa.list_(pa.list_(_F32)), "no", "log pi_theta at topk_ids"),
    Column("reward", _F32, "no", "sequence reward"),
)

# Per-token columns of a rollout row: each holds one entry per response position.
PER_TOKEN_COLUMNS = ("response_ids", "advantages", "behavior_logprobs", "topk_ids",
                     "topk_logprobs", "loss_mask", "train_logprobs", "train_topk_logprobs")


def _f64(name: str, doc: str, required: str = "yes") -> Column:
    return Column(name, pa.float64(), required, doc)


TOKEN_BASE_COLUMNS: tuple[Column, ...] = (
    Column("sample_id", pa.string(), "yes", "rollout sample id"),
    Column("step", pa.int64(), "yes", "trainer step of the rollout"),
    Column("pos", pa.int32(), "yes", "response position t"),
    Column("token_id", pa.int32(), "yes", "sampled token k"),
    _f64("advantage", "advantage A_t"),
    _f64("logp_behavior", "log mu(k)"),
    _f64("logp_train", "log pi(k)"),
    _f64("ratio", "importance ratio r = pi_k / mu_k"),
    Column("support_size", pa.int32(), "yes", "m = |S|, S = unique(topk_ids + {k})"),
    _f64("mu_tail", "behavior mass outside S, clamped to [0, 1]"),
    _f64("pi_tail", "training mass outside S"),
    _f64("kl_topk", "top-K KL(mu||pi), aggregated tail"),
    _f64("tv_topk", "top-K total variation"),
    _f64("kl_binary", "binary KL over {k, rest}"),
    _f64("tv_binary", "|mu_k - pi_k|"),
    _f64("dkl_local", "local term pi_k - mu_k of dD_kl/deta"),
    _f64("dkl_agg", "dD_kl/deta, aggregated-tail estimator"),
    _f64("dkl_uniform", "dD_kl/deta, uniform-tail estimator"),
    _f64("dtv_agg", "dD_tv/deta, aggregated-tail estimator"),
    _f64("dtv_uniform", "dD_tv/deta, uniform-tail estimator"),
    _f64("dkl_lo", "lower end of the feasible full-vocabulary dD_kl/deta (sign certificate)"),
    _f64("dkl_hi", "upper end of the feasible full-vocabulary dD_kl/deta (sign certificate)"),
    Column("direction_certified", pa.string(), "yes",
           "away | toward | uncertain: sign(A)·dD_kl/deta over all of [dkl_lo, dkl_hi]"),
    Column("mass_overflow", pa.bool_(), "yes", "logged top-K mu mass exceeded 1 + tolerance"),
)

TOKEN_REPLAY_COLUMNS: tuple[Column, ...] = (
    Column("seed", pa.int64(), "replay", "replay seed (replay output only)"),
    _f64("kl_exact", "full-vocabulary KL(mu||pi) (behavior checkpoint given)", "replay"),
    _f64("dkl_exact", "full-vocabulary dD_kl/deta (behavior checkpoint given)", "replay"),
    _f64("behavior_logp_gap", "reloaded log mu(k) (behavior checkpoint) - logged "
         "logp_behavior: the exact columns' mu vs the sampled mu", "replay"),
    _f64("behavior_logp_gap_max", "max over S of |reloaded log mu - logged log mu| (k and "
         "the logged top-K entries)", "replay"),
)

# Per-support lists (replay only): S in support order, column 0 = k, invalid slots dropped.
TOKEN_SUPPORT_COLUMNS: tuple[Column, ...] = (
    Column("support_ids", pa.list_(_I32), "replay", "S in support order (first = k)"),
    Column("support_logp_behavior", pa.list_(_F32), "replay", "log mu on S, from the log"),
    Column("support_logp_pre", pa.list_(_F32), "replay", "log pi_pre on S (recomputed)"),
)

UPDATE_COLUMNS: tuple[Column, ...] = (
    Column("seed", pa.int64(), "yes", "replay seed"),
    Column("update_mask", pa.string(), "yes", "mask of the simulated step (<mask>@<value> "
           "under a threshold sweep), or 'actual': the trainer's real step (next checkpoint)"),
    Column("sample_id", pa.string(), "yes", "rollout sample id"),
    Column("pos", pa.int32(), "yes", "response position t"),
    Column("kept", pa.bool_(), "yes", "token kept by update_mask (actual: by the trainer "
           "mask)"),
    _f64("logp_post", "log pi_post(k)"),
    _f64("kl_topk_post", "top-K KL after the step"),
    _f64("tv_topk_post", "top-K TV after the step"),
    _f64("delta_kl_topk", "kl_topk_post - kl_topk"),
    _f64("delta_tv_topk", "tv_topk_post - tv_topk"),
    _f64("delta_logp", "logp_post - logp_train"),
    _f64("kl_exact_post", "exact KL after the step", "replay"),
    _f64("delta_kl_exact", "kl_exact_post - kl_exact", "replay"),
    _f64("delta_kl_lin", "first-order change <grad_theta kl_topk, delta_theta> (forward-mode "
         "JVP along the actual step; null with --no-attribution)", "replay"),
    _f64("delta_kl_curv", "delta_kl_topk - delta_kl_lin (second and higher order)", "replay"),
    _f64("delta_kl_self", "SGD only, sampled tokens: (lr/N) keep A r <grad kl_topk, "
         "grad log pi(k)>, the token's own gradient's share of delta_kl_lin", "replay"),
    _f64("delta_kl_cross", "delta_kl_lin - delta_kl_self: the other tokens' gradients' share",
         "replay"),
    Column("support_logp_post", pa.list_(_F32), "replay",
           "log pi_post on S, in the order of tokens' support_ids"),
)


def keep_column(mask_name: str) -> str:
    """Name of the tokens/v1 column holding ``mask_name``'s decision (a mask, or a sweep
    variant ``<mask>@<value>``: ``keep_pdm_kl_agg@0.05``)."""
    return f"keep_{mask_name}"


def weight_column(mask_name: str) -> str:
    """Name of the tokens/v1 column holding a weight mask's real-valued gradient weight
    ``w`` (surrogate ``−Σ w·r·Â / N``; TIS, CISPO, MIS)."""
    return f"weight_{mask_name}"


def _schema(columns: Iterable[Column], schema_id: str) -> pa.Schema:
    return pa.schema([c.arrow_field() for c in columns], metadata={SCHEMA_KEY: schema_id})


ROLLOUT_V1 = _schema(ROLLOUT_COLUMNS, ROLLOUT_SCHEMA_ID)
UPDATES_V1 = _schema(UPDATE_COLUMNS, UPDATES_SCHEMA_ID)


def tokens_schema(mask_names: Iterable[str], *, replay: bool = False,
                  exact: bool = False) -> pa.Schema:
    """tokens/v1 for the given masks; ``replay`` adds ``seed`` and the per-support lists,
    ``exact`` the exact columns."""
    cols = list(TOKEN_BASE_COLUMNS)
    if replay:
        cols.insert(0, TOKEN_REPLAY_COLUMNS[0])
        cols.extend(TOKEN_SUPPORT_COLUMNS)
    if exact:
        cols.extend(TOKEN_REPLAY_COLUMNS[1:])
    names = list(mask_names)
    cols.extend(Column(keep_column(m), pa.bool_(), "yes", f"decision of mask {m}")
                for m in names)
    cols.extend(Column(weight_column(m), pa.float32(), "yes", f"gradient weight w of mask {m} "
                       "(float32 like the support lists; the replay steps on the float64 w)")
                for m in weight_masks(names))
    return _schema(cols, TOKENS_SCHEMA_ID)


def required_rollout_columns() -> tuple[str, ...]:
    return tuple(c.name for c in ROLLOUT_COLUMNS if c.required == "yes")


@dataclass(frozen=True)
class RolloutMeta:
    """Footer metadata of a rollout/v1 file (SPEC §5)."""

    vocab_size: int
    top_k: int
    topk_convention: str = "plus_sampled"
    logprobs_mode: str = "raw"
    tokenizer: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k_sampling: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def to_metadata(self) -> dict[bytes, bytes]:
        md = {SCHEMA_KEY: ROLLOUT_SCHEMA_ID, "vocab_size": str(self.vocab_size),
              "top_k": str(self.top_k), "topk_convention": self.topk_convention,
              "logprobs_mode": self.logprobs_mode}
        for key in ("tokenizer", "temperature", "top_p", "top_k_sampling"):
            value = getattr(self, key)
            if value is not None:
                md[key] = str(value)
        md.update(self.extra)
        return {k.encode(): v.encode() for k, v in md.items()}

    @classmethod
    def from_metadata(cls, md: dict[bytes, bytes] | None, source: str) -> "RolloutMeta":
        """Parse footer metadata; raises ``ValueError`` naming ``source`` when it is unusable."""
        md = {k.decode(): v.decode() for k, v in (md or {}).items()}
        if md.get(SCHEMA_KEY) != ROLLOUT_SCHEMA_ID:
            raise ValueError(f"{source}: footer metadata {SCHEMA_KEY}={md.get(SCHEMA_KEY)!r}, "
                             f"expected {ROLLOUT_SCHEMA_ID!r}; write the log with "
                             "pdm_replay.io.write_rollouts or `pdm-replay ingest`")
        missing = [k for k in ("vocab_size", "top_k") if k not in md]
        if missing:
            raise ValueError(f"{source}: footer metadata lacks {', '.join(missing)}")
        conv, mode = md.get("topk_convention", "plus_sampled"), md.get("logprobs_mode", "raw")
        if conv not in CONVENTIONS or mode not in LOGPROBS_MODES:
            raise ValueError(f"{source}: topk_convention={conv!r} / logprobs_mode={mode!r}; "
                             f"expected one of {CONVENTIONS} / {LOGPROBS_MODES}")
        known = {"vocab_size", "top_k", "topk_convention", "logprobs_mode", "tokenizer",
                 "temperature", "top_p", "top_k_sampling", SCHEMA_KEY}
        def opt(k, f):
            return None if md.get(k) in (None, "", "None") else _number(md, k, f, source)
        return cls(vocab_size=_number(md, "vocab_size", int, source),
                   top_k=_number(md, "top_k", int, source),
                   topk_convention=conv, logprobs_mode=mode, tokenizer=md.get("tokenizer"),
                   temperature=opt("temperature", float), top_p=opt("top_p", float),
                   top_k_sampling=opt("top_k_sampling", int),
                   extra={k: v for k, v in md.items() if k not in known})

    @property
    def max_topk_entries(self) -> int:
        """The most entries a top-K row may hold: K, plus the sampled token that
        ``plus_sampled`` appends when it is not among the top K."""
        return self.top_k + (self.topk_convention == "plus_sampled")

    @property
    def truncated_sampler(self) -> bool:
        """True when the sampler renormalized over a truncated set (top-p < 1 or top-k > 0)."""
        return (self.top_p is not None and self.top_p < 1.0) or bool(self.top_k_sampling)


# The footer fields every file of one log must share (its rows are read with one footer)
FILE_AGREEING = ("vocab_size", "topk_convention")
# ... and every log of one run: the per-batch work applies one footer's K and convention
LOG_AGREEING = ("vocab_size", "top_k", "topk_convention")


def check_agree(footers: Iterable[tuple[str, RolloutMeta]], fields: tuple[str, ...],
                fix: str) -> None:
    """Raise ``ValueError`` naming both files where a footer's ``fields`` differ from the
    first one's; ``footers``: ``(file, footer)`` pairs.

    >>> a, b = RolloutMeta(vocab_size=8, top_k=2), RolloutMeta(vocab_size=9, top_k=2)
    >>> check_agree([("a", a), ("b", b)], FILE_AGREEING, "split the log")
    Traceback (most recent call last):
    ValueError: b: vocab_size/topk_convention 9/plus_sampled differ from a (8/plus_sampled); ...
    """
    pairs = list(footers)
    first_file, first = pairs[0]
    def values(meta: RolloutMeta) -> str:
        return "/".join(str(getattr(meta, name)) for name in fields)
    for file, meta in pairs[1:]:
        if values(meta) != values(first):
            raise ValueError(f"{file}: {'/'.join(fields)} {values(meta)} differ from "
                             f"{first_file} ({values(first)}); {fix}")


def column_problems(schema: pa.Schema) -> list[tuple[str, str]]:
    """``(kind, message)`` of each rollout/v1 column of ``schema`` that is missing
    (``missing-column``, required ones only) or of another type (``column-type``)."""
    out = []
    for col in ROLLOUT_COLUMNS:
        if col.name not in schema.names:
            if col.required == "yes":
                out.append(("missing-column",
                            f"required column {col.name!r} ({col.type}) is absent"))
            continue
        actual = schema.field(col.name).type
        if not _compatible(actual, col.type):
            out.append(("column-type", f"column {col.name!r} is {actual}, expected {col.type}"))
    return out


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Same nesting, and numeric leaves of the same kind (int/float/bool/string)."""
    if pa.types.is_list(expected) or pa.types.is_large_list(expected):
        return ((pa.types.is_list(actual) or pa.types.is_large_list(actual))
                and _compatible(actual.value_type, expected.value_type))
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean,
             lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))
    return any(k(expected) and k(actual) for k in kinds)


def _number(md: dict[str, str], key: str, kind: type, source: str) -> int | float:
    """The footer value ``key`` as ``kind``; a ``ValueError`` naming ``source`` otherwise."""
    try:
        value = kind(md[key])
    except ValueError:
        raise ValueError(f"{source}: footer metadata {key}={md[key]!r} is not a "
                         f"{'whole number' if kind is int else 'number'}; fix the footer "
                         "(write the log with pdm_replay.io.write_rollouts or `pdm-replay "
                         "ingest`)") from None
    if (key == "vocab_size" and value <= 0) or (key == "top_k" and value < 0):
        raise ValueError(f"{source}: footer metadata {key}={md[key]!r} is out of range")
    return value


def schema_document(schema: pa.Schema) -> dict:
    """JSON-serializable description of ``schema`` (what ``schemas/*.json`` holds)."""
    def field_doc(f: pa.Field) -> dict:
        md = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
        return {"name": f.name, "type": str(f.type), "nullable": f.nullable,
                "required": md.get("required", "yes"), "doc": md.get("doc", "")}
    return {"schema": schema.metadata[SCHEMA_KEY.encode()].decode(),
            "fields": [field_doc(f) for f in schema]}


def schema_documents() -> dict[str, dict]:
    """File name -> document for every contract in ``schemas/``."""
    tokens = schema_document(tokens_schema([], replay=True, exact=True))
    tokens["pattern_fields"] = [{"name": keep_column("<mask>"), "type": "bool",
                                 "nullable": False, "required": "yes",
                                 "doc": "one per mask recorded: True = the token is kept; "
                                 "under a threshold sweep one per value of the swept "
                                 "threshold a mask reads, keep_<mask>@<value> (footer "
                                 "pdm_replay.mask_variants names mask and value)"},
                                {"name": weight_column("<mask>"), "type": "float",
                                 "nullable": False, "required": "yes",
                                 "doc": "one per recorded mask whose weight is real-valued "
                                 "(registry weight 'is': TIS, CISPO, MIS): the gradient "
                                 "weight w of the surrogate -sum w r A / N; keep_<mask> is "
                                 "w > 0"}]
    return {"rollout_v1.json": schema_document(ROLLOUT_V1), "tokens_v1.json": tokens,
            "updates_v1.json": schema_document(UPDATES_V1)}


def write_schema_files(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, doc in schema_documents().items():
        path = directory / name
        path.write_text(json.dumps(doc, indent=2) + "\n")
        out.append(path)
    return out


if __name__ == "__main__":
    import sys
    if len(sys.argv) > 1:  # e.g. --help: say what this does instead of doing it
        print("python -m pdm_replay.schema: regenerate schemas/*.json from the Arrow schemas")
        sys.exit(0 if sys.argv[1] in ("-h", "--help") else 2)
    for p in write_schema_files(Path(__file__).resolve().parent.parent / "schemas"):
        print(p)
