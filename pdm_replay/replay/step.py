"""One simulated optimizer step (SPEC §6) and the bit-exact restore around it (pure torch).

:func:`simulated_step` is the only place parameters change: it zeroes the gradients, runs
the caller's ``backward`` (which fills ``p.grad``), lets an optional ``grad_reduce`` hook
combine gradients across processes (torch.distributed all-reduce), takes one step of a
fresh optimizer (or of one the caller's factory makes, e.g. with the trainer's Adam
state: :mod:`~pdm_replay.replay.optimizer_state`), hands the caller a
:class:`ParamSnapshot` to measure with (``Δθ`` is ``snapshot.delta()``, still available
there), and restores θ from the snapshot.

``lr`` may be a :class:`TargetNorm` (``--lr auto``): every optimizer here moves θ by
``lr · u`` with ``u`` independent of ``lr`` (SGD ``g``; Adam ``m̂/(√v̂ + ε)``, plus
``wd · θ`` for AdamW's decoupled decay, from fresh or loaded moments), so one probe step at
``lr = 1`` measures ``‖u‖`` and the step is taken at ``lr = norm / ‖u‖``, then corrected
by the realized norm (:func:`take_step`). The realized ``‖Δθ‖`` differs from the intended
``lr·‖u‖`` only by the rounding of ``θ + Δθ`` to the weights' dtype: by at most
``‖½ ulp(θ)‖₂``, half an ulp of each updated weight.

One snapshot serves a whole run: θ is restored after every step, so the snapshot taken
at the start stays the reference. Restoring is ``copy_`` of the saved tensors: bit-exact.
Taking the snapshot also gives every CPU parameter memory torch allocated
(:func:`own_storage`), so the steps never write into the checkpoint file's mapping.

Examples
--------
>>> import torch
>>> w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
>>> snap = ParamSnapshot([w])
>>> def backward(): (w * torch.tensor([1.0, -1.0])).sum().backward()
>>> delta = simulated_step([w], snap, backward, optimizer="sgd", lr=0.5,
...                        measure=lambda s: s.delta()[0].tolist())
>>> delta, w.tolist(), snap.matches()
([-0.5, 0.5], [1.0, 2.0], True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import torch
from torch import Tensor, nn

from pdm_replay.math.norms import distance, is_dtensor
from pdm_replay.names import OPTIMIZERS

T = TypeVar("T")
GradReduce = Callable[[Sequence[nn.Parameter]], None]
OptimizerFactory = Callable[[Sequence[nn.Parameter], float], torch.optim.Optimizer]


@dataclass(frozen=True)
class TargetNorm:
    """``--lr auto``: take the step at the lr whose realized ``‖Δθ‖₂`` is ``norm`` (to
    ``rtol``, or as close as ``corrections`` secant steps on the realized norm get)."""

    norm: float
    rtol: float = 1e-7
    corrections: int = 4


@dataclass
class StepInfo:
    """What :func:`simulated_step` chose and realized: the lr and ``‖Δθ‖₂`` (float64)."""

    lr: float = math.nan
    step_norm: float = math.nan


class ParamSnapshot:
    """A copy of every parameter, on ``device`` (default: where each parameter lives).

    On a GPU, ``device="cpu"`` keeps the copy in (pinned) host memory instead.
    """

    def __init__(self, params: Sequence[nn.Parameter], device: str | None = None) -> None:
        self.params = list(params)
        for p in self.params:
            own_storage(p)
        pin = device == "cpu" and torch.cuda.is_available()
        self.saved = [p.detach().to(device or p.device, copy=True) for p in self.params]
        if pin:
            self.saved = [s.pin_memory() for s in self.saved]

    @torch.no_grad()
    def restore(self) -> None:
        for p, s in zip(self.params, self.saved):
            p.copy_(s, non_blocking=False)

    @torch.no_grad()
    def delta(self) -> list[Tensor]:
        """``Δθ = θ − θ_saved`` per parameter (call before :meth:`restore`)."""
        return [p.detach() - s.to(p.device) for p, s in zip(self.params, self.saved)]

    @torch.no_grad()
    def delta_norm(self) -> float:
        """``‖θ − θ_saved‖₂`` in float64, block by block (no Δθ copy is kept)."""
        return distance(self.params, self.saved)

    @torch.no_grad()
    def matches(self) -> bool:
        """True iff every parameter is bit-identical to the saved copy."""
        return all(torch.equal(p.detach().cpu(), s.cpu()) for p, s in zip(self.params,
                                                                          self.saved))


@torch.no_grad()
def own_storage(p: nn.Parameter) -> None:
    """Copy ``p`` into memory torch allocates if its storage is memory torch did not
    allocate (not resizable): a CPU checkpoint's weights, which transformers loads as views
    of the safetensors file's private mapping (``safe_open(..., backend="mmap")`` in
    ``PreTrainedModel._load_pretrained_model``, transformers/modeling_utils.py). The first
    in-place step would otherwise take a copy-on-write fault per 4 KiB page: on Qwen3-0.6B's
    float32 weights (2.4 GB, 2 threads) the first ``add_`` took 3.65 s on the mapping,
    against 0.79 s for this copy and 0.10 s for the ``add_`` after it. Values, dtype and
    strides are unchanged; FSDP shards (DTensors) and device tensors are left alone."""
    if p.device.type == "cpu" and not is_dtensor(p) and not p.untyped_storage().resizable():
        p.data = p.detach().clone()


def make_optimizer(name: str, params: Sequence[nn.Parameter], lr: float
                   ) -> torch.optim.Optimizer:
    """A fresh optimizer (no state): the first step of a new run, as the paper simulates."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")


