"""What the CLI tells of the methods and backbones without importing torch: a catalog read from the classes
themselves (each option's Config dataclass, its fields' types and defaults; a method's Traits and summary), kept
in the user cache folder (data/cache.py's folder: ~/.cache/cl-bench, or $CL_BENCH_CACHE) under a digest of the
package's source files, so that a catalog is never read for code other than the code it was read from.

Why a catalog: every method and backbone module imports torch (their classes are nn.Modules, and their Config
dataclasses sit beside them, one file each), and importing torch takes seconds. A run needs torch anyway; a typo,
`--help`, `cl-bench list` or a shell completion's Tab does not. So the first command that imports the classes
anyway (any run, `cl-bench eval`, `cl-bench list` without a catalog) writes the catalog, and later commands answer
from it: Hydra composes over the method and backbone dataclasses rebuilt from it (dataclasses.make_dataclass, each
Choice as a Choice of the same values), which gives the same unknown keys, wrong types and unknown choices as the
classes, and so the same one-line errors. A command whose config composes still takes the full path: the classes
are registered over the rebuilt ones, and every check of every run is theirs (app.run). Without a catalog (a
fresh cache, a changed source file) a command simply takes the full path and writes one.

Why not torch-free method modules instead: a method is one file, its class an nn.Module whose traits are a class
attribute (methods/base.py Traits); reading them without torch would split each file in two, or import torch
lazily in every one. The catalog keeps the classes as they are, the one source of every default and trait, and is
read from them only.
"""
import dataclasses
import hashlib
import json
import sys
import typing
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

from .checks import Choice

PACKAGE = Path(__file__).resolve().parent
FORMAT = 2  # of the catalog file; part of its digest
BUILTINS = {t.__name__: t for t in (int, float, bool, str)}
KEPT = 8  # catalogs kept in the cache folder, the newest: one for each source tree in use (checkouts, versions)


