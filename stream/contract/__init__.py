"""The event contract (SPEC §1): parse and validate events, decode dsh storage rows."""
