"""Tokenizer, task, reward, advantages and sampler pieces of ``pdm_replay.sample``."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from pdm_replay.sample.model import ModelConfig, build_model
from pdm_replay.sample.rollout import (generate, response_lengths, sampling_config,
                                       token_logprobs, topk_plus_sampled)
from pdm_replay.sample.task import SortTask, group_advantages
from pdm_replay.sample.tokenizer import build_tokenizer, save_tokenizer

TOK = build_tokenizer()
TASK = SortTask(TOK, 2, 6)


def test_tokenizer_round_trips_after_save(tmp_path: Path) -> None:
    save_tokenizer(TOK, tmp_path)
    loaded = AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    assert len(loaded) == len(TOK) >= 1000
    text = "sort : 999 0 41 -> 0 41 999"
    ids = loaded(text).input_ids
    assert ids[0] == loaded.bos_token_id and len(ids) == 1 + len(text.split())
    assert loaded.decode(ids, skip_special_tokens=True) == text
    assert loaded.convert_ids_to_tokens(ids[3]) == "999"


problems = st.lists(st.integers(0, 999), min_size=1, max_size=8, unique=True)


@settings(max_examples=50, deadline=None)
@given(problems, st.lists(st.integers(0, 999), max_size=10))
def test_reward_is_one_only_for_the_sorted_answer(nums: list[int], guess: list[int]) -> None:
    assert TASK.reward(TASK.target_ids(nums), nums) == 1.0
    r = TASK.reward(TASK.number_ids(guess) + [TASK.eos_id], nums)
    assert 0.0 <= r <= 1.0
    assert (r == 1.0) == (guess == sorted(nums))


def test_reward_ignores_tokens_after_eos_and_penalises_length() -> None:
    nums = [5, 3, 9]
    assert TASK.reward(TASK.target_ids(nums) + TASK.number_ids([1, 2]), nums) == 1.0
    assert TASK.reward(TASK.number_ids([3, 5, 9, 9]), nums) == 0.75


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1), min_size=8, max_size=8), min_size=1, max_size=4))
def test_group_advantages_are_normalized_per_group(rewards: list[list[float]]) -> None:
    r = torch.tensor(rewards, dtype=torch.float64)
    adv = group_advantages(r)
    assert torch.allclose(adv.mean(-1), torch.zeros(len(rewards), dtype=adv.dtype),
                          atol=1e-9)
    spread = r.std(-1, unbiased=False) > 1e-3
    if spread.any():
            assert torch.allclose(adv[spread].std(-1, unbiased=False),
                              torch.ones(int(spread.sum()), dtype=adv.dtype), atol=1e-2)


def test_topk_plus_sampled_matches_vllm_convention() -> None:
    logp = torch.log_softmax(torch.randn(50, 30, generator=torch.Generator().manual_seed(0)),
                             -1)
    token = torch.randint(0, 30, (50,), generator=torch.Generator().manual_seed(1))
    ids, lp = topk_plus_sampled(logp, token, 5)
    assert ids.shape == (50, 6)
    top = torch.topk(logp, 5, -1).indices
    assert torch.equal(ids[:, :5], top)
    inside = (top == token[:, None]).any(-1)
    assert torch.equal(ids[:, 5], torch.where(inside, -1, token))
    assert torch.equal(lp[~inside, 5], logp[~inside].gather(1, token[~inside, None])[:, 0])
    assert torch.isneginf(lp[inside, 5]).all()


def test_response_lengths_stop_at_first_eos() -> None:
    r = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8], [2, 2, 0, 0]])
    assert response_lengths(r, eos_id=2).tolist() == [2, 4, 1]


def test_sampler_is_full_softmax_and_scores_are_the_model_logits() -> None:
    cfg = sampling_config(4, 3, eos_id=2, pad_id=0, with_logprobs=True)
    assert (cfg.temperature, cfg.top_k, cfg.top_p, cfg.do_sample) == (1.0, 0, 1.0, True)
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden_size=16, intermediate_size=32), 40, bos_id=1,
                        eos_id=2, pad_id=0).eval()
    prompt = torch.tensor([[1, 7, 8, 9]])
    out = generate(model, prompt, group_size=3, max_new_tokens=4, eos_id=2, pad_id=0,
                   with_logprobs=True)
    assert out.responses.shape[0] == 3 and out.logp is not None
    # Position 0 of every sample sees the same prompt: µ is the model's own softmax there.
    with torch.no_grad():
        ref = torch.log_softmax(model(input_ids=prompt).logits[0, -1].float(), -1)
    assert torch.allclose(out.logp[:, 0], ref.expand(3, -1), atol=1e-5)
    assert math.isclose(float(out.logp[0, 0].exp().sum()), 1.0, rel_tol=1e-5)


def test_token_logprobs_equal_the_per_sequence_forward() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden_size=16, intermediate_size=32), 40, bos_id=1,
                        eos_id=2, pad_id=0).eval()
    prompts, responses = [[1, 5, 6], [1, 7, 8, 9, 10]], [[11, 12, 2], [13]]
    lp, valid = token_logprobs(model, prompts, responses, pad_id=0)
    assert valid.tolist() == [[True, True, True], [True, False, False]]
    with torch.no_grad():
        for i, (p, r) in enumerate(zip(prompts, responses)):
            ref = torch.log_softmax(model(input_ids=torch.tensor([p + r])).logits[0], -1)
            want = ref[torch.arange(len(p) - 1, len(p) - 1 + len(r)), torch.tensor(r)]
            assert torch.allclose(lp[i, : len(r)], want, atol=1e-6)
