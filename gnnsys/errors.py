"""The errors a user can act on, in a leaf module: anything may raise them without
importing the config machinery (or what it imports). The command line catches these by
class (gnnsys/cli.py). The array-only packages raise their own (partition.format's
PartitionError), as they never import gnnsys."""


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and what is allowed."""
    label = "config error"       # how the command line introduces the message


class OverrideError(ConfigError):
    """A `--set KEY=VALUE` that cannot apply (malformed, or a key or value the config
    refuses): the message names the override, not the YAML file."""
    label = "override error"


class RunError(ConfigError):
    """A run directory that cannot serve a finished run's model: no run there, a run not
    finished or still training, no selected model, a checkpoint of another run, data
    changed since it trained."""
    label = "run error"


class PredictError(ConfigError):
    """A request a finished run cannot answer as asked: unknown node ids, a split, layer,
    query time, worker count or output file it does not take."""
    label = "predict error"


class DatasetMismatch(ConfigError):
    """Data that is not what the run's checkpoint was made from: its files changed since
    (by content), or a graph the model does not fit (feature width, class count)."""
    label = "dataset error"


class DatasetError(ValueError):
    """Unknown dataset name, missing files or a bad split/params; the message says the fix.
    Every dataset loader raises it for a dataset that cannot be loaded."""


class WorkerFailure(RuntimeError):
    """A worker died or raised; the message names the rank and the cause."""


class NetClusterError(RuntimeError):
    """An emulated cluster's set-up is impossible or failed; the message is one line
    saying why and what to do."""


class NoSpaceForOutput(OSError):
    """A full disk while writing a file the user named (predict, export, report --out):
    the message names the flag and the disk; no run lost anything, so nothing to resume."""
