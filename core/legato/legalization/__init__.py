"""Legalization: what a backend can run and the loop that rewrites the rest.

`backend` (a registered backend and its decisions), `capability` and `config` (the
backend's YAML declaration and the user's selection, read by `yamlsource`),
`backend_checks` (what registration can tell before anything runs), `loop` (the
legalization loop: decompose what is not legal, to a fixpoint, explaining each decision),
`report` (what happened per op), `custom_ops` (the codec for ops kept as custom calls) and
`placement` (where each call runs and what it costs).
"""
