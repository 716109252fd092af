"""The commands besides running an app (`topics`, `produce`, `consume`, `describe`, `reset`), and what they
share: connecting to the cluster, positions and times, topics' serdes, JSON lines. `runtime/cli.py` lists
every command; each is a module with `main(argv) -> int`, imported only when its command runs.
"""
