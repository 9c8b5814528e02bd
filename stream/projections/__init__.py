"""The three projections of SPEC §4, the shared claim fold, and the positional X-ray."""
