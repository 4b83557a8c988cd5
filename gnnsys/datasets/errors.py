"""The one exception every dataset loader raises for a dataset that cannot be loaded."""


class DatasetError(ValueError):
    """Unknown dataset name, missing files or a bad split/params; the message says the fix."""
