"""Test data the package ships for its own tests, docs and benchmarks (as ``polars.testing``).

- :mod:`~pdm_replay.testing.fixtures`: synthetic rollout/v1 logs and tiny models
  (:func:`~pdm_replay.testing.fixtures.write_synthetic_log`);
- :mod:`~pdm_replay.testing.synthetic_run`: a synthetic replay output with a known answer
  (:func:`~pdm_replay.testing.synthetic_run.example_run`), for the report's docstrings and tests.
"""
