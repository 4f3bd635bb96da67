"""Waystation: gateway."""
