"""Heuristic token pricing (contract: "Pricing"): the only home of the pricing constants."""
