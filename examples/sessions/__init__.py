"""Sessions of user activity: a user's clicks with no pause longer than the gap between them, counted per session."""
