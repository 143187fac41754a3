"""``verl``: batch dumps of a verl-style trainer (``torch.save`` of a dict, or ``.npz``).

Keys (verl ``DataProto.batch`` / ``non_tensor_batch`` names; B samples, P prompt and T
response positions, K top-K slots):

=========================== ============ =============================================
key                         shape        becomes
=========================== ============ =============================================
``responses``               (B, T)       ``response_ids`` (right-padded)
``attention_mask``          (B, P + T)   response length (last 1 of the last T columns)
                                         and the prompt's real tokens
``prompts``                 (B, P)       ``prompt_ids`` (left-padded)
``response_mask``           (B, T)       ``loss_mask`` (0 on padding and tool output)
``rollout_log_probs``       (B, T)       ``behavior_logprobs`` (required)
``old_log_probs``           (B, T)       ``train_logprobs``
``advantages``              (B, T)       ``advantages``
``rollout_topk_token_ids``  (B, T, K)    ``topk_ids`` (DPPO fork; zero-padded)
``rollout_topk_logprobs``   (B, T, K)    ``topk_logprobs`` (``rollout_topk_log_probs`` too)
``rollout_topk_valid_mask`` (B, T, K)    authoritative padding mask when present
``old_topk_log_probs``      (B, T, K)    ``train_topk_logprobs`` (log pi_old at the top-K)
``uid``                     (B,) str     ``group_id``
``token_level_scores``      (B, T)       ``reward`` (sum over the response), or
``rewards``                 (B,)         ``reward``
``global_steps`` / ``step`` scalar       ``step`` (default: the file's index in the inputs)
``sample_id``               (B,) str     ``sample_id`` (default ``<file name>#<row>``)
``temperature``, ``top_p``, ``top_k``    sampler settings for the footer
=========================== ============ =============================================

The top-K tensors are zero-padded, slot 0 holding the sampled token and slots 1.. the
top-K (the DPPO fork's layout): see the padding rule and slot order in
:mod:`pdm_replay.ingest.padded`. ``torch.load`` runs with ``weights_only=True``, so the dump
must hold only tensors, arrays of numbers, strings, lists and numbers (not a pickled
``DataProto``: save ``{**batch.batch, **batch.non_tensor_batch}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from pdm_replay.ingest.padded import (PaddedBatch, as_numpy, check_shapes, lengths_from_mask,
                                      mapping_get)
from pdm_replay.ingest.records import IngestError, Location, Reject, Rows

CONVENTION = "plus_sampled"
LOGPROBS_MODE = "raw"
SOURCE_NAMES = {"response_ids": "responses", "behavior_logprobs": "rollout_log_probs",
                "topk_ids": "rollout_topk_token_ids", "topk_logprobs": "rollout_topk_logprobs",
                "topk_valid": "rollout_topk_valid_mask", "loss_mask": "response_mask",
                "train_logprobs": "old_log_probs", "train_topk_logprobs": "old_topk_log_probs",
                "prompt_ids": "prompts", "prompt_mask": "attention_mask[:, :P]",
                "reward": "rewards", "lengths": "attention_mask"}
SAMPLING_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k_sampling"}


def load_dump(path: Path) -> dict[str, Any]:
    """The dict of a ``.npz`` or ``torch.save`` dump (safe loaders only)."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    import torch
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, Mapping):
        raise IngestError(f"the dump holds a {type(data).__name__}, expected a dict of "
                          "tensors (torch.save({**batch.batch, **batch.non_tensor_batch}))")
    return dict(data)


