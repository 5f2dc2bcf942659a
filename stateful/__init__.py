"""Hypothesis state machines that check an engine against the reference model."""
