"""A ``masks --engine ray`` output directory built without a cluster: the engine's own map
function and driver bookkeeping, run in this process (tests/test_masks_ray_cluster.py runs
the real cluster)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pdm_replay.commands.masks import MASK_INPUT_COLUMNS, MasksConfig
from pdm_replay.commands.masks_ray import Progress, _commit, _take, plan_job, process_block
from pdm_replay.io.staged import open_staging

SAMPLE = Path(__file__).parent.parent / "sample_data" / "rollouts" / "part-00000.parquet"


def ray_output(log: Path, out: Path, rows_per_block: int) -> Path:
    """What ``run_masks_ray`` commits, with blocks of ``rows_per_block`` rows run here."""
    cfg = MasksConfig(log=(log,), out=out, engine="ray")
    stage = open_staging(out, resume=False)
    plan, progress = plan_job(cfg, stage), Progress()
    table = pq.read_table(log, columns=list(MASK_INPUT_COLUMNS))
    for start in range(0, table.num_rows, rows_per_block):
        block = table.slice(start, rows_per_block)
        block = block.append_column("path", pa.array([plan.files[0]] * block.num_rows))
        for result in process_block(block, plan.ctx).to_pylist():
            _take(plan, stage, result, progress)
    _commit(plan, stage, cfg)
    return out
