"""`python -m legato.frontends.onnx_conformance`: the onnx importer's conformance run, kept
under the name it was published with; the harness lives in legato.testing.onnx_conformance."""
import sys

from ..testing.onnx_conformance import main

if __name__ == "__main__":
    sys.exit(main())
