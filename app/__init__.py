"""dpsyn: differentially private prompt synthesis for in-context learning."""

from importlib.util import find_spec

__version__ = "0.1.0"

# dpsyn_client belongs to the dpsyn-client distribution, which dpsyn requires (the server's
# chat rendering, the CLI's HTTP client). Without it, dpsyn fails at once and names the
# distribution to install, rather than at some later import naming only a module. find_spec
# looks without importing, so light entry points (dpsyn-worker-health) stay light.
if find_spec("dpsyn_client") is None:
    raise ModuleNotFoundError(
        "dpsyn requires the dpsyn-client distribution (the dpsyn_client package), which is not "
        "installed: install it (from a dpsyn checkout: pip install ./clients/python), then "
        "`pip check` for anything else missing",
        name="dpsyn_client",
    )
