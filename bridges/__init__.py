"""Waystation: bridges."""
