"""Load a local Hugging Face checkpoint as a replay :class:`Policy` and check it against a log.

Everything that can be wrong with a checkpoint directory is checked *before* transformers
touches it, so the error names the directory and says how to fix it: missing config or
weights, pickle-only weights (refused unless ``allow_pickle``: unpickling runs code),
remote code (refused unless ``trust_remote_code``), a sharded index naming absent shards.

Examples
--------
>>> import pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> try:
...     check_checkpoint_dir(d)
... except CheckpointError as exc:
...     print(str(exc).split(": ", 1)[1])
no config.json; pass a save_pretrained directory
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

from pdm_replay.errors import FieldError
from pdm_replay.schema import RolloutMeta
from pdm_replay.replay.batching import MicroBatch
from pdm_replay.names import DTYPES as DTYPE_NAMES

Head = Callable[[Tensor], Tensor]
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "vocab.txt")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be replayed; the message says how to fix it."""


class CheckpointFieldError(FieldError, CheckpointError):
    """A :class:`CheckpointError` whose fix names a setting (a config field)."""


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable JSON ({exc})") from exc


def check_checkpoint_dir(path: Path | str, *, allow_pickle: bool = False,
                         trust_remote_code: bool = False) -> list[Path]:
    """Validate a checkpoint directory; returns its weight files (safetensors preferred)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory; pass the directory that holds "
                              "config.json and the weights (save_pretrained output)")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path}: no config.json; pass a save_pretrained directory")
    config = _read_json(path / "config.json")
    if config.get("auto_map") and not trust_remote_code:
        raise CheckpointFieldError("{path}: config.json maps to custom code (auto_map); pass "
                                   "{trust_remote_code} only if you trust this checkpoint's "
                                   "code", path=path)
    safe = sorted(path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise CheckpointError(f"{index}: shard(s) {', '.join(missing)} missing; "
                                  "copy the complete checkpoint")
    if safe:
        return safe
    pickled = sorted(p for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if not pickled:
        raise CheckpointError(f"{path}: no weight files (*.safetensors); copy the weights "
                              "or re-save the model with save_pretrained")
    if not allow_pickle:
        raise CheckpointFieldError(
            "{path}: only pickle weights ({names}); loading them can run arbitrary code. "
            "Convert to safetensors (model.save_pretrained(dir, safe_serialization=True)) "
            "or pass {allow_pickle} if you trust the files", path=path,
            names=", ".join(p.name for p in pickled))
    return pickled


def checkpoint_tokenizer(path: Path | str) -> str | None:
    """The tokenizer a checkpoint names: tokenizer_config ``name_or_path``, else config
    ``_name_or_path``/``tokenizer_name``; ``None`` when it names none."""
    path = Path(path)
    sources = [(path / "tokenizer_config.json", ("name_or_path", "tokenizer_name")),
               (path / "config.json", ("tokenizer_name", "_name_or_path"))]
    for file, keys in sources:
        if file.is_file():
            doc = _read_json(file)
            for key in keys:
                if isinstance(doc.get(key), str) and doc[key].strip():
                    return doc[key].strip()
    return None


def _same_tokenizer(a: str, b: str) -> bool:
    def norm(s):
        return s.strip().rstrip("/").lower()
    return norm(a) == norm(b)


def _tokenizer_digests(directory: Path) -> dict[str, str]:
    """sha256 of the tokenizer files a directory holds (tokenizer.json, vocab, merges...)."""
    import hashlib
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in TOKENIZER_FILES if (directory / name).is_file()}


def tokenizer_mismatch(log_tokenizer: str, log: Path, checkpoint: Path) -> str | None:
    """Why the log's tokenizer is not the checkpoint's, or ``None`` when it may be.

    A log naming a directory (relative to the log's directory, as a path written next to
    the checkpoint) is compared by the content of the tokenizer files both hold; a log
    naming a hub id is compared with the name the checkpoint records, if any.
    """
    log = Path(log)
    local = (log.parent if log.is_file() else log) / log_tokenizer
    if local.is_dir():
        mine, theirs = _tokenizer_digests(local), _tokenizer_digests(checkpoint)
        differ = sorted(f for f in set(mine) & set(theirs) if mine[f] != theirs[f])
        return f"{', '.join(differ)} of {local} and {checkpoint} differ" if differ else None
    named = checkpoint_tokenizer(checkpoint)
    if named and not _same_tokenizer(log_tokenizer, named):
        return f"log names {log_tokenizer!r}, checkpoint {checkpoint} names {named!r}"
    return None


@dataclass
class Policy:
    """A causal LM split into its body (hidden states) and LM head (logits).

    ``head`` maps hidden states ``(N, H)`` to raw logits ``(N, V)`` including any
    model-specific scaling or soft-capping, so chunked statistics equal ``model(...).logits``.
    """

    model: nn.Module
    head: Head
    vocab_size: int
    source: Path

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def hidden(self, batch: MicroBatch) -> Tensor:
        """Hidden states predicting every response token of ``batch``: ``(N_b, H)``."""
        dev = self.device
        out = self.model.get_decoder()(
            input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev),
            position_ids=batch.position_ids.to(dev), use_cache=False)
        h = out.last_hidden_state
        return h.reshape(-1, h.shape[-1])[batch.target_index.to(dev)]


def make_head(model: nn.Module) -> Head:
    """The LM head of ``model`` with the logit transforms some architectures apply."""
    linear = model.get_output_embeddings()
    cfg = model.config
    scale = getattr(cfg, "logit_scale", None)  # Cohere: logits * scale
    divide = getattr(cfg, "logits_scaling", None)  # Granite: logits / scaling
    softcap = getattr(cfg, "final_logit_softcapping", None)  # Gemma 2/3

    def head(h: Tensor) -> Tensor:
        z = linear(h)
        if scale is not None:
            z = z * scale
        if divide is not None:
            z = z / divide
        if softcap is not None:
            z = torch.tanh(z / softcap) * softcap
        return z
    return head


def load_policy(path: Path | str, *, dtype: str = "float32", device: str = "cpu",
                allow_pickle: bool = False, trust_remote_code: bool = False) -> Policy:
    """Load a local checkpoint in eval mode on ``device`` with weights in ``dtype``."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    path = Path(path)
    files = check_checkpoint_dir(path, allow_pickle=allow_pickle,
                                 trust_remote_code=trust_remote_code)
    if dtype not in DTYPES:
        raise CheckpointFieldError("{dtype} {got!r}: expected one of {known}", got=dtype,
                                   known=", ".join(DTYPES))
    hf_logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=DTYPES[dtype], local_files_only=True,
            trust_remote_code=trust_remote_code,
            use_safetensors=files[0].suffix == ".safetensors")
    # Local files only: whatever from_pretrained raises means the files are unusable
    # (torch.load alone raises UnpicklingError, RuntimeError, EOFError, even IndexError on
    # a file that is not a pickle).
    except Exception as exc:  # noqa: BLE001
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise CheckpointError(f"{path}: transformers could not load it ({type(exc).__name__}: "
                              f"{detail}); check the files are a complete save_pretrained "
                              "checkpoint") from exc
    model.to(device).eval()
    vocab = model.get_output_embeddings().weight.shape[0]
    return Policy(model=model, head=make_head(model), vocab_size=int(vocab), source=path)


def check_compatible(policy: Policy, meta: RolloutMeta, log: Path | str,
                     tokenizer_check: bool = True) -> None:
    """Raise :class:`CheckpointError` when ``policy`` cannot have produced ``log``'s tokens."""
    if policy.vocab_size != meta.vocab_size:
        raise CheckpointError(
            f"vocabulary mismatch: log {log} has vocab_size={meta.vocab_size}, checkpoint "
            f"{policy.source} has an output dimension of {policy.vocab_size}; replay the log "
            "with the checkpoint of the run that produced it")
    why = (tokenizer_mismatch(meta.tokenizer, Path(log), policy.source)
           if tokenizer_check and meta.tokenizer else None)
    if why:
        raise CheckpointFieldError(
            "tokenizer mismatch between log {log} and checkpoint {source}: {why}; use the "
            "matching checkpoint, or pass {tokenizer_check:off} if they denote the same "
            "tokenizer", log=log, source=policy.source, why=why)
