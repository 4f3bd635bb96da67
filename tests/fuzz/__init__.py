"""Fuzzers against a real node: one module per codec, helpers in fuzzkit and mutate."""
