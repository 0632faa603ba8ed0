"""cpu_ref through the conformance kit: its legal ops and kernels on every sample (read-only
inputs, arrays of the inferred dtype and shape; values agree with itself, so this checks
the output contract and that every op it declares legal has a kernel)."""
from legato.testing import backend_conformance

test_conformance = backend_conformance("cpu_ref")
