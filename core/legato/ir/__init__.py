"""The IR and what reads and writes it: values, types (incl. symbolic dims), calls,
functions and modules (`graph`), the text form (`text`), the verifier (`verify`), the
shared shape rules (`shapes`), symbolic dimensions (`symbols`), building calls and
modules (`calls`, `builder`) and the errors every layer raises (`errors`).

The IR's classes are re-exported here: `from legato.ir import Call, Module, TensorType`.
"""
from .graph import (CALL_OP, CUSTOM_OP, DIM_KEY, DTYPES, EMPTY_ATTRS, FUNCTION_KINDS,
                    MAX_ATTR_DEPTH, MAX_ELEMENTS, MAX_RANK, AttrList, Attrs, Call, Const,
                    Function, Module, Origin, TensorType, Value, attr_key, attrs_json,
                    freeze_attr, thaw_attr)

__all__ = [
    "CALL_OP", "CUSTOM_OP", "DIM_KEY", "DTYPES", "EMPTY_ATTRS", "FUNCTION_KINDS", "MAX_ATTR_DEPTH",
    "MAX_ELEMENTS", "MAX_RANK", "AttrList", "Attrs", "Call", "Const", "Function", "Module",
    "Origin", "TensorType", "Value", "attr_key", "attrs_json", "freeze_attr", "thaw_attr",
]
