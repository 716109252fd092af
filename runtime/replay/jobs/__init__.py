"""Replay jobs as a service: requests on a topic, each job's state in a compacted topic, jobs that outlive
their worker (runtime/replay/jobs/service.py)."""
