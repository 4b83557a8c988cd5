"""YAML as configs and the dataset registry are read: safely (no tag builds an object)
and with numbers as people write them (YAML 1.2's rules, not PyYAML's YAML 1.1)."""
from __future__ import annotations

import re

import yaml


class NumbersLoader(yaml.SafeLoader):
    """YAML numbers as people write them (as YAML 1.2 reads them): `1e-3` is a float
    (YAML 1.1 reads it as a string), `1:2` a string (YAML 1.1: 62, base 60, which broke
    cluster.fail_at) and `010` not an octal 8."""


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
NumbersLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _NUMBER_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
NumbersLoader.add_implicit_resolver(        # ints first: "5" is an int, not a float
    _NUMBER_TAGS[0], re.compile(r"^(?:[-+]?0b[01_]+|[-+]?0x[0-9a-fA-F_]+"
                                r"|[-+]?(?:0|[1-9][0-9_]*))$"), list("-+0123456789"))
NumbersLoader.add_implicit_resolver(
    _NUMBER_TAGS[1], re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)"
                                r"(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def read_yaml(text: str):
    """Config and registry YAML, read safely (no tags that build objects)."""
    return yaml.load(text, Loader=NumbersLoader)
