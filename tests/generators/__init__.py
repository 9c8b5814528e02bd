"""Deterministic generators of test input (dsh session logs) shared by the test suites."""
