"""Rewind after a bug fix (seed 004): the app's checkpoints (`python -m runtime checkpoint`) and the
rewind to one of them (`python -m runtime rewind`)."""
