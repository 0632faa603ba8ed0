"""Every error legato raises derives from LegatoError."""


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
