"""``pdm-replay replay``: reload the checkpoint, recompute π, simulate one step per mask."""

from __future__ import annotations

import time
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from pdm_replay.cli.app import app
from pdm_replay.cli.common import PlainHelpCommand, console, fail, progress_bar, value
from pdm_replay.cli.errors import error_text
from pdm_replay.cli.mask_options import (ClipRatioC, MaskModules, MaskParams,
                                         parse_mask_params)
from pdm_replay.cli.masks import (THRESHOLD_DEFAULTS, EpsHigh, EpsLow, parse_mask_list,
                                  threshold_options)
from pdm_replay.cli.options import cli_param, with_options
from pdm_replay.masks import FLAGGED_THRESHOLDS
from pdm_replay.names import ACTUAL
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.sweep import Sweep, parse_values

if TYPE_CHECKING:
    from pdm_replay.replay.distributed import Dist
    from pdm_replay.commands.replay import ReplayResult


SWEEP_HELP = ("; several values separated by commas (0.05,0.15) sweep it: each mask that "
              "reads it is simulated and recorded once per value, as MASK@VALUE")
# replay's threshold options take value lists (masks' take one value: cli.masks)
DeltaKLs = Annotated[str, typer.Option("--delta-kl", help="δ of the KL trust region" + SWEEP_HELP)]
DeltaTVs = Annotated[str, typer.Option("--delta-tv", help="δ of the TV trust region" + SWEEP_HELP)]
Epss = Annotated[str, typer.Option("--eps", help="ε of ppo_clip" + SWEEP_HELP)]


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


PAIR_WIDTH = 18  # "vs pdm_kl_uniform": a pair's two mask names, one per line, unfolded


def print_summary(result: ReplayResult, seconds: float) -> None:
    """The headline alignment numbers (SPEC §6) per update basis, registry pair and δ
    (the rows of ``pdm-replay report``'s headline)."""
    m = result.manifest
    console.print(f"replayed {m['tokens']} loss tokens over {m['config']['seeds']} seeds "
                  f"-> {result.run_dir} ({seconds:.1f} s)")
    # no rules and the two rates of a side on two lines: the table fits the 80
    # columns rich assumes when the output is piped to a file (nothing folded or cut)
    t = Table(title="ratio vs predictive mask of each registry pair", box=None,
              pad_edge=False, title_justify="left")
    for col in ("update", "pair", "δ", "out of\nregion\n/ seed", "dis-\nagree\n/ seed",
                "unsafe\nratio\npooled\n(seed\nmean)", "unsafe\npred.\npooled\n(seed\nmean)",
                "W/L/T/\nempty"):
        t.add_column(col, justify="left" if col in ("update", "pair") else "right",
                     min_width=PAIR_WIDTH if col == "pair" else None)
    from pdm_replay.report.display import threshold_cell  # lazy: polars, after the seeds
    for a in result.summary:
        # a band (the IcePop pair's [0.5, 5.0]) on two lines, to keep within 80 columns
        band = threshold_cell(a).replace(", ", ",\n")
        t.add_row(a["basis"], f"{a['ratio_mask']} vs\n{a['predictive_mask']}", band,
                  f"{a['out_of_region_per_seed']:.1f}", f"{a['disagreement_per_seed']:.1f}",
                  f"{_rate(a['unsafe_ratio_pooled'])}\n({_rate(a['unsafe_ratio_seed_mean'])})",
                  f"{_rate(a['unsafe_predictive_pooled'])}\n"
                  f"({_rate(a['unsafe_predictive_seed_mean'])})",
                  f"{a['wins']}/{a['losses']}/{a['ties']}/{a['empty_seeds']}")
    if result.summary:
        console.print(t)
        console.print("unsafe keep: share of the disagreement tokens a mask keeps whose D "
                      "grew under the update named in `update` (own: the mask's own "
                      "simulated update; lower is better). `pdm-replay report` adds the "
                      "intervals and tests")
    else:
        console.print("no alignment summary: --masks needs both masks of a ratio / "
                      "predictive pair (e.g. dppo_topk_kl and pdm_kl_agg)")
    _print_updates(m)
    _print_deviation(m.get("recompute_deviation"))
    for w in m.get("warnings", []):
        console.print(f"[yellow]warning:[/] {w}")


def _print_deviation(dev: dict | None) -> None:
    """Recomputed π vs the log's train log-probs; a warning beyond the report's bound."""
    if not dev:
        return
    from pdm_replay.report.legend import DEVIATION_WARN  # lazy: it imports DuckDB
    console.print(f"recompute vs logged train_logprobs: max |Δ| {dev['max']:.3g}, "
                  f"mean |Δ| {dev['mean']:.3g} over {dev['tokens']} tokens")
    if dev["mean"] > DEVIATION_WARN:
        console.print("[yellow]warning:[/] the recomputed log π(k) differ from the "
                      "logged train_logprobs by more than "
                      f"{DEVIATION_WARN} nats on average: is --checkpoint the policy "
                      "that scored this log (same step, temperature, dtype)? "
                      "`pdm-replay report` repeats this warning")


