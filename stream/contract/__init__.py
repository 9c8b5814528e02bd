"""The event contract (contract: "Events", "Validation", "Session logs"): parse and validate
events, decode dsh storage rows."""
