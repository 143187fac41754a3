"""In-trainer entry points: a few lines in your trainer write a rollout/v1 log.

- :mod:`pdm_replay.integrations.verl`: ``rollout_logger(directory, config)`` for
  ``RayPPOTrainer.fit`` (verl, sail-sg/Stable-RL), then ``logger.log_verl(batch, step)``.
- :mod:`pdm_replay.integrations.trl`: ``RolloutLoggingGRPOTrainer``, a TRL ``GRPOTrainer``
  that logs every generation batch.

Each module imports its trainer package only when imported itself.
"""
