"""A third-party legato plugin: two ops of its own and an executing backend.

The test suite registers it for the whole session (the root conftest.py) to show that a plugin
with extra ops and backends installed in the same environment leaves everything else
working.
"""
