"""Every error legato raises derives from LegatoError; `quote` bounds what a message shows
of user data."""
import reprlib


class LegatoError(Exception):
    """Base class of every error raised by legato."""


class IRError(LegatoError):
    """Malformed IR: verifier failures, bad text form, bad builder use."""


class ParseError(IRError):
    """The text form could not be read; the message names line and column."""


class OpError(LegatoError):
    """An op definition or a call of it is invalid: unknown op, bad attribute, bad shapes."""


class ShapeError(OpError):
    """Shape or dtype inference failed for a call."""


class RegistrationError(LegatoError):
    """An op, backend or plugin could not be registered."""


class ConfigError(LegatoError):
    """A capability file or user config is malformed; the message names file and key."""


class PluginError(LegatoError):
    """A plugin failed to load or raised from a hook."""


class LegalizationError(LegatoError):
    """A call could not be legalized for a backend; the message says why each route failed."""


class ExecutionError(LegatoError):
    """Running a compiled module failed; the message names the failing call."""


class LegatoWarning(UserWarning):
    """Something legato ignores but the user likely wants to know (e.g. a config section for
    a backend that is not installed)."""


class _BoundedRepr(reprlib.Repr):
    """reprlib with small limits everywhere, including ints too long to print."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 3
        self.maxdict = 4
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 6
        self.maxstring = self.maxother = 60
        self.maxlong = 40

    def repr_int(self, x, level):
        if x.bit_length() > 128:  # repr() of a 5000-digit int raises ValueError
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_BOUNDED = _BoundedRepr()


def quote(value, limit: int = 80) -> str:
    """A repr of user data for an error message, at most `limit` characters, computed in
    bounded time however large (or deeply shared, or self-containing) the value is."""
    if _plain(value):  # most names and short lists of sizes: what repr() gives
        text = repr(value)
        if len(text) <= _BOUNDED.maxstring:
            return text if len(text) <= limit else text[:limit - 3] + "..."
    try:
        text = _BOUNDED.repr(value)
    except Exception:  # a user object whose __repr__ raises
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _plain(value) -> bool:
    """Whether the bounded repr of `value` is its repr(), when that is short: a short str,
    or a list or tuple of at most six 64-bit ints (as converters quote sizes and axes)."""
    kind = type(value)
    if kind is str:
        return len(value) <= _BOUNDED.maxstring
    return (kind is list or kind is tuple) and len(value) <= _BOUNDED.maxlist and \
        all(type(v) is int and -2 ** 63 <= v < 2 ** 63 for v in value)


def clip(text: str, limit: int = 300) -> str:
    """`text` (a message from elsewhere: an exception, a check's reason) cut to `limit`."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def size_text(n: int) -> str:
    """A byte count as people read it: 512 B, 41.2 KB, 3.4 MB."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if n >= 100 else f"{n:.1f} {unit}"
    raise AssertionError("unreachable")
