"""Options of ``pdm-replay replay`` as one frozen dataclass (1:1 with the CLI).

Examples
--------
>>> from pathlib import Path
>>> cfg = ReplayConfig(log=Path("log.parquet"), checkpoint=Path("ckpt"), out=Path("run"))
>>> cfg.update_masks[:2], cfg.optimizer
(('none', 'dppo_topk_kl'), 'adam')
>>> sorted(cfg.result_affecting())[:3]
['allow_overlap', 'allow_pickle', 'attribution']
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pdm_replay.errors import FieldError  # also importable from here, beside the config
from pdm_replay.masks import MASK_SPECS, Thresholds, load_mask_module, resolve_names
from pdm_replay.names import DTYPES, NONE, OPTIMIZERS, SEED_BY
from pdm_replay.replay.sweep import Sweep, trainer_variant
from pdm_replay.replay.templates import check_template

# Named here, not beside the torch code that maps them (replay.checkpoint, replay.step),
# so the config and the CLI's --help need no torch.
CHUNK_COPIES = 8  # float32 (C, V) buffers alive at the peak of a chunk (gradient pass + margin)
RECOMPUTE_COPIES = 2  # (C, V) buffers of a recompute pass: the head's output, its fp32 copy
# the one statement of the chunk memory: `replay --help` and the README (a test checks both)
CHUNK_MEMORY = (f"{RECOMPUTE_COPIES} · C · V · 4 bytes in the recompute passes and "
                f"{CHUNK_COPIES} · C · V · 4 at the peak of a simulated step (V: vocabulary)")
DEFAULT_UPDATE_MASKS = (NONE, "dppo_topk_kl", "pdm_kl_agg", "pdm_kl_uniform",
                        "dppo_topk_tv", "pdm_tv_agg", "pdm_tv_uniform")
# Options a resumed run may change: ``resume`` itself; ``seeds`` (a seed's results do not
# depend on how many seeds there are, so resuming with more seeds extends a run); the
# paths, whose *contents* are compared by sha256 instead (a moved log is the same log).
# ``threads``, ``heap_reuse``: how fast, not what (the manifest's ``threads`` records both).
OPERATIONAL = ("resume", "seeds", "out", "log", "checkpoint", "behavior_checkpoint",
               "next_checkpoint", "optimizer_state", "threads", "heap_reuse")
STEP_PATHS = ("checkpoint", "behavior_checkpoint", "next_checkpoint", "optimizer_state")
PATH_TEMPLATE = (" May be a template with {step} / {next_step} (the row's logged step, "
                 "step + 1), e.g. ckpt/global_step_{step}: each row is replayed against "
                 "its own step's files.")
TEMPLATE_TOO = " Accepts {step} / {next_step} like --checkpoint."
MASK_NAMES_HELP = "Comma-separated mask names (default: all). Known: " + ", ".join(MASK_SPECS)
OPTION = "pdm_replay.option"  # the field metadata key of an option's declaration


def opt(default: Any = dataclasses.MISSING, **option: Any) -> Any:
    """A config field that is a command-line option, declared once: ``help`` and the CLI's
    spelling in the metadata (``flag`` when not --name, ``short``, ``min`` / ``max``,
    ``choices``, ``secondary`` for a --no-name switch, ``names`` for a comma-separated
    list of mask names, ``cli`` for the default as typed, ``argument`` for a positional,
    ``shared`` when the CLI declares it for several commands). ``cli.replay`` generates
    the Typer options from these fields."""
    return field(default=default, metadata={OPTION: option})


@dataclass(frozen=True)
class ReplayConfig:
    """Everything a replay run depends on; ``manifest.json`` stores it in full."""

    log: Path = opt(argument=True, help="Rollout log with prompt_ids (file or directory).")
    checkpoint: Path = opt(help="Training-policy checkpoint directory θ_t (save_pretrained, "
                           "safetensors)." + PATH_TEMPLATE)
    out: Path = opt(short="-o", help="Run directory to create; locked (RUN_DIR/.lock) while "
                    "this replay writes it: a second replay on it fails at once, naming this "
                    "one's PID.")
    behavior_checkpoint: Path | None = opt(None, help=(
        "Behavior-policy checkpoint: adds exact full-vocabulary kl_exact / dkl_exact columns "
        "and the reloaded-vs-logged µ gaps behavior_logp_gap(_max)." + TEMPLATE_TOO))
    # The trainer's checkpoint after its real step on this data: the `actual` update.
    next_checkpoint: Path | None = opt(None, help=(
        "The trainer's checkpoint θ_{t+1} after its real update on this data: recorded as "
        "the update named `actual` (one more forward pass; needs --trainer-mask)."
        + TEMPLATE_TOO))
    trainer_mask: str | None = opt(None, help=(  # the mask the trainer used (`kept` under `actual`)
        "The mask the trainer used: `kept` under `actual`. NAME, or NAME@VALUE for a swept "
        "threshold; `none` if it kept every token."))
    optimizer_state: Path | None = opt(None, help=(  # trainer's optimizer.pt: Adam continues
        "The trainer's optimizer state_dict (HF Trainer's optimizer.pt, read with "
        "weights_only=True): simulated Adam steps continue its moments and step count "
        "instead of a first step." + TEMPLATE_TOO))
    masks: Sequence[str] | None = opt(None, names=True, help="Decisions recorded in tokens/. "
                                      + MASK_NAMES_HELP)  # None = all
    update_masks: Sequence[str] = opt(DEFAULT_UPDATE_MASKS, names=True,
                                      help="Comma-separated masks whose update is simulated.")
    seeds: int = opt(8, min=1, help="Seeds 0..N-1, one batch each; by default no sample is in "
                     "two seeds (the run fails, saying how many fit, when the log is too small).")
    seed_by: str = opt("sample", choices=SEED_BY, help=(  # "sample": disjoint; "step": per step
        f"{' | '.join(SEED_BY)}: disjoint batches of --batch-size samples, or one seed per "
        "logged step (at most --batch-size of its samples)."))
    allow_overlap: bool = opt(False, help="Let seeds share samples when more are asked for "
                              "than fit disjointly (recorded in the manifest).")
    batch_size: int = opt(64, min=1, help="Samples per simulated step.")
    micro_batch_size: int = opt(8, min=1, help="Samples per forward pass (memory only).")
    optimizer: str = opt("adam", choices=OPTIMIZERS, help=(
        "The simulated step's optimizer (fresh state: the first step of a run; adam "
        "continues the trainer's state with --optimizer-state)."))
    lr: float | str = opt(1e-6, cli="1e-6", help=(  # or "auto": as long as the actual step
        "Learning rate of the simulated step, or `auto` (needs --next-checkpoint): each "
        "simulated step is scaled to the actual step's parameter norm ‖θ_{t+1} − θ_t‖."))
    device: str = opt("cpu", help="torch device, e.g. cpu, cuda:0.")
    dtype: str = opt("float32", choices=DTYPES,
                     help="Weight dtype; statistics are float32/float64 regardless.")
    # The behavior model's dtype for exact µ: the engine's precision, so exact µ is the
    # distribution actually sampled from. None: the log's footer `behavior_dtype`, else dtype.
    behavior_dtype: str | None = opt(None, choices=DTYPES, help=(
        "dtype of the behavior model for exact µ: the rollout engine's precision. Default: "
        "the log's footer `behavior_dtype`, else --dtype."))
    chunk_tokens: int | None = opt(None, min=1, help=(  # None: from free memory (replay.gpu)
        f"Tokens per LM-head chunk C: bounds logits memory to about {CHUNK_MEMORY}. "
        "Default: from the device's free memory."))
    attribution: bool = opt(True, secondary="--no-attribution", help=(
        "First-order attribution of each update's ΔD_kl: delta_kl_lin (forward-mode JVP "
        "along Δθ, about one extra pass per update mask) and delta_kl_curv; with --optimizer "
        "sgd also delta_kl_self / delta_kl_cross on a token sample."))
    attribution_sample: int = opt(64, min=0, help=(  # SGD self term, beyond disagreements
        "SGD self term: loss tokens sampled per seed in addition to every KL disagreement "
        "token (per-token gradients)."))
    # User mask modules (--mask-module), loaded by the config before it resolves mask
    # names; the manifest holds their paths and sha256, so --resume reloads the same ones.
    mask_modules: Sequence[Path] = opt((), flag="--mask-module", shared=True)
    allow_pickle: bool = opt(False, help="Allow pickle weights (*.bin): they can run code; "
                             "only for trusted files.")
    trust_remote_code: bool = opt(False, help="Run the checkpoint's custom model code.")
    tokenizer_check: bool = opt(True, secondary="--no-tokenizer-check", help=(
        "Require log and checkpoint tokenizer names to agree when both name one."))
    resume: bool = opt(False, help="Continue an interrupted run directory: finished seeds "
                       "are kept.")
    fsdp: bool = opt(False, help="Under torchrun: shard the model over the processes with "
                     "FSDP2 (checkpoints too large for one device).")
    threads: int | None = opt(None, min=1, help=(  # None: the usable CPUs (pdm_replay.threads)
        "torch intra-op threads. Default: the CPUs this process may use (affinity mask, "
        "cgroup quota), shared by the ranks of a CPU torchrun job; recorded in "
        "manifest.json `threads`."))
    heap_reuse: bool = opt(True, secondary="--no-heap-reuse", help=(  # pdm_replay.heap
        "Keep freed CPU memory for the next update's tensors (glibc malloc: no mmap, no "
        "trimming while the replay runs) instead of faulting in fresh pages each time; the "
        "resident set then stays at its peak until the replay ends. Left off when malloc "
        "is tuned by the environment or preloaded; recorded in manifest.json `threads`."))
    # Set by the threshold options (--eps, --delta-kl, ... in the CLI), not one option each.
    thresholds: Thresholds = field(default_factory=Thresholds)
    sweep: Sweep = field(default_factory=Sweep)  # several values of eps / delta_kl / delta_tv

    def __post_init__(self) -> None:
        # Canonical forms, so the manifest and a resume compare like with like.
        def set_(k, v):
            return object.__setattr__(self, k, v)
        set_("mask_modules", tuple(Path(p).resolve() for p in self.mask_modules))
        for path in self.mask_modules:
            load_mask_module(path)  # registers its masks before the names are resolved
        for name in ("log", "out", *STEP_PATHS):
            value = getattr(self, name)
            if value is not None:
                set_(name, Path(value))
                if name in STEP_PATHS:  # {step} / {next_step} only (replay.templates)
                    check_template(value, name)
        set_("masks", None if self.masks is None else tuple(resolve_names(self.masks)))
        set_("update_masks", tuple(resolve_names(self.update_masks)))
        set_("sweep", Sweep(**{f: tuple(v) for f, v in self.sweep.swept().items()}))
        set_("thresholds", self.sweep.primary(self.thresholds))
        if isinstance(self.lr, str) and self.lr != "auto":
            try:
                set_("lr", float(self.lr))
            except ValueError:
                raise FieldError("{lr} {value!r}: expected a number or 'auto'",
                                 value=self.lr) from None
        self._check()
        if self.trainer_mask is not None:
            trainer_variant(self.trainer_mask, self.sweep)  # raises on an unusable name

    def _check(self) -> None:
        auto = self.lr == "auto"
        checks = [(self.seeds >= 1, "{seeds} must be >= 1"),
                  (self.batch_size >= 1, "{batch_size} must be >= 1"),
                  (self.micro_batch_size >= 1, "{micro_batch_size} must be >= 1"),
                  (self.chunk_tokens is None or self.chunk_tokens >= 1,
                   "{chunk_tokens} must be >= 1"),
                  (auto or self.lr > 0, "{lr} must be > 0 or 'auto'"),
                  (not auto or self.next_checkpoint is not None,
                   "{lr} auto scales each simulated step to the actual one: it needs "
                   "{next_checkpoint}"),
                  (not (auto or self.optimizer_state) or not self.fsdp,
                   "{lr} auto and {optimizer_state} are not supported with {fsdp}"),
                  (self.next_checkpoint is None or self.trainer_mask is not None,
                   "{next_checkpoint} needs {trainer_mask} NAME: the mask the trainer used "
                   "(kept under the actual update); `none` if it kept every token"),
                  (self.trainer_mask is None or self.next_checkpoint is not None,
                   "{trainer_mask} needs {next_checkpoint} (the trainer's actual update)"),
                  (self.optimizer_state is None or self.optimizer == "adam",
                   "{optimizer_state} continues the trainer's Adam moments: use {optimizer} "
                   "adam"),
                  (self.seed_by in SEED_BY, "{seed_by} must be one of " + ", ".join(SEED_BY)),
                  (self.attribution_sample >= 0, "{attribution_sample} must be >= 0"),
                  (self.threads is None or self.threads >= 1, "{threads} must be >= 1"),
                  (self.optimizer in OPTIMIZERS,
                   "{optimizer} must be one of " + ", ".join(OPTIMIZERS)),
                  (self.dtype in DTYPES, "{dtype} must be one of " + ", ".join(DTYPES)),
                  (self.behavior_dtype in (None, *DTYPES),
                   "{behavior_dtype} must be one of " + ", ".join(DTYPES)),
                  (len(self.update_masks) > 0, "{update_masks} names no mask")]
        for ok, template in checks:
            if not ok:
                raise FieldError(template)

    def to_json(self) -> dict:
        """JSON-ready dict of every option (paths as strings)."""
        # Through JSON, so nested tuples (the sweep) compare equal to a manifest's lists.
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    def result_affecting(self) -> dict:
        """The options a resumed run must share with the run it continues."""
        doc = self.to_json()
        for key in OPERATIONAL:
            doc.pop(key)
        return doc

    def differences(self, before: dict) -> list[str]:
        """The result-affecting options in which a run's stored config ``before`` (its
        manifest's ``config``) differs from this one. An option the stored config lacks
        (added in a later version) counts as its default."""
        before = {**default_json(), **before}
        now = self.result_affecting()
        return sorted(k for k in set(before) | set(now)
                      if k not in OPERATIONAL and before.get(k) != now.get(k))


def default_json() -> dict:
    """Every defaulted option of :class:`ReplayConfig` in its JSON form."""
    out = {}
    for f in dataclasses.fields(ReplayConfig):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        value = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        out[f.name] = json.loads(json.dumps(value, default=str))
    return out


def field_flag(f: dataclasses.Field) -> str:
    """The CLI flag of an :func:`opt` field: the one mapping from field names to flags
    (``cli.options`` declares the Typer option with it)."""
    return f.metadata.get(OPTION, {}).get("flag", "--" + f.name.replace("_", "-"))


def flag(name: str) -> str:
    """The CLI flag of :class:`ReplayConfig` option ``name``."""
    return field_flag(ReplayConfig.__dataclass_fields__[name])