def _strings(value: Any) -> list[str]:
    return [str(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]


def _response_lengths(data: Mapping, b: int, t: int) -> np.ndarray:
    attn = data.get("attention_mask")
    if attn is not None:
        attn = as_numpy(attn)
        if attn.ndim != 2 or attn.shape[0] != b or attn.shape[1] < t:
            raise ValueError(f"attention_mask has shape {attn.shape}, expected (B={b}, P + T) "
                             f"with T={t}")
        return lengths_from_mask(attn[:, -t:])
    if data.get("response_mask") is not None:
        return lengths_from_mask(as_numpy(data["response_mask"]))
    return np.full(b, t, dtype=np.int64)


def _prompt(data: Mapping, t: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    if data.get("prompts") is None:
        return None, None
    prompts = as_numpy(data["prompts"])
    if data.get("attention_mask") is None:
        raise ValueError("prompts without attention_mask: the left padding of the prompts "
                         "cannot be told apart from tokens; include attention_mask")
    attn = as_numpy(data["attention_mask"])
    return prompts, attn[:, :attn.shape[1] - t]


def _reward(data: Mapping, lengths: np.ndarray) -> np.ndarray | None:
    if data.get("rewards") is not None:
        return as_numpy(data["rewards"]).astype(np.float64).reshape(-1)
    if data.get("token_level_scores") is not None:
        scores = as_numpy(data["token_level_scores"]).astype(np.float64)
        real = np.arange(scores.shape[1])[None, :] < lengths[:, None]
        return np.where(real, scores, 0.0).sum(1)
    return None


def padded_from_verl(data: Mapping, step: int, id_prefix: str) -> PaddedBatch:
    """A :class:`PaddedBatch` from verl batch keys (tensors or arrays; table above).

    Raises ``ValueError`` naming the key when a required key is missing or a shape is off.
    """
    for key in ("responses", "advantages"):
        if data.get(key) is None:
            raise ValueError(f"the batch has no {key!r}")
    if data.get("rollout_log_probs") is None:
        raise ValueError("missing logprobs: the batch has no 'rollout_log_probs' (verl: set "
                         "actor_rollout_ref.rollout.calculate_log_probs=True)")
    responses = as_numpy(data["responses"])
    if responses.ndim != 2:
        raise ValueError(f"responses has shape {responses.shape}, expected (B, T)")
    b, t = responses.shape
    lengths = _response_lengths(data, b, t)
    prompts, prompt_mask = _prompt(data, t)
    get = lambda *names: (None if (v := mapping_get(data, *names)) is None  # noqa: E731
                          else as_numpy(v))
    ids = data.get("sample_id")
    step_value = mapping_get(data, "global_steps", "step")
    return PaddedBatch(
        sample_id=_strings(ids) if ids is not None else [f"{id_prefix}#{i}" for i in range(b)],
        step=np.full(b, int(as_numpy(step_value)) if step_value is not None else step),
        response_ids=responses, lengths=lengths, advantages=get("advantages"),
        behavior_logprobs=get("rollout_log_probs"),
        topk_ids=get("rollout_topk_token_ids"),
        topk_logprobs=get("rollout_topk_logprobs", "rollout_topk_log_probs"),
        topk_valid=get("rollout_topk_valid_mask"),
        loss_mask=get("response_mask"), train_logprobs=get("old_log_probs"),
        train_topk_logprobs=get("old_topk_log_probs"),
        prompt_ids=prompts, prompt_mask=prompt_mask,
        group_id=_strings(data["uid"]) if data.get("uid") is not None else None,
        reward=_reward(data, lengths), sampled_first=True)


def sampling_from(data: Mapping) -> dict[str, Any]:
    """Sampler settings stored as scalars in the dump."""
    out: dict[str, Any] = {}
    for key, name in SAMPLING_KEYS.items():
        if data.get(key) is not None:
            value = as_numpy(data[key]).item()
            out[name] = max(int(value), 0) if name == "top_k_sampling" else float(value)
    return out


def parse(path: Path, file_index: int) -> Iterator[Rows | Reject]:
    """The samples of one batch dump; ``file_index`` is the default step.

    An unreadable dump or a shape that does not fit is one reject naming the file.
    """
    try:
        data = load_dump(path)
        batch = padded_from_verl(data, file_index, path.name)
        check_shapes(batch, SOURCE_NAMES)
    except Exception as exc:  # noqa: BLE001 - any unreadable dump is one named reject
        known = isinstance(exc, (ValueError, IngestError))
        yield Reject(Location(str(path), "file"),
                     str(exc) if known else f"{type(exc).__name__}: {exc}")
        return
    where = [Location(str(path), "row", i) for i in range(len(batch.sample_id))]
    yield Rows(batch, where, sampling_from(data), zero_padded=True)
