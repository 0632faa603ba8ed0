"""Module-to-module passes, each returning `(module, modified)`.

`manager` (ModulePass, FunctionPass, PassManager), `recompose` with `matching` and
`patterns` (composites found again from their decompositions), `qdq_fold` (quantize /
dequantize pairs folded into qnn ops), `layout` (data layout conversion), `fuse`
(elementwise chains into primitive functions), `partition` with `regions` (what each
backend claims), `constfold` (constant folding before emission).
"""
