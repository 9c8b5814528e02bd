"""Per-session processing (SPEC §5): cursors, versions, faults, plan then commit; the row codec."""
