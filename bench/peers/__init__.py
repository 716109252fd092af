"""`python -m bench.peers`: this runtime beside Quix Streams, Faust, Kafka Streams and a bare aiokafka loop.

The peers' apps (`quix_app`, `faust_app`) run in the peers' own virtualenvs and import nothing of this
repository but `bench.peers.peer_args`, so this package imports nothing on its own.
"""
