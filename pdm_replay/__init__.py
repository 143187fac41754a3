"""pdm_replay: offline replay and diagnostics of trust-region masks for LLM RL."""

from pdm_replay.logger import RolloutLogger

__version__ = "0.1.0"
__all__ = ["RolloutLogger", "__version__"]
