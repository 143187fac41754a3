"""Command implementations whose work spans packages (one module per command,
as ``pdm_replay.cli`` has one Typer module per command)."""
