"""Waystation: config."""
