"""The two building blocks of every config dataclass: Choice for values from a fixed set, and Checked for the
range checks that sit beside the fields. A dataclass is a config's schema and its defaults at once."""
from enum import Enum
from typing import ClassVar

from .errors import UserError


class Choice(str, Enum):
    """A value from a fixed set. OmegaConf accepts the names and lists them when given anything else; the
    member compares, hashes, prints and serialises as its value, so code and metrics.json see plain strings."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Checked:
    """Range checks beside the fields: a config lists them in checks() as (field, holds, what is accepted), and
    __post_init__ runs them whenever the dataclass is built (OmegaConf.to_object in config.validate, or code).
    prefix is where the config sits in the composed tree (`method.`), for the message."""

    prefix: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for key, holds, accepted in self.checks():
            if not holds:
                value = getattr(self, key)
                shown = value.value if isinstance(value, Choice) else repr(value)
                raise UserError(f"{self.prefix}{key}={shown} is out of range: use {accepted}")

    def checks(self) -> list[tuple[str, bool, str]]:
        return []


def require_extra(module: str, extra: str, feature: str, otherwise: str = "") -> None:
    """A feature of one of cl-bench's optional extras: a missing package is one line naming the extra."""
    import importlib.util
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        found = False
    if not found:
        raise UserError(f"{feature}: install the {extra} extra (pip install 'cl-bench[{extra}]'){otherwise}")
