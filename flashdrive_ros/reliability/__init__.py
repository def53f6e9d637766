"""Reliability tools: fault injection into a bag's message stream, soak runs."""
