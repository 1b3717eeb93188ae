"""Synthesis methods behind one interface, and the registry that names them.

Each method (the token loop with its Tang and AdaDPSyn aggregators, PromptPATE, PromptDPSGD)
is one object that owns its request parameters (declared once, :mod:`app.methods.params`),
its config, its plan (the privacy event that admission reserves), how that plan is rebuilt
from a stored job, how it runs, its progress unit and which of its stats are public. The API,
the services, the workers, the CLI, the dashboard and the docs table (:mod:`app.methods.docs`)
ask :mod:`app.methods.registry` instead of branching on the method's name, so a new method is
one module and one :func:`~app.methods.registry.register` call, from here or from outside
``app`` (a test registers its own).

This package is algorithms only: it imports ``app.synthesis``, ``app.pate`` and
``app.privacy``, never the web or database layers. Importing it is cheap: the method modules
load only through :mod:`app.methods.registry`.
"""
