"""Key-value stores, changelogs and restores."""