def digest() -> str:
    """A digest of every source file of the package (and of the catalog's format): a changed file, a new
    method, another version of cl-bench, each has a catalog of its own."""
    h = hashlib.sha256(f"catalog {FORMAT}\n".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(f"{path.relative_to(PACKAGE).as_posix()}\n".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


def location() -> Path:
    from .data.cache import folder
    return folder() / f"catalog-{digest()}.json"


def load() -> dict | None:
    """The catalog of this very source tree, or None where none was written (or it cannot be read)."""
    try:
        return json.loads(location().read_text())
    except (OSError, ValueError):
        return None


def save() -> None:
    """Write the catalog of the classes (already imported by the caller), unless it exists. A cache folder that
    cannot be written is skipped: commands then take the full path, as before."""
    from .files import write_json_atomic
    path = location()
    if path.is_file():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, build())
        by_age = sorted(path.parent.glob("catalog-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in by_age[KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:  # unwritable, or another process's catalog gone meanwhile
        pass


def current() -> dict:
    """The catalog: the cached one, else read from the classes (importing torch) and cached."""
    found = load()
    if found is None:
        save()
        found = load() or build()
    return found


def build() -> dict:
    """The catalog, read from the registries' classes."""
    from . import backbones, methods
    return {
        "methods": {name: {"config": describe_config(cls.Config(name=name)), "traits": describe_traits(cls.traits),
                           "summary": first_line(sys.modules[cls.__module__])}
                    for name, cls in methods.METHODS.items()},
        "backbones": {name: {"config": describe_config(schema), "summary": first_line(module)}
                      for name, (module, schema) in backbones.BACKBONES.items()},
    }


def class_options() -> list[tuple[str, str, Any]]:
    """The method and backbone options from the classes (config.register's default): (group, name, node)."""
    from . import backbones, methods
    return ([("backbone", name, schema) for name, (_, schema) in backbones.BACKBONES.items()]
            + [("method", name, cls.Config(name=name)) for name, cls in methods.METHODS.items()])


def options(catalog: dict) -> list[tuple[str, str, Any]]:
    """The same options, as dataclasses rebuilt from a catalog: for Hydra to compose over, not to run."""
    return ([("backbone", name, rebuild(entry["config"])) for name, entry in catalog["backbones"].items()]
            + [("method", name, rebuild(entry["config"])) for name, entry in catalog["methods"].items()])


def describe_traits(traits) -> dict:
    """A method's Traits as JSON, field by field: sets as sorted lists, tuples as lists, health checks by name."""
    def plain(value):
        if isinstance(value, frozenset):
            return sorted(value)
        if isinstance(value, tuple):
            return [getattr(v, "name", v) for v in value]
        return value
    return {f.name: plain(getattr(traits, f.name)) for f in dataclasses.fields(traits)}


def first_line(obj) -> str:
    """The first line of obj's docstring; "" where it has none (a user's backbone may not)."""
    lines = (obj.__doc__ or "").strip().splitlines()
    return lines[0] if lines else ""


def describe_config(node) -> dict:
    """A Config dataclass (or an instance of one) as JSON: its name, and each field's type and default (the
    instance's value, for an instance)."""
    cls = node if isinstance(node, type) else type(node)
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if not isinstance(node, type):
            value = getattr(node, f.name)
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = f.default
        if value is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} has no default: the config's nodes hold one for every field")
        fields.append({"name": f.name, "type": encode_type(hints[f.name]), "default": value,
                       "factory": f.default_factory is not dataclasses.MISSING})
    return {"class": cls.__name__, "fields": fields}


def rebuild(description: dict) -> type:
    """The dataclass describe_config described: the same name, fields, types and defaults."""
    fields = []
    for f in description["fields"]:
        kind = decode_type(f["type"])
        value = decode_value(kind, f["default"])
        default = (dataclasses.field(default_factory=lambda v=value: json.loads(json.dumps(v))) if f["factory"]
                   else dataclasses.field(default=value))
        fields.append((f["name"], kind, default))
    return dataclasses.make_dataclass(description["class"], fields)


def encode_type(kind) -> Any:
    """A field's type as JSON: a builtin's name, Any, an optional, a list or dict, or a Choice with its members."""
    if kind is Any:
        return "Any"
    if isinstance(kind, type) and issubclass(kind, Choice):
        return {"choice": kind.__name__, "members": {m.name: m.value for m in kind}}
    if isinstance(kind, type) and kind.__name__ in BUILTINS and BUILTINS[kind.__name__] is kind:
        return kind.__name__
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (UnionType, typing.Union) and len(args) == 2 and NoneType in args:
        return {"optional": encode_type(next(a for a in args if a is not NoneType))}
    if origin is list:
        return {"list": encode_type(args[0])}
    if origin is dict:
        return {"dict": [encode_type(args[0]), encode_type(args[1])]}
    raise TypeError(f"catalog.py cannot describe a config field of type {kind!r}: teach encode_type and "
                    "decode_type that type")


def decode_type(encoded) -> Any:
    if encoded == "Any":
        return Any
    if isinstance(encoded, str):
        return BUILTINS[encoded]
    if "choice" in encoded:
        return Choice(encoded["choice"], encoded["members"])
    if "optional" in encoded:
        return decode_type(encoded["optional"]) | None
    if "list" in encoded:
        return list[decode_type(encoded["list"])]
    return dict[decode_type(encoded["dict"][0]), decode_type(encoded["dict"][1])]


def decode_value(kind, value):
    """A default read back from JSON: a Choice's value as its member (a Choice is saved as its value)."""
    base = next((a for a in typing.get_args(kind) if a is not NoneType), kind) if typing.get_origin(kind) in (
        UnionType, typing.Union) else kind
    if isinstance(base, type) and issubclass(base, Choice) and value is not None and value in {m.value for m in base}:
        return base(value)
    if typing.get_origin(base) is list and isinstance(value, list):
        return [decode_value(typing.get_args(base)[0], v) for v in value]
    return value
