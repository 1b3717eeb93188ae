"""dpsyn: differentially private prompt synthesis for in-context learning."""

__version__ = "0.1.0"
