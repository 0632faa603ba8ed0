"""TOSA 1.0 profiles: which operator and type combinations an emitted module may use.

`pro_fp` has float tensors, integer ADD/SUB/MUL and casts (other integer ops run on
float32 copies, integers.py); `pro_int` has int8 CONV2D/DEPTHWISE_CONV2D/MATMUL/AVG_POOL2D
into int32, RESCALE, TABLE and native int32 arithmetic, compares, selects, reductions and
data movement. A backend targets one of them or both ("pro_fp+pro_int"); capability.yaml's
`profile` key chooses tosa_custom's, and `legato_tosa_custom.backend(profile)` builds a
backend for any of them. A module targeting anything but pro_fp alone says so in a module
attribute, so the validator checks it against the profiles it was emitted for.
"""
from __future__ import annotations

import re

from legato.plugin_api import ConfigError, quote

PROFILES = ("pro_fp", "pro_int")
DEFAULT = frozenset({"pro_fp"})
MODULE_ATTR = "legato.tosa_profiles"
_ATTR = re.compile(re.escape(MODULE_ATTR) + r' = "(?P<names>[\w+]+)"')


def parse_profile(value, where: str = "tosa_custom profile") -> frozenset:
    """'pro_fp', 'pro_int', 'pro_fp+pro_int' (or a list of names) as a set of profiles;
    ConfigError naming the value and the profiles TOSA 1.0 has otherwise."""
    names = value.split("+") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or \
            any(not isinstance(n, str) or n.strip() not in PROFILES for n in names):
        raise ConfigError(f"{where}: {quote(value)} is not a TOSA 1.0 profile; give "
                          f"{' or '.join(PROFILES)}, or both as 'pro_fp+pro_int'")
    return frozenset(n.strip() for n in names)


def spelled(profile: frozenset) -> str:
    return "+".join(p for p in PROFILES if p in profile)


def target(profile: frozenset) -> str:
    """tosa-opt's --tosa-attach-target options for modules of `profile`."""
    return f"profiles={','.join(p for p in PROFILES if p in profile)} level=8k " \
           "specification_version=1.0"


def module_attrs(profile: frozenset) -> str:
    """The builtin.module attribute dictionary naming the profile ('' for pro_fp alone,
    whose modules look as they always have)."""
    return "" if profile == DEFAULT else f' {{{MODULE_ATTR} = "{spelled(profile)}"}}'


def profile_of(text: str) -> frozenset:
    """The profiles an emitted module was made for (pro_fp when it names none)."""
    found = _ATTR.search(text[-400:]) or _ATTR.search(text)
    return DEFAULT if found is None else parse_profile(found["names"], "module attribute")
