"""Real sample data: a tiny Qwen3 policy, a real GRPO step, rollouts logged from ``generate``.

``pdm-replay make-sample OUT_DIR [--seed] [--size small|tiny]`` (:mod:`.make`) writes
``behavior/`` and ``policy/`` checkpoints and a rollout/v1 log; ``sample_data/`` in the
repository is its ``small`` output.
"""
