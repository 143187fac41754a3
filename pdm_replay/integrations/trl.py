"""TRL: a ``GRPOTrainer`` that writes every training generation batch as a rollout/v1 log.

Use it in place of ``trl.GRPOTrainer``::

    from pdm_replay.integrations.trl import RolloutLoggingGRPOTrainer
    trainer = RolloutLoggingGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                                        train_dataset=..., rollout_dir="rollouts/",
                                        rollout_top_k=20)
    trainer.train()          # every logged batch is on disk when train() returns or raises

What TRL 1.16 hands over (``GRPOTrainer._generate_and_score_completions``, read from its
source): ``prompt_ids`` / ``prompt_mask`` (left-padded), ``completion_ids`` /
``completion_mask`` (right-padded, through the first EOS), per-sequence ``advantages``
(B,), ``old_per_token_logps`` (only when generation and optimization steps are misaligned
or vLLM importance sampling is on), ``tool_mask`` in multi-turn runs, and
``sampling_per_token_logps`` only with vLLM. So the two modes log differently:

- **without vLLM** the behavior policy µ is the generating model itself: one extra
  no-grad forward over prompt + completion (position ids from the attention mask, as
  ``generate`` builds them; logits divided by ``args.temperature`` in float32) gives
  log µ of the sampled token and of the exact top-``rollout_top_k`` tokens, written
  ``plus_sampled`` (the sampled token appended when outside the top-K). Every mask works.
- **with vLLM** TRL creates its engine with ``logprobs=0`` and
  ``logprobs_mode="processed_logprobs"`` (``trl/generation/vllm_generation.py``,
  ``VLLMGeneration``) and keeps only the sampled token's log-prob
  (``GRPOTrainer._generate_single_turn``); TRL 1.16 exposes no top-K. The log has K = 0:
  only the ratio and binary masks are informative; ``pdm-replay replay`` with the
  checkpoint recomputes π, not µ.

Both modes record ``logprobs_mode="processed"`` (temperature-scaled, as TRL's own
log-probs) and the sampler's ``temperature`` / ``top_p`` / ``top_k`` in the footer;
``min_p`` or a ``repetition_penalty`` other than 1 change the sampler in ways the
extra forward does not model (a warning at start). ``loss_mask`` is
``completion_mask`` × ``tool_mask``; ``train_logprobs`` is ``old_per_token_logps`` when
TRL computed it; ``group_id`` names the prompt group (``num_generations`` completions of
one prompt); ``step`` is ``state.global_step`` at generation. Evaluation batches are not
logged. A sample that fails the ``validate`` checks (e.g. vLLM's NaN log-probs) is
dropped with a warning (``rollout_on_error="skip"``) rather than stopping training.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer

from pdm_replay.logger import RolloutLogger


@torch.no_grad()
def behavior_topk(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                  completion_ids: torch.Tensor, completion_mask: torch.Tensor, *,
                  temperature: float, top_k: int, rows_per_forward: int
                  ) -> dict[str, torch.Tensor]:
    """log µ under ``model`` at the completion tokens, plus its top-K (``plus_sampled``).

    ``prompt_ids`` / ``prompt_mask`` (B, P) left-padded, ``completion_ids`` /
    ``completion_mask`` (B, C). Returns ``behavior_logprobs`` (B, C) and ``topk_ids``,
    ``topk_logprobs``, ``topk_valid`` (B, C, K + 1): the K most likely tokens by
    descending log-prob, then the sampled token, valid only where it is not among them.
    ``rows_per_forward`` rows at a time: the logits tensor is rows × C × V float32.
    """
    ids = torch.cat([prompt_ids, completion_ids], 1)  # (B, P + C)
    attn = torch.cat([prompt_mask, completion_mask], 1)
    pos = (attn.long().cumsum(1) - 1).clamp(min=0)  # as generate() builds them
    c = completion_ids.shape[1]
    parts: list[dict[str, torch.Tensor]] = []
    for lo in range(0, ids.shape[0], max(rows_per_forward, 1)):
        sl = slice(lo, lo + max(rows_per_forward, 1))
        out = model(input_ids=ids[sl], attention_mask=attn[sl], position_ids=pos[sl],
                    logits_to_keep=c + 1, use_cache=False)
        logp = (out.logits[:, :-1].float() / temperature).log_softmax(-1)  # (b, C, V)
        k = completion_ids[sl].long()
        sampled = logp.gather(-1, k[..., None])  # (b, C, 1)
        top_lp, top_ids = logp.topk(top_k, dim=-1)  # (b, C, K)
        inside = (top_ids == k[..., None]).any(-1, keepdim=True)
        parts.append({"behavior_logprobs": sampled[..., 0],
                      "topk_ids": torch.cat([top_ids, k[..., None]], -1),
                      "topk_logprobs": torch.cat([top_lp, sampled], -1),
                      "topk_valid": torch.cat([torch.ones_like(top_ids, dtype=torch.bool),
                                               ~inside], -1)})
    return {name: torch.cat([p[name] for p in parts]) for name in parts[0]}


class RolloutLoggingGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` that logs each training generation batch (see the module).

    Extra keyword arguments: ``rollout_dir`` (the log directory), ``rollout_top_k``
    (K of the extra forward without vLLM; 0 logs the sampled token only),
    ``rollout_rows_per_forward`` (rows per extra forward; default
    ``per_device_train_batch_size``), ``rollout_rows_per_shard`` and
    ``rollout_on_error`` (see :class:`~pdm_replay.RolloutLogger`).
    """

    def __init__(self, *args: Any, rollout_dir: Path | str, rollout_top_k: int = 20,
                 rollout_rows_per_forward: int | None = None, rollout_rows_per_shard: int = 0,
                 rollout_on_error: str = "skip", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rollout_top_k = 0 if self.use_vllm else int(rollout_top_k)
        self.rollout_rows_per_forward = (rollout_rows_per_forward
                                         or self.args.per_device_train_batch_size)
        config = self.accelerator.unwrap_model(self.model).config
        if self.args.min_p or self.args.repetition_penalty != 1.0:
            warnings.warn("min_p / repetition_penalty change the sampler: the logged "
                          "behavior log-probs are the temperature-scaled model's, not the "
                          "sampler's", stacklevel=2)
        self.rollout_logger = RolloutLogger(
            rollout_dir, vocab_size=int(config.get_text_config().vocab_size),
            top_k=self.rollout_top_k, topk_convention="plus_sampled",
            logprobs_mode="processed", temperature=float(self.args.temperature),
            top_p=float(self.args.top_p), top_k_sampling=max(int(self.args.top_k or 0), 0),
            rank=self.accelerator.process_index, rows_per_shard=rollout_rows_per_shard,
            zero_padded_topk=False, on_error=rollout_on_error)
        self._rollout_calls = 0

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self._log_rollouts(out)
        return out

    def _group_ids(self, b: int) -> list[str]:
        """Prompt group of each local row: TRL groups ``num_generations`` consecutive rows
        of the batch gathered over processes (rank r holds rows r·B .. r·B + B − 1)."""
        first = self.accelerator.process_index * b
        return [f"s{self.state.global_step}-c{self._rollout_calls}-g"
                f"{(first + i) // self.num_generations}" for i in range(b)]

    def _log_rollouts(self, out: dict[str, Any]) -> None:
        mask = out["completion_mask"]
        loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
        if self.use_vllm:
            if out.get("sampling_per_token_logps") is None:  # a rollout_func without logprobs
                warnings.warn("vLLM returned no log-probs for this batch: not logged",
                              stacklevel=3)
                return
            behavior = {"behavior_logprobs": out["sampling_per_token_logps"]}
        else:
            behavior = behavior_topk(
                self.model, out["prompt_ids"], out["prompt_mask"], out["completion_ids"], mask,
                temperature=float(self.args.temperature), top_k=self.rollout_top_k,
                rows_per_forward=self.rollout_rows_per_forward)
            if self.rollout_top_k == 0:
                behavior = {"behavior_logprobs": behavior["behavior_logprobs"]}
        self.rollout_logger.log(
            self.state.global_step, response_ids=out["completion_ids"], response_mask=mask,
            loss_mask=loss_mask, advantages=out["advantages"],
            train_logprobs=out.get("old_per_token_logps"), prompt_ids=out["prompt_ids"],
            prompt_mask=out["prompt_mask"], group_ids=self._group_ids(mask.shape[0]),
            **behavior)
        self._rollout_calls += 1

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``GRPOTrainer.train``; buffered rollouts are flushed on the way out."""
        try:
            return super().train(*args, **kwargs)
        finally:
            self.rollout_logger.flush()
