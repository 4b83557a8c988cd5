"""The errors a user can act on, in a leaf module: anything may raise them without
importing the config machinery (or what it imports)."""


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and what is allowed."""
