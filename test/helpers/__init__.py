"""Builders shared by the test modules (`from helpers.<module> import ...`); the pytest
fixtures over them are in conftest.py."""
