"""Named float tolerances of the tests that compare float32 model outputs, each derived.

A bound is a number of float32 ulps at the magnitude compared (:func:`ulp32`), chosen with
a stated margin over the largest difference measured on two CPU code paths: torch's
portable kernels (``ATEN_CPU_CAPABILITY=default``) and this machine's own (AVX-512),
2026-12-02, by recording every ``torch.allclose`` / ``np.allclose`` of tests/replay,
tests/integrations and tests/test_end_to_end.py under each (the numbers below: worst
``|a - b|`` default / AVX-512). Exact float64 math (tests/math) needs no such bound: its
tolerances are ulps of float64 stated where they are used.

Not here on purpose: finite-difference tolerances (test_attribution's, test_actual's
curvature bound), which bound a truncation error, not rounding, and are derived in place.
"""

from __future__ import annotations

import math

F32_EPS = 2.0 ** -23  # float32 spacing at 1.0 (torch.finfo(torch.float32).eps)


def ulp32(magnitude: float) -> float:
    """The float32 spacing in the binade holding ``magnitude`` (at least that of 1.0).

    >>> ulp32(1.0) == F32_EPS, ulp32(9.4) == 8 * F32_EPS
    (True, True)
    """
    return F32_EPS * 2.0 ** math.floor(math.log2(max(abs(magnitude), 1.0)))


# The tiny Qwen3 checkpoints (pdm_replay.testing.fixtures.tiny_qwen3: vocabulary 384) give
# |log π| < 16 at every logged support entry (measured max 13.2), binade [8, 16).
TINY_LOGP_MAGNITUDE = 8.0

# Recomputed log π (chunked LM head, padded micro-batches, float32 log-softmax) against an
# independent float32 forward in float64 log-softmax: one float32 GEMM per logit
# (hidden 32: a few ulps of the logit) and a float32 log-sum-exp over 384 entries.
# Measured 9.7e-7 / 9.5e-7 (test_recompute, micro-batches 1 vs 8: 4.3e-7 / 3.9e-7), that
# is 1 ulp; the bound is 16 ulps.
LOGPROB_ATOL = 16 * ulp32(TINY_LOGP_MAGNITUDE)  # 1.5e-5

# The same computation in a different chunking of the LM head only (the same kernels on
# the same rows): measured 4.8e-7 / 4.8e-7 (½ ulp); the bound is 4 ulps.
CHUNKING_ATOL = 4 * ulp32(TINY_LOGP_MAGNITUDE)  # 3.8e-6

# Probability-scale results (tail mass, Σ π², KL) of those forwards: values ≤ 1 formed
# from exp(log π), so the log π error above times at most 1: measured 1.5e-7 / 8.3e-8
# (kl_exact, micro-batches), 6.9e-8 (Σ π²); the bound is 8 ulps at 1.0.
PROB_ATOL = 8 * ulp32(1.0)  # 9.5e-7

# A whole replay's float columns, one process vs two (torchrun, gradients all-reduced:
# a different float32 summation order of the gradient, then the post-update forward):
# the log π bound (the step moves θ by ~lr, far below float32's relative resolution).
RUN_ATOL = LOGPROB_ATOL

# The replay's recomputed log π(k) against the train_logprobs the synthetic fixture
# logged (float32 log-softmax of float64 logits, another program): the log π bound plus
# the fixture's own float32 rounding of |log π| ≤ 16 (½ ulp): 128 ulps leaves room for a
# different BLAS in the tiny model's forward.
RECOMPUTE_VS_LOGGED = 128 * ulp32(TINY_LOGP_MAGNITUDE)  # 1.2e-4

# The shipped sample's model (sample_data: Qwen3, hidden 64, vocabulary 4103): |log π| < 32
# at every logged support entry (measured max 30.8), binade [16, 32).
SAMPLE_LOGP_MAGNITUDE = 16.0

# A recompute of log π on the sample (`replay`'s pre-update pass, `pdm-replay recompute`:
# right-padded micro-batches, chunked LM head) against the train columns its trainer logged
# (one unpadded float32 forward per sequence, full log-softmax): other GEMM and attention
# shapes, so a few ulps of the logits, then a float32 log-sum-exp over 4103 entries.
# Measured 2026-12-06 on 48 rows, worst |Δ| under ATEN_CPU_CAPABILITY=default / this
# machine's AVX-512 kernels: 1.6e-5 / 8.8e-6 at k, 1.9e-5 / 1.9e-5 over the top-K, at most
# 10 ulps at 16 (replay on 2 steps x 32 samples: 8.8e-6, tests/test_masks_replay_agree.py);
# over the whole sample (87,167 tokens, own kernels) 4.0e-5 at k and 6.0e-5 over the top-K
# (32 ulps, at |log π| up to 30.8, tests/test_recompute_command.py's command): the bound is
# 64 ulps, twice the whole sample's worst.
SAMPLE_RECOMPUTE_VS_LOGGED = 64 * ulp32(SAMPLE_LOGP_MAGNITUDE)  # 1.2e-4
