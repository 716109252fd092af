"""Per-minute payment totals per account and currency, by the payments' own time, late payments set aside."""
