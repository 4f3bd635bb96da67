"""Waystation: core."""
