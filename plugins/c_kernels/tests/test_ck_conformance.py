"""Every legal op and kernel of c_kernels against cpu_ref on the samples of legato.testing
(read-only inputs, result types and shapes, tolerances): the kit's conformance test."""
from legato.testing import backend_conformance

test_conformance = backend_conformance("c_kernels")
