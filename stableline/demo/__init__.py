"""Demonstrations that run against a real broker."""
