"""Device-side helpers of the replay passes; every function also runs on CPU.

- :func:`auto_chunk_tokens`: the LM-head chunk size from free device memory
  (``torch.cuda.mem_get_info``; ``MemAvailable`` on CPU) when ``--chunk-tokens`` is not
  given: the budget is half of what is free after the model state the simulated step
  will add (gradients, optimizer moments), divided by ``COPIES`` float32 ``(C, V)``
  buffers, the peak of the gradient pass (logits, their exp, and both gradients while
  the checkpointed chunk is recomputed in the backward).
- :func:`to_host` / :func:`wait_host`: device-to-host copies into pinned buffers without
  a host sync per micro-batch; one :func:`wait_host` per pass.
- :func:`peak_memory`: peak resident set and, on CUDA, peak allocated device memory.

Examples
--------
>>> chunk_for_budget(free_bytes=8 << 30, reserve_bytes=0, vocab=151_936)
880
>>> chunk_for_budget(free_bytes=8 << 30, reserve_bytes=0, vocab=384)  # capped
8192
>>> chunk_for_budget(free_bytes=1 << 20, reserve_bytes=2 << 20, vocab=151_936)  # floor
16
"""

from __future__ import annotations

import resource
from typing import Iterable

import torch
from torch import Tensor, nn

from pdm_replay.replay.config import CHUNK_COPIES

COPIES = CHUNK_COPIES  # float32 (C, V) buffers at the peak of a chunk (replay.config)
FRACTION = 0.5  # share of the free memory the chunks may use; the rest: activations
MIN_CHUNK, MAX_CHUNK, MULTIPLE = 16, 8192, 16
OPTIMIZER_COPIES = {"adam": 4, "sgd": 1}  # grads (+ two moments + foreach temporaries)


def chunk_for_budget(free_bytes: int, reserve_bytes: int, vocab: int, *,
                     copies: int = COPIES, fraction: float = FRACTION) -> int:
    """Tokens per LM-head chunk: ``fraction × (free − reserve) / (copies × V × 4)``,
    rounded down to a multiple of 16 within ``[16, 8192]``."""
    budget = fraction * max(free_bytes - reserve_bytes, 0)
    tokens = int(budget // (copies * vocab * 4))
    return max(MIN_CHUNK, min(MAX_CHUNK, tokens // MULTIPLE * MULTIPLE))


def free_memory(device: str | torch.device) -> int:
    """Bytes free on ``device``: CUDA's free memory plus what torch's caching allocator
    holds unused (free to this process, not to the driver), or the host's ``MemAvailable``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(torch.cuda.mem_get_info(dev)[0]) + int(cached)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def param_bytes(params: Iterable[nn.Parameter]) -> int:
    """Bytes of the parameters held by this process (the local shard under FSDP)."""
    total = 0
    for p in params:
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total


def auto_chunk_tokens(device: str | torch.device, vocab: int,
                      params: Iterable[nn.Parameter], optimizer: str) -> int:
    """The chunk size :func:`chunk_for_budget` gives for what is free on ``device`` now
    (call after the model and the parameter snapshot are in place)."""
    reserve = OPTIMIZER_COPIES.get(optimizer, 4) * param_bytes(params)
    return chunk_for_budget(free_memory(device), reserve, vocab)


def to_host(t: Tensor) -> Tensor:
    """``t`` on the host; from CUDA an asynchronous copy into pinned memory (read it only
    after :func:`wait_host`)."""
    if t.device.type != "cuda":
        return t
    out = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
    return out.copy_(t, non_blocking=True)


def wait_host(device: str | torch.device) -> None:
    """Wait for the :func:`to_host` copies issued on ``device``'s current stream."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.current_stream(dev).synchronize()


def peak_memory(device: str | torch.device) -> dict[str, int]:
    """Peak resident set of this process and, on CUDA, peak allocated device bytes."""
    out = {"rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        out["cuda_bytes"] = int(torch.cuda.max_memory_allocated())
    return out
