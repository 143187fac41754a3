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
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pdm_replay.masks import Thresholds, load_mask_module, resolve_names
from pdm_replay.replay.seeds import SEED_BY
from pdm_replay.replay.sweep import Sweep, trainer_variant
from pdm_replay.replay.templates import check_template

# Named here, not beside the torch code that maps them (replay.checkpoint, replay.step),
# so the config and the CLI's --help need no torch.
DTYPES = ("float32", "bfloat16", "float16")  # weight dtypes: torch.<name>
OPTIMIZERS = ("adam", "sgd")
CHUNK_COPIES = 8  # float32 (C, V) buffers alive at the peak of a chunk (gradient pass + margin)
RECOMPUTE_COPIES = 2  # (C, V) buffers of a recompute pass: the head's output, its fp32 copy
# the one statement of the chunk memory: `replay --help` and the README (a test checks both)
CHUNK_MEMORY = (f"{RECOMPUTE_COPIES} · C · V · 4 bytes in the recompute passes and "
                f"{CHUNK_COPIES} · C · V · 4 at the peak of a simulated step (V: vocabulary)")
DEFAULT_UPDATE_MASKS = ("none", "dppo_topk_kl", "pdm_kl_agg", "pdm_kl_uniform",
                        "dppo_topk_tv", "pdm_tv_agg", "pdm_tv_uniform")
# Options a resumed run may change: ``resume`` itself; ``seeds`` (a seed's results do not
# depend on how many seeds there are, so resuming with more seeds extends a run); the
# paths, whose *contents* are compared by sha256 instead (a moved log is the same log).
# ``threads``: how fast, not what (the count chosen is in the manifest's ``threads``).
OPERATIONAL = ("resume", "seeds", "out", "log", "checkpoint", "behavior_checkpoint",
               "next_checkpoint", "optimizer_state", "threads")
STEP_PATHS = ("checkpoint", "behavior_checkpoint", "next_checkpoint", "optimizer_state")


@dataclass(frozen=True)
class ReplayConfig:
    """Everything a replay run depends on; ``manifest.json`` stores it in full."""

    log: Path
    checkpoint: Path
    out: Path
    behavior_checkpoint: Path | None = None
    masks: Sequence[str] | None = None  # decisions recorded in tokens/; None = all
    update_masks: Sequence[str] = DEFAULT_UPDATE_MASKS  # updates simulated per seed
    seeds: int = 8
    batch_size: int = 64  # samples per simulated step
    micro_batch_size: int = 8  # samples per forward pass (memory, not results)
    optimizer: str = "adam"
    lr: float | str = 1e-6  # or "auto": each simulated step as long as the actual one
    device: str = "cpu"
    dtype: str = "float32"
    # The behaviour model's dtype for exact µ: the engine's precision, so exact µ is the
    # distribution actually sampled from. None: the log's footer `behavior_dtype`, else dtype.
    behavior_dtype: str | None = None
    chunk_tokens: int | None = None  # None: from free device memory (replay.gpu)
    thresholds: Thresholds = field(default_factory=Thresholds)
    attribution: bool = True  # delta_kl_lin/_curv per update (+ _self/_cross for SGD)
    attribution_sample: int = 64  # SGD self term: random tokens beyond the disagreements
    allow_pickle: bool = False
    trust_remote_code: bool = False
    tokenizer_check: bool = True
    resume: bool = False
    fsdp: bool = False  # under torchrun: shard the model with FSDP2 (replay.fsdp)
    # The trainer's checkpoint after its real step on this data: the `actual` update.
    next_checkpoint: Path | None = None
    trainer_mask: str | None = None  # the mask the trainer used (`kept` under `actual`)
    optimizer_state: Path | None = None  # trainer's optimizer.pt: Adam continues from it
    seed_by: str = "sample"  # "sample": disjoint batches; "step": one seed per logged step
    allow_overlap: bool = False  # more seeds than fit disjointly: let seeds share samples
    sweep: Sweep = field(default_factory=Sweep)  # several values of eps / delta_kl / delta_tv
    threads: int | None = None  # torch intra-op threads; None: the usable CPUs (pdm_replay.threads)
    # User mask modules (--mask-module), loaded by the config before it resolves mask
    # names; the manifest holds their paths and sha256, so --resume reloads the same ones.
    mask_modules: Sequence[Path] = ()

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
                    check_template(value, f"--{name.replace('_', '-')}")
        set_("masks", None if self.masks is None else tuple(resolve_names(self.masks)))
        set_("update_masks", tuple(resolve_names(self.update_masks)))
        set_("sweep", Sweep(**{f: tuple(v) for f, v in self.sweep.swept().items()}))
        set_("thresholds", self.sweep.primary(self.thresholds))
        if isinstance(self.lr, str) and self.lr != "auto":
            try:
                set_("lr", float(self.lr))
            except ValueError:
                raise FieldError(f"{{lr}} {self.lr!r}: expected a number or 'auto'") from None
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
                  (self.seed_by in SEED_BY, f"{{seed_by}} must be one of {', '.join(SEED_BY)}"),
                  (self.attribution_sample >= 0, "{attribution_sample} must be >= 0"),
                  (self.threads is None or self.threads >= 1, "{threads} must be >= 1"),
                  (self.optimizer in OPTIMIZERS, f"{{optimizer}} must be one of {OPTIMIZERS}"),
                  (self.dtype in DTYPES, f"{{dtype}} must be one of {tuple(DTYPES)}"),
                  (self.behavior_dtype in (None, *DTYPES),
                   f"{{behavior_dtype}} must be one of {tuple(DTYPES)}"),
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


def flag(name: str) -> str:
    """The CLI flag of option ``name``: the one mapping from field names to flags."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


FLAGS = {"mask_modules": "--mask-module", "masks": "--masks"}  # the flags not spelled --name


class FieldError(ValueError):
    """An invalid option, named by field: ``template`` holds ``{field}`` placeholders.
    ``fields`` names them (``field`` the first); :meth:`render` spells them with any
    naming (the CLI: its flags); ``str()`` spells them as flags, the options' public
    names.

    >>> err = FieldError("{seeds} must be >= 1")
    >>> err.field, err.render(str), str(err)
    ('seeds', 'seeds must be >= 1', '--seeds must be >= 1')
    """

    def __init__(self, template: str) -> None:
        self.template = template
        self.fields = tuple(n for _, n, _, _ in string.Formatter().parse(template) if n)
        self.field = self.fields[0] if self.fields else None
        super().__init__(self.render(flag))

    def render(self, name: Callable[[str], str]) -> str:
        return self.template.format(**{f: name(f) for f in self.fields})
