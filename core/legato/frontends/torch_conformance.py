"""`python -m legato.frontends.torch_conformance`: the torch importer's conformance run, kept
under the name it was published with; the harness lives in legato.testing.torch_conformance."""
import sys

from ..testing.torch_conformance import main

if __name__ == "__main__":
    sys.exit(main())
