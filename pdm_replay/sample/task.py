"""The synthetic verifiable task: sort a list of numbers, one token per number.

Prompt ``<bos> sort : 412 7 93 ->``, target answer ``7 93 412 <eos>``. The reward is
verifiable and graded: the fraction of answer slots holding the right number, over the
longer of answer and target, so near-misses still get a GRPO signal.

Examples
--------
>>> from pdm_replay.sample.tokenizer import build_tokenizer
>>> task = SortTask(build_tokenizer(), min_len=3, max_len=3)
>>> nums = [412, 7, 93]
>>> task.tokenizer.decode(task.prompt_ids(nums))
'<bos> sort : 412 7 93 ->'
>>> task.reward(task.target_ids(nums), nums), task.reward(task.number_ids([7, 412]), nums)
(1.0, 0.3333333333333333)
>>> import torch
>>> group_advantages(torch.tensor([[1.0, 0.0], [0.5, 0.5]])).round(decimals=4).tolist()
[[1.0, -1.0], [0.0, 0.0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerFast

from pdm_replay.sample.tokenizer import N_NUMBERS


@dataclass(frozen=True)
class SortTask:
    """Lists of ``min_len``..``max_len`` distinct numbers in ``[0, max_value)``."""

    tokenizer: PreTrainedTokenizerFast
    min_len: int
    max_len: int
    max_value: int = N_NUMBERS

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def sample_lists(self, n: int, gen: torch.Generator) -> list[list[int]]:
        """``n`` random problems, deterministic in ``gen``'s state."""
        lengths = torch.randint(self.min_len, self.max_len + 1, (n,), generator=gen)
        return [torch.randperm(self.max_value, generator=gen)[: int(length)].tolist()
                for length in lengths]

    def number_ids(self, numbers: Sequence[int]) -> list[int]:
        return self.tokenizer.convert_tokens_to_ids([str(x) for x in numbers])

    def prompt_ids(self, numbers: Sequence[int]) -> list[int]:
        text = "sort : " + " ".join(str(x) for x in numbers) + " ->"
        return self.tokenizer(text).input_ids

    def target_ids(self, numbers: Sequence[int]) -> list[int]:
        """The correct answer tokens, ending with ``<eos>``."""
        return self.number_ids(sorted(numbers)) + [self.eos_id]

    def max_new_tokens(self, numbers: Sequence[int]) -> int:
        """Room for the answer, its ``<eos>`` and two extra tokens (a wrong, longer answer)."""
        return len(numbers) + 3

    def reward(self, response_ids: Sequence[int], numbers: Sequence[int]) -> float:
        """Fraction of slots right, over max(len(answer), len(target)); in ``[0, 1]``."""
        answer = list(response_ids)
        if self.eos_id in answer:
            answer = answer[: answer.index(self.eos_id)]
        target = self.number_ids(sorted(numbers))
        hits = sum(a == b for a, b in zip(answer, target))
        return hits / max(len(answer), len(target))


def group_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """GRPO advantages ``(P, G)`` from rewards ``(P, G)``: (r − group mean) / (group std + eps).

    The population std (as in the foundation fixtures) is used; a group with equal rewards
    gets advantage 0.
    """
    mean = rewards.mean(-1, keepdim=True)
    std = rewards.std(-1, unbiased=False, keepdim=True)
    return (rewards - mean) / (std + eps)
