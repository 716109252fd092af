"""The worker: one consumer, its poll loop feeding the task actors, and the processes of --workers N."""
