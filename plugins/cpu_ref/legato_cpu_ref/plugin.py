"""The cpu_ref plugin: registers the backend from its capability file."""
from importlib.resources import files

import legato


@legato.hookimpl
def legato_register_backends(register):
    register(str(files("legato_cpu_ref") / "capability.yaml"))
