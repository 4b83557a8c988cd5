"""The errors a user can act on, in a leaf module: anything may raise them without
importing the config machinery (or what it imports)."""


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and what is allowed."""


class NoSpaceForOutput(OSError):
    """A full disk while writing a file the user named (predict, export, report --out):
    the message names the flag and the disk; no run lost anything, so nothing to resume."""
