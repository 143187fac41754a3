"""pdm_replay: offline replay and diagnostics of trust-region masks for LLM RL."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["RolloutLogger", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so ``python -m pdm_replay.<module>`` does not import that
    # module (through the logger) before running it as __main__.
    if name == "RolloutLogger":
        from pdm_replay.logger import RolloutLogger
        return RolloutLogger
    raise AttributeError(f"module 'pdm_replay' has no attribute {name!r}")
