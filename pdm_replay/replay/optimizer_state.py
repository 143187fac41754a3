"""The trainer's optimizer state (``--optimizer-state FILE``): simulated steps continue it.

The file is a torch ``Optimizer.state_dict()`` as Hugging Face's Trainer writes it
(``transformers/trainer.py``, ``Trainer._save_optimizer_and_scheduler``:
``torch.save(self.optimizer.state_dict(), output_dir/"optimizer.pt")``; under accelerate
the optimizer is an ``AcceleratedOptimizer`` whose ``state_dict()`` is the wrapped torch
optimizer's, ``accelerate/optimizer.py``). It is read with ``torch.load(weights_only=True)``
(no code runs). Its ``state`` is keyed by integer indices that number the parameters of
every param group in turn (``torch.optim.Optimizer.state_dict``), so each index must be
given a parameter of the replayed checkpoint, by name:

- groups holding ``param_names`` (torch >= 2.6 optimizers built from
  ``model.named_parameters()``) name their parameters directly;
- one group without names: the trainable parameters in ``model.named_parameters()`` order
  (``torch.optim.AdamW(model.parameters())`` in a home-grown loop);
- two groups without names: HF Trainer's ``create_optimizer``, which puts the parameters
  ``Trainer.get_decay_parameter_names`` returns first (weight decay) and the others second
  (no decay), each in ``model.named_parameters()`` order, trainable ones only. That
  function itself (transformers' code, called unbound: it reads nothing of the trainer)
  names the decay set, so the grouping follows the installed transformers version.

Every state entry's moment shapes must equal its parameter's; any mismatch is an error
listing them. Only Adam-family states (``exp_avg``, ``exp_avg_sq``, ``step``) are
continued: a step is ``torch.optim.Adam`` with the saved groups' hyperparameters (betas,
eps, weight decay, ``decoupled_weight_decay`` for AdamW, amsgrad), moments and step count,
at the replay's lr. DeepSpeed / FSDP sharded optimizer files are not this format.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from pdm_replay.errors import FieldError

ADAM_KEYS = ("exp_avg", "exp_avg_sq", "step")
SHOWN = 8  # mismatches listed in an error


@dataclass(frozen=True)
class TrainerOptimizer:
    """A loaded trainer state mapped onto a model: ``groups[g]`` are indices into the
    replay's parameter list (``model.parameters()`` order) in the saved group's order."""

    source: Path
    state: dict = field(repr=False)
    groups: tuple[tuple[int, ...], ...]
    mapping: str  # how names were found: "param_names" | "model order" | "HF Trainer groups"
    legacy_adamw: bool = False  # no decoupled_weight_decay key: assumed AdamW

    def make(self, params: Sequence[nn.Parameter], lr: float) -> torch.optim.Optimizer:
        """An Adam over ``params`` continuing the saved state, every group at ``lr``."""
        cls = torch.optim.AdamW if self.legacy_adamw else torch.optim.Adam
        opt = cls([{"params": [params[i] for i in g]} for g in self.groups], lr=lr)
        opt.load_state_dict(copy.deepcopy(self.state))  # the steps must not share moments
        for group in opt.param_groups:
            group["lr"] = lr
        return opt

    def describe(self) -> dict:
        """Manifest record: where it came from and what the trainer's groups held."""
        keep = ("lr", "betas", "eps", "weight_decay", "amsgrad", "decoupled_weight_decay")
        steps = [float(s["step"]) for s in self.state["state"].values() if "step" in s]
        return {"source": str(self.source), "mapping": self.mapping,
                "assumed_adamw": self.legacy_adamw, "step": max(steps) if steps else 0.0,
                "groups": [{**{k: g[k] for k in keep if k in g}, "params": len(g["params"])}
                           for g in self.state["param_groups"]]}


