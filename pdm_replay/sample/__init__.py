"""Real sample data: a small Qwen3 policy, real GRPO steps fed by a stale bf16 engine.

``pdm-replay make-sample OUT_DIR [--seed] [--size small|tiny]`` (:mod:`.make`) writes
``checkpoints/step_<t>`` (θ_t of every logged step and the last θ, the trainer's AdamW
state once), ``behavior/step_<t>`` links and a rollout/v1 log; ``sample_data/`` in the
repository is its ``small`` output.
"""
