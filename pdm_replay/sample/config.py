"""What ``make-sample`` builds: its options (:class:`SampleConfig`), the size presets, the
sample's layout and its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pdm_replay.errors import FieldError
from pdm_replay.sample.log_checks import SampleStats
from pdm_replay.sample.model import ModelConfig
from pdm_replay.sample.rl import RLStepStats
from pdm_replay.sample.tokenizer import N_NUMBERS
from pdm_replay.sample.train import TrainConfig

ENTRIES = ("checkpoints", "behavior", "rollouts", "README.md")
CHECKPOINT = "checkpoints/step_{step}"  # θ_t; relative to OUT_DIR
# µ of logged step t: a link to the engine's checkpoint, loaded in bf16 (no second copy)
BEHAVIOR = "behavior/step_{step}"
OPTIMIZER_FILE = "optimizer.pt"  # the trainer's AdamW state_dict before the last logged step
LOG_FILE = "rollouts/part-00000.parquet"
Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class SizePreset:
    """Everything a size fixes: model shape, training and task (the log holds the logged
    steps' batches: ``logged_steps × rl_prompts × group_size`` samples)."""

    model: ModelConfig
    train: TrainConfig
    min_len: int
    max_len: int
    max_value: int = N_NUMBERS  # numbers are drawn from [0, max_value)
    top_k: int = 20


SIZES: dict[str, SizePreset] = {
    "small": SizePreset(model=ModelConfig(), train=TrainConfig(), min_len=4, max_len=10),
    # tiny: seconds; numbers < 20 so a short SFT already gives mixed rewards; four
    # logged steps (2..5) over two engine syncs (staleness 0, 1) after 2 warm-up steps.
    "tiny": SizePreset(model=ModelConfig(hidden_size=32, intermediate_size=64),
                       train=TrainConfig(sft_steps=150, sft_batch=16, sft_lr=2e-2,
                                         rl_steps=6, sync_every=2, logged_steps=4,
                                         rl_prompts=2, rl_lr=1e-2),
                       min_len=2, max_len=4, max_value=20),
}


class SampleExists(FieldError, FileExistsError):
    """The sample directory already holds a sample (a ``FileExistsError`` too)."""


@dataclass(frozen=True)
class SampleConfig:

    """Options of ``pdm-replay make-sample`` (1:1)."""

    seed: int = 0
    size: str = "small"
    force: bool = False

    @property
    def preset(self) -> SizePreset:
        if self.size not in SIZES:
            raise FieldError("{size} {got!r}: expected one of {known}", got=self.size,
                             known=", ".join(SIZES))
        return SIZES[self.size]

    def command(self, out_dir: str) -> str:
        return f"pdm-replay make-sample {out_dir} --seed {self.seed} --size {self.size}"


@dataclass
class SampleResult:
    out_dir: Path
    stats: SampleStats
    rl_steps: list[RLStepStats]
    sft_loss: float
    seconds: dict[str, float] = field(default_factory=dict)