def read_state(path: Path) -> dict:
    """``torch.load(path, weights_only=True)`` with the structure checked."""
    path = Path(path)
    if not path.is_file():
        raise FieldError("{optimizer_state} {path}: not a file; pass the trainer's "
                         "optimizer.pt (a torch optimizer state_dict)", path=path)
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle errors of every kind: say what the file must be
        raise FieldError("{optimizer_state} {path}: not loadable with weights_only=True "
                         "({kind}: {exc}); pass a torch optimizer state_dict saved with "
                         "torch.save", path=path, kind=type(exc).__name__, exc=exc) from exc
    if not (isinstance(doc, dict) and isinstance(doc.get("state"), dict)
            and isinstance(doc.get("param_groups"), list)):
        raise FieldError("{optimizer_state} {path}: not an optimizer state_dict (expected "
                         "keys 'state' and 'param_groups'); DeepSpeed and FSDP sharded "
                         "states must be consolidated first", path=path)
    return doc


def hf_decay_names(model: nn.Module) -> set[str]:
    """HF Trainer's weight-decay parameter names, from transformers' own function."""
    from transformers import Trainer

    return set(Trainer.get_decay_parameter_names(None, model))


def group_names(model: nn.Module, saved: list[dict]) -> tuple[list[list[str]], str]:
    """Parameter names of each saved group, in index order, and how they were found."""
    if all("param_names" in g for g in saved):
        return [list(g["param_names"]) for g in saved], "param_names"
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    if len(saved) == 1:
        return [trainable], "model order"
    if len(saved) == 2:
        decay = hf_decay_names(model)
        return ([[n for n in trainable if n in decay], [n for n in trainable if n not in decay]],
                "HF Trainer groups")
    raise ValueError(f"{len(saved)} param groups without param_names: only one group "
                     "(model order) or HF Trainer's two (decay / no decay) can be matched "
                     "by name; save the optimizer built from model.named_parameters()")


def _mismatches(state: dict, saved: list[dict], names: list[list[str]],
                shapes: dict[str, torch.Size]) -> list[str]:
    out = []
    for g, (group, group_names_) in enumerate(zip(saved, names)):
        if len(group["params"]) != len(group_names_):
            out.append(f"group {g} holds {len(group['params'])} parameters, the checkpoint's "
                       f"matching group {len(group_names_)}")
            continue
        for index, name in zip(group["params"], group_names_):
            entry = state.get(index, {})
            if name not in shapes:
                out.append(f"index {index}: {name!r} is not a parameter of the checkpoint")
            elif entry and not set(ADAM_KEYS) <= set(entry):
                out.append(f"index {index} ({name}): state keys {sorted(entry)}, expected "
                           f"Adam's {list(ADAM_KEYS)}")
            elif entry and tuple(entry["exp_avg"].shape) != tuple(shapes[name]):
                out.append(f"index {index} ({name}): moments of shape "
                           f"{tuple(entry['exp_avg'].shape)}, parameter {tuple(shapes[name])}")
    return out


def load_trainer_optimizer(path: Path, model: nn.Module) -> TrainerOptimizer:
    """Read ``path`` and map it onto ``model``'s parameters; ``ValueError`` lists every
    mismatch (first :data:`SHOWN`)."""
    doc = read_state(path)
    saved = doc["param_groups"]
    try:
        names, mapping = group_names(model, saved)
    except ValueError as exc:
        raise FieldError("{optimizer_state} {path}: {exc}", path=path, exc=exc) from exc
    shapes = {n: p.shape for n, p in model.named_parameters()}
    problems = _mismatches(doc["state"], saved, names, shapes)
    if problems:
        more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        raise FieldError("{optimizer_state} {path} does not match the checkpoint's "
                         "parameters (matched by {mapping}): {problems}{more}; pass the "
                         "optimizer state saved with this checkpoint", path=path,
                         mapping=mapping, problems="; ".join(problems[:SHOWN]), more=more)
    order = {n: i for i, (n, _) in enumerate(model.named_parameters())}
    groups = tuple(tuple(order[n] for n in g) for g in names)
    legacy = any("decoupled_weight_decay" not in g for g in saved)
    return TrainerOptimizer(Path(path), doc, groups, mapping, legacy)
