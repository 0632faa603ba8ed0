"""Running legalized modules: `interpreter` (the reference interpreter every executing
backend can fall back to), `planning` (liveness, buffer reuse, flattening called
functions into one plan), `specialize` (binding symbolic dims at run time, one plan per
binding) and `buckets` (one emitted artifact with a function per shape bucket).
"""
