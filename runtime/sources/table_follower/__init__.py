"""The table follower: a database table's rows, snapshotted then followed by their version, into a
compacted topic (reference data, as a JDBC source connector would bring it): `config.py` what
an app's YAML says of one, `follower.py` how it is shipped."""
