"""Rewind after a bug fix: the app's checkpoints (`python -m runtime checkpoint`) and the
rewind to one of them (`python -m runtime rewind`)."""
