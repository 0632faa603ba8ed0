"""The test kit for op and backend authors.

- `samples(op)`: sample calls of any op drawn from its definition (deterministic).
- `backend_conformance(name)`: a pytest test checking every legal op of a backend on the
  samples against cpu_ref; `legato check-backend NAME` prints the same checks as a table.
- `fake_entry_points(...)` / `plugin_module(...)`: make modules look like installed
  plugins (tests of plugins without installing them).
"""
from .conformance import OpResult, backend_conformance, check_backend, difference, table
from .samples import Sample, SampleError, has_samples, sample_table, samples

__all__ = ["OpResult", "Sample", "SampleError", "backend_conformance", "check_backend",
           "difference", "has_samples", "sample_table", "samples", "table"]