def _print_updates(m: dict) -> None:
    """The actual update's step norm and, with --lr auto, the lrs it chose."""
    groups = [g for seed in m.get("update_steps", {}).values() for g in seed]
    norms = [g["actual_step_norm"] for g in groups if g.get("actual_step_norm") is not None]
    if ACTUAL in m.get("updates", []):
        size = f"; ‖θ_t+1 − θ_t‖ = {norms[0]:.4g}" if len(set(norms)) == 1 else ""
        console.print(f"actual update: the trainer's next checkpoint, kept by "
                      f"{m['config']['trainer_mask']}{size}")
    if m["config"]["lr"] == "auto":
        lrs = [u["lr"] for g in groups for u in g["updates"].values()]
        console.print(f"--lr auto: each simulated step scaled to the actual step's norm, "
                      f"lr {min(lrs):.4g} .. {max(lrs):.4g} (manifest update_steps)")
    overlap = m.get("seed_overlap", {})
    if overlap.get("overlap"):
        console.print(f"[yellow]warning:[/] {overlap['samples_in_several_seeds']} samples are "
                      "in several seeds: the seeds are not independent")


@app.command(cls=PlainHelpCommand)
@with_options(ReplayConfig, shared={"mask_modules": MaskModules}, after={
    "chunk_tokens": [cli_param("delta_kl", DeltaKLs, str(THRESHOLD_DEFAULTS.delta_kl)),
                     cli_param("delta_tv", DeltaTVs, str(THRESHOLD_DEFAULTS.delta_tv))],
    "attribution_sample": [cli_param("eps", Epss, str(THRESHOLD_DEFAULTS.eps)),
                           cli_param("eps_low", EpsLow, THRESHOLD_DEFAULTS.eps_low),
                           cli_param("eps_high", EpsHigh, THRESHOLD_DEFAULTS.eps_high),
                           cli_param("clip_ratio_c", ClipRatioC, THRESHOLD_DEFAULTS.clip_ratio_c),
                           cli_param("mask_param", MaskParams, None)]})
def replay(**options: Any) -> None:
    """Replay a rollout log against its training checkpoint: recompute π at every logged
    support (chunked, full-vocabulary statistics), record every mask's decision, simulate
    one optimizer step under each update mask, and measure the realized ΔD per token.
    Writes RUN_DIR/tokens/, RUN_DIR/updates/ (per seed) and RUN_DIR/manifest.json.
    Several processes: torchrun --nproc_per_node N -m pdm_replay replay ... (samples
    sharded by rank, gradients summed: the same step as one process).
    """
    # torch and transformers load here, when a replay runs, not for --help.
    from pdm_replay.replay.distributed import LOCAL, init_from_env
    dist = LOCAL
    try:
        cfg = config_from_options(options)
        dist = init_from_env(cfg.device, cfg.fsdp)
        start = time.perf_counter()
        result = _run(cfg, dist)
    except (ValueError, FileNotFoundError) as exc:
        message = error_text(exc)
        fail(f"rank {dist.rank}: {message}" if dist.active else message)
    finally:
        dist.close()
    if dist.is_main:
        print_summary(result, time.perf_counter() - start)


# The command's parameters that are not ReplayConfig fields: the threshold options,
# which ReplayConfig holds as `thresholds` and `sweep`.
THRESHOLD_PARAMS = (*FLAGGED_THRESHOLDS, "mask_param")


def config_from_options(options: dict) -> ReplayConfig:
    """The ReplayConfig of the command's parameters ``options``: same-named fields pass
    through (choices as their strings), the threshold options become ``thresholds`` and
    ``sweep``. On ``--resume`` without ``--mask-module`` the run's recorded modules load."""
    kw = {k: value(v) if isinstance(v, Enum) else v
          for k, v in options.items() if k not in THRESHOLD_PARAMS}
    kw["masks"] = parse_mask_list(kw["masks"])
    kw["update_masks"] = parse_mask_list(kw["update_masks"]) or ()
    if kw["resume"] and not kw["mask_modules"]:
        from pdm_replay.replay.manifest import recorded_mask_modules
        kw["mask_modules"] = recorded_mask_modules(kw["out"])
    kw["mask_modules"] = tuple(kw["mask_modules"] or ())  # ReplayConfig loads them first
    o = options
    sweep = Sweep(eps=parse_values(o["eps"], "eps"),
                  delta_kl=parse_values(o["delta_kl"], "delta_kl"),
                  delta_tv=parse_values(o["delta_tv"], "delta_tv"))
    thresholds = threshold_options(sweep.eps[0], o["eps_low"], o["eps_high"],
                                   sweep.delta_kl[0], sweep.delta_tv[0], o["clip_ratio_c"],
                                   parse_mask_params(o["mask_param"]))
    return ReplayConfig(**kw, thresholds=thresholds, sweep=sweep)


def _run(cfg: ReplayConfig, dist: Dist) -> ReplayResult:
    """Run the replay; rank 0 alone shows the progress bar."""
    from pdm_replay.commands.replay import run_replay
    if not dist.is_main:
        return run_replay(cfg, dist=dist)
    with progress_bar("replay", None, "stages") as bar:
        def tick(done: int, total: int, tokens_per_s: float) -> None:
            bar.update(bar.task_ids[0], completed=done, total=total,
                       rate=f"{tokens_per_s:,.0f} tok/s")
        return run_replay(cfg, on_progress=tick, dist=dist)
