"""Fuzz targets and the harness that runs them.

A target is a module `tests/fuzz/target_<name>.py` that defines

    QUICK_CASES = 100        # how many seeds `make test` runs (tests/fuzz/test_quick.py)
    CASE_TIMEOUT = 20.0      # optional: seconds after which a case counts as a hang

    def run(seed: int) -> str:
        '''One case, fully determined by `seed`. Returns "ok" (a result, checked),
        "refused" (legato raised a LegatoError: the right answer to bad input) or
        "skipped" (the generated case was not meaningful).'''

Problems are raised, not returned: `Mismatch` for a wrong number, `InvalidOutput` for an
artifact that its consumer rejects (tosa-opt refusing emitted MLIR, text that does not
parse back). Any other exception that is not a `legato.LegatoError` is a raw exception.
The harness (`python -m tests.fuzz`, `make fuzz`) runs cases in worker processes, so a
worker that dies is recorded as a crash with its seed, and a case over its time bound as
a hang. Workers run under an address-space limit (4 GiB by default): a MemoryError, or a
worker killed for memory, is a memory finding. `python -m tests.fuzz --help` lists the
options; `--target T --seed S` reproduces one case and shows its traceback.

A target may also define `OPEN_BUGS = True`: generators then draw the cases of bugs
reported to their owner and not fixed yet, which the quick test turns off (it sets the
flag to False) so that `make test` stays green while `make fuzz` keeps finding them.
"""


class Mismatch(AssertionError):
    """A result that differs from the reference."""


class InvalidOutput(AssertionError):
    """An artifact its consumer rejects (invalid TOSA, text that does not round-trip)."""
