"""Per-session processing (contract: "Per-session processing"): cursors, versions, faults,
plan then commit, tallies; the row codec; the batch fold and the offline fold."""
