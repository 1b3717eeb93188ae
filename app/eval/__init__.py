"""Downstream in-context-learning evaluation of synthesised (and baseline) prompts."""
