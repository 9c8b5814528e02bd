"""The three projections (contract: "Projections"), the shared claim fold, and the positional
X-ray (contract: "The positional X-ray")."""