def take_step(params: Sequence[nn.Parameter], snapshot: ParamSnapshot,
              make: OptimizerFactory, lr: float | TargetNorm) -> float:
    """One optimizer step from θ (= ``snapshot``) on the gradients in ``p.grad``; returns
    the lr used. A :class:`TargetNorm` probes at lr 1 first (gradients are kept), steps
    at ``norm / ‖u‖``, then corrects ``lr`` by the realized norm (at most
    ``TargetNorm.corrections`` more steps, until within ``rtol``): rounding ``θ + lr·u``
    to the weights' grid is not random in ``lr`` (weights of one binade share one ulp), so
    the realized norm is a staircase in ``lr`` with steps of about 1e-6 relative for
    float32 weights moved by 1e-3 of their size."""
    if not isinstance(lr, TargetNorm):
        make(params, lr).step()
        return lr
    make(params, 1.0).step()
    unit = snapshot.delta_norm()
    snapshot.restore()
    if unit == 0:  # nothing to scale: θ stays put
        make(params, 0.0).step()
        return 0.0
    rate, best = lr.norm / unit, (math.inf, 0.0)
    for _ in range(1 + lr.corrections):
        make(params, rate).step()
        err = snapshot.delta_norm() / lr.norm - 1
        best = min(best, (abs(err), rate))
        if abs(err) <= lr.rtol:
            return rate
        snapshot.restore()
        rate /= 1 + err
    make(params, best[1]).step()
    return best[1]


def simulated_step(params: Sequence[nn.Parameter], snapshot: ParamSnapshot,
                   backward: Callable[[], None], *, optimizer: str | OptimizerFactory,
                   lr: float | TargetNorm, measure: Callable[[ParamSnapshot], T],
                   grad_reduce: GradReduce | None = None,
                   info: StepInfo | None = None) -> T:
    """Step once from θ (= ``snapshot``), return ``measure(snapshot)``, restore θ.

    ``optimizer``: a name of :data:`~pdm_replay.names.OPTIMIZERS` (fresh state) or a factory ``(params, lr)``;
    ``info`` receives the lr used and the realized ``‖Δθ‖₂``.
    """
    make = optimizer if callable(optimizer) else (
        lambda ps, rate: make_optimizer(optimizer, ps, rate))
    for p in params:
        p.grad = None
    try:
        backward()
        if grad_reduce is not None:
            # Every process must reduce every tensor, also where its own tokens gave none.
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            grad_reduce(params)
        used = take_step(params, snapshot, make, lr)
        if info is not None:
            info.lr, info.step_norm = used, snapshot.delta_norm()
        return measure(snapshot)
    finally:
        for p in params:
            p.grad = None
        snapshot.restore()
