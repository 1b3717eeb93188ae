"""Synthesis methods behind one interface, and the registry that names them.

Each method (the token loop with its Tang and AdaDPSyn aggregators, PromptPATE) is one object
that owns its request parameters, its config, its plan (the privacy event that admission
reserves), how that plan is rebuilt from a stored job, how it runs and which of its stats are
public. The API, the services, the workers and the CLI ask :mod:`app.methods.registry`
instead of branching on the method's name, so a new method is one module here and one line
in the registry.

This package is algorithms only: it imports ``app.synthesis``, ``app.pate`` and
``app.privacy``, never the web or database layers. Importing it is cheap: the method modules
load only through :mod:`app.methods.registry`.
"""
