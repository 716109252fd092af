"""The task actor: one processor on one partition, its context, and what happens to a record that fails."""
