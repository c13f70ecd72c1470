"""Frozen models of checked input, one module per kind, and the document they come from."""
