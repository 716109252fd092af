"""PySpark jobs that build store snapshots offline: from bulk data (bootstrap) or a changelog (snapshot)."""
