"""The tiny causal LM of the sample: a real ``Qwen3ForCausalLM``, built from a ``Qwen3Config``.

Examples
--------
>>> m = build_model(ModelConfig(hidden_size=32, intermediate_size=64), vocab_size=50,
...                 bos_id=1, eos_id=2, pad_id=0)
>>> type(m).__name__, m.config.vocab_size, m.config.tie_word_embeddings
('Qwen3ForCausalLM', 50, True)
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from transformers import (AutoModelForCausalLM, PreTrainedModel, Qwen3Config,
                          Qwen3ForCausalLM)
from transformers.utils import logging as hf_logging


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the model; the defaults ship (365k parameters, 1.5 MB in float32: 17
    checkpoints of it fit the sample's 40 MB; most of it is the 4,103 × 64 embedding)."""

    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 64


def build_model(cfg: ModelConfig, vocab_size: int, *, bos_id: int, eos_id: int,
                pad_id: int) -> Qwen3ForCausalLM:
    """A freshly initialized float32 model (seed torch's global RNG first)."""
    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.hidden_size // cfg.num_attention_heads,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    # Default attention (sdpa), the kernel every later from_pretrained of the checkpoint
    # gets, so in-memory and reloaded models compute the same bits.
    return Qwen3ForCausalLM(config).float()


def load_checkpoint(directory: Path | str, dtype: torch.dtype) -> PreTrainedModel:
    """Load a saved checkpoint in ``dtype``, the way an inference engine or a replay does.

    Not ``model.to(bfloat16)``: that would also round the rotary ``inv_freq`` buffer to
    bf16, which no engine loading the checkpoint does, and no replay could reproduce.
    """
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            str(directory), dtype=dtype, use_safetensors=True, local_files_only=True)
    model.eval()
    model.requires_grad_(False)
    return model


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """No transformers progress bars (one per load/save is noise next to make-sample's)."""
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
