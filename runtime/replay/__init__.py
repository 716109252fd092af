"""Replay by key and time: one key's records in a time range, read from the one partition the
key's producer chose, from the first offset of the range (`scan.py`); `python -m runtime replay` (`cli.py`)."""
