"""Heuristic token pricing (SPEC §2): the only home of the pricing constants."""
