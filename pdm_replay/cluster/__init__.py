"""Connecting to a Ray cluster (the engine that takes ``masks`` beyond one machine)."""
