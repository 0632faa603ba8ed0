"""The ONNX conformance harness moved to legato.testing.onnx_conformance (`legato
check-backend NAME --onnx`); this name and `python -m legato.frontends.onnx_conformance`
keep working."""
import sys

from ..testing.onnx_conformance import (EXPANDED, REFERENCE, Outcome, bind_constants,
                                        compare, excluded_reason, executing_backends, main,
                                        node_cases, run, run_case, summary)

__all__ = ["EXPANDED", "REFERENCE", "Outcome", "bind_constants", "compare", "excluded_reason",
           "executing_backends", "main", "node_cases", "run", "run_case", "summary"]

if __name__ == "__main__":
    sys.exit(main())
