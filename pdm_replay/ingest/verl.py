"""``verl``: batch dumps of verl (and its DPPO fork sail-sg/Stable-RL): ``torch.save`` of a
dict, or ``.npz``.

The dump is the batch right after ``compute_advantage`` in ``RayPPOTrainer.fit``
(verl 0.9.1 ``verl/trainer/ppo/ray_trainer.py``), saved as
``torch.save({**batch.batch, **batch.non_tensor_batch, "global_steps": step,
"temperature": batch.meta_info["temperature"]}, path)``.
Keys (``DataProto.batch`` / ``non_tensor_batch`` names; B samples, P prompt and T response
positions, K top-K slots):

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
``rollout_topk_token_ids``  (B, T, K)    ``topk_ids`` (Stable-RL)
``rollout_topk_logprobs``   (B, T, K)    ``topk_logprobs`` (Stable-RL)
``old_topk_log_probs``      (B, T, K)    ``train_topk_logprobs``; not written by verl or
                                         Stable-RL: log pi_old at the top-K ids, if you
                                         add it (log-only ``pdm-replay masks``)
``uid``                     (B,) str     ``group_id``
``token_level_scores``      (B, T)       ``reward`` (sum over the response), or
``rewards``                 (B,)         ``reward``
``global_steps`` / ``step`` scalar       ``step`` (default: the file's index in the inputs)
``sample_id``               (B,) str     ``sample_id`` (default ``<file name>#<row>``)
``temperature``, ``top_p``, ``top_k``    sampler settings for the footer
=========================== ============ =============================================

**Top-K layout** (sail-sg/Stable-RL, read from its source): the rollout servers
(``verl/workers/rollout/vllm_rollout/vllm_async_server.py``, ``generate``: the vLLM
``Logprob`` dict sorted by ``rank``, first ``k = max(1, logprobs)``; and
``verl/workers/rollout/sglang_rollout/async_sglang_server.py``, ``generate``:
``output_top_logprobs`` sorted by log-prob) keep K entries in rank order and, when the
sampled token is not among them, overwrite the last slot with it: ``replace_last``.
``AgentLoopWorker._agent_loop_postprocess`` (``verl/experimental/agent_loop/
agent_loop.py``) pads the rows past the response with id 0 / log-prob 0.0 to
(B, T, K); the padding rule of :mod:`pdm_replay.ingest.padded` drops them. Log-probs
are vLLM's ``processed_logprobs`` by default (``rollout.logprobs_mode`` in verl's
``trainer/config/rollout/rollout.yaml``): ``processed``.

**Safe loading.** ``torch.load`` runs with ``weights_only=True``; the only globals added
are the numpy ones plain arrays need (``ndarray``, ``dtype`` and its classes,
``_reconstruct``, ``scalar``), so the ``non_tensor_batch`` arrays load while anything
else (a pickled ``DataProto``, an arbitrary class inside an object array) is refused with
its name. Object arrays load only with their plain Python contents; of them only
``uid`` and ``sample_id`` are read. ``.npz`` files load with ``allow_pickle=False`` and
only the keys above are read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from pdm_replay.ingest.padded import (PaddedRollouts, as_numpy, check_shapes, lengths_from_mask,
                                      mapping_get)
from pdm_replay.ingest.formats import ParseContext
from pdm_replay.ingest.parsing import IngestError, Location, Reject, Rows

SOURCE_NAMES = {"response_ids": "responses", "behavior_logprobs": "rollout_log_probs",
                "topk_ids": "rollout_topk_token_ids", "topk_logprobs": "rollout_topk_logprobs",
                "loss_mask": "response_mask", "train_logprobs": "old_log_probs",
                "train_topk_logprobs": "old_topk_log_probs", "prompt_ids": "prompts",
                "prompt_mask": "attention_mask[:, :P]", "reward": "rewards",
                "lengths": "attention_mask"}
SAMPLING_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k_sampling"}
KEYS = ("responses", "attention_mask", "prompts", "response_mask", "rollout_log_probs",
        "old_log_probs", "advantages", "rollout_topk_token_ids", "rollout_topk_logprobs",
        "old_topk_log_probs", "uid", "token_level_scores", "rewards", "global_steps", "step",
        "sample_id", *SAMPLING_KEYS)
RECIPE = ("torch.save({**batch.batch, **batch.non_tensor_batch, 'global_steps': step, "
          "'temperature': batch.meta_info['temperature']}, path)")


def numpy_safe_globals() -> list[Any]:
    """The numpy globals a pickled plain array needs under ``weights_only=True``.

    Found from the objects themselves (numpy 1.x and 2.x place ``_reconstruct`` in
    different modules): the array reconstructor, ``ndarray``, ``dtype``, the dtype
    classes of booleans, numbers, strings, bytes and objects, and the scalar builder.
    """
    kinds = "?bBhHiIlLqQefdgFDGUSO"
    return [np.zeros(0).__reduce__()[0], np.ndarray, np.dtype, np.float64(0).__reduce__()[0],
            *{type(np.dtype(c)) for c in kinds}]


def _torch_dump(path: Path) -> Any:
    import pickle

    import torch
    try:
        with torch.serialization.safe_globals(numpy_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        what = found.group(1) if found else str(exc).splitlines()[0]
        raise IngestError(f"the dump holds a pickled object a safe load refuses ({what}); "
                          f"save plain tensors and arrays: {RECIPE}") from None


def _npz_dump(path: Path) -> dict[str, Any]:
    out = {}
    with np.load(path, allow_pickle=False) as npz:
        for key in (k for k in KEYS if k in npz.files):
            try:
                out[key] = npz[key]
            except ValueError:  # an object array: needs pickle, which stays off
                raise IngestError(f"key {key!r} is an object array, which .npz cannot load "
                                  f"without pickle; save it as strings: {key}="
                                  f"batch.non_tensor_batch[{key!r}].astype(str)") from None
    return out


def load_dump(path: Path) -> dict[str, Any]:
    """The dict of a ``.npz`` or ``torch.save`` dump (safe loaders only, see the module)."""
    data = _npz_dump(path) if path.suffix == ".npz" else _torch_dump(path)
    if not isinstance(data, Mapping):
        raise IngestError(f"the dump holds a {type(data).__name__}, expected a dict of "
                          f"tensors and arrays ({RECIPE})")
    return dict(data)


def _strings(key: str, value: Any) -> list[str]:
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    bad = next((v for v in items if not isinstance(v, (str, int, np.integer))), None)
    if bad is not None:
        raise ValueError(f"{key} holds a {type(bad).__name__}, expected one string per sample")
    return [str(v) for v in items]


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


def padded_from_verl(data: Mapping, step: int, id_prefix: str) -> PaddedRollouts:
    """A :class:`PaddedRollouts` from verl batch keys (tensors or arrays; table above).

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
    def get(name):
        return None if data.get(name) is None else as_numpy(data[name])
    ids = data.get("sample_id")
    step_value = mapping_get(data, "global_steps", "step")
    return PaddedRollouts(
        sample_id=(_strings("sample_id", ids) if ids is not None
                   else [f"{id_prefix}#{i}" for i in range(b)]),
        step=np.full(b, int(as_numpy(step_value)) if step_value is not None else step),
        response_ids=responses, lengths=lengths, advantages=get("advantages"),
        behavior_logprobs=get("rollout_log_probs"), topk_ids=get("rollout_topk_token_ids"),
        topk_logprobs=get("rollout_topk_logprobs"), loss_mask=get("response_mask"),
        train_logprobs=get("old_log_probs"), train_topk_logprobs=get("old_topk_log_probs"),
        prompt_ids=prompts, prompt_mask=prompt_mask,
        group_id=_strings("uid", data["uid"]) if data.get("uid") is not None else None,
        reward=_reward(data, lengths))


def sampling_from(data: Mapping) -> dict[str, Any]:
    """Sampler settings stored as scalars in the dump."""
    out: dict[str, Any] = {}
    for key, name in SAMPLING_KEYS.items():
        if data.get(key) is not None:
            value = as_numpy(data[key]).item()
            out[name] = max(int(value), 0) if name == "top_k_sampling" else float(value)
    return out


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """The samples of one batch dump; the file's index (``ctx.index``) is the default step.

    An unreadable dump or a shape that does not fit is one reject naming the file.
    """
    try:
        data = load_dump(path)
        batch = padded_from_verl(data, ctx.index, path.name)
        check_shapes(batch, SOURCE_NAMES)
    except Exception as exc:  # noqa: BLE001 - any unreadable dump is one named reject
        known = isinstance(exc, (ValueError, IngestError))
        yield Reject(Location(str(path), "file"),
                     str(exc) if known else f"{type(exc).__name__}: {exc}")
        return
    where = [Location(str(path), "row", i) for i in range(len(batch.sample_id))]
    yield Rows(batch, where, sampling_from(data), zero_padded=True)
