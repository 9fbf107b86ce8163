"""The answers that need no torch (cl_bench/catalog.py): `cl-bench --help`, `train --help`, a config error, `list` and
shell completion leave torch unimported where the catalog is cached, and answer exactly as the full path does;
a config that composes still takes the full path. Each command runs in a fresh interpreter, which says whether
torch was imported."""
import dataclasses
import json
import os
import subprocess
import sys
import typing

import pytest
from omegaconf import OmegaConf

from cl_bench import catalog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_CACHE = "/dev/null/no-cache"  # neither readable nor writable: the full path, as without a catalog
# The command line as the console script runs it, then whether torch was imported, as its last line of stderr.
WRAPPER = """import sys
from cl_bench import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
sys.stdout.flush()
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
sys.exit(code)
"""
COMMANDS = {  # label: arguments, COMP_LINE
    "help": (["--help"], None),
    "train help": (["train", "--help"], None),
    "unknown key": (["train", "method.lr_msk=1e-3"], None),
    "unknown key of a chosen method": (["train", "method=er", "method.lr_msk=1e-3"], None),
    "wrong type": (["train", "method.lr=fast"], None),
    "wrong choice value": (["train", "scenario=domain"], None),
    "wrong method field type": (["train", "method=er", "method.memory_size=many"], None),
    "unknown method": (["train", "method=ewcc"], None),
    "unknown dataset": (["train", "dataset=nope"], None),
    "list": (["list"], None),
    "completion of a key": (["-sc", "query=bash"], "cl-bench train method.l"),
    "completion install": (["-sc", "install=bash"], None),
}


def run(args: list[str], cache: str, comp_line: str | None = None) -> tuple[int, str, str, bool]:
    """(exit status, stdout, stderr less the last line, whether torch was imported)."""
    env = {**os.environ, "CL_BENCH_CACHE": cache, "COLUMNS": "120", "HYDRA_FULL_ERROR": "0", "PYTHONPATH": ROOT}
    env.pop("COMP_LINE", None)
    if comp_line is not None:
        env["COMP_LINE"] = comp_line
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    *err, said = proc.stderr.rstrip("\n").split("\n")
    assert said.startswith("torch imported: "), proc.stderr
    return proc.returncode, proc.stdout, "\n".join(err), said == "torch imported: True"


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> str:
    """A cache folder holding this source tree's catalog, written by a command that took the full path."""
    folder = str(tmp_path_factory.mktemp("catalog-cache"))
    code, _, _, torch_imported = run(["train", "method=ewcc"], folder)
    assert code == 2 and torch_imported
    assert catalog.location().name in os.listdir(folder)
    return folder


@pytest.mark.parametrize("label", list(COMMANDS))
def test_answered_without_torch_as_the_full_path_answers(cached, label):
    args, comp_line = COMMANDS[label]
    fast = run(args, cached, comp_line)
    full = run(args, NO_CACHE, comp_line)
    assert not fast[3], f"{label}: torch was imported"
    assert fast[:3] == full[:3]
    assert "Traceback" not in fast[2]
    if fast[0] == 2:  # a config error: one line
        assert len(fast[2].splitlines()) == 1 and fast[2].startswith("cl-bench: error: ")


def test_a_config_that_composes_takes_the_full_path(cached):
    """Range checks are the classes': a config that composes is checked by them."""
    code, _, err, torch_imported = run(["train", "method=er", "method.memory_size=0"], cached)
    assert code == 2 and torch_imported and "method.memory_size=0 is out of range" in err


def test_a_sweep_takes_the_full_path(cached):
    code, _, err, torch_imported = run(["train", "method.lr_msk=1,2"], cached)
    assert torch_imported and code == 2 and err == run(["train", "method.lr_msk=1,2"], NO_CACHE)[2]


def test_the_catalog_rebuilds_every_option_as_the_classes_define_it():
    """Each method's and backbone's dataclass, rebuilt from the catalog's JSON, composes to the same node: the same
    keys in the same order, values, and types (a Choice's members, optional, lists)."""
    import json
    rebuilt = catalog.options(json.loads(json.dumps(catalog.build())))
    original = catalog.class_options()
    assert [(g, n) for g, n, _ in rebuilt] == [(g, n) for g, n, _ in original]
    for (_, name, a), (_, _, b) in zip(original, rebuilt):
        real, copy = OmegaConf.structured(a), OmegaConf.structured(b)
        assert OmegaConf.to_yaml(real) == OmegaConf.to_yaml(copy), name
        hints = typing.get_type_hints(a if isinstance(a, type) else type(a))
        assert {f.name: catalog.encode_type(hints[f.name]) for f in dataclasses.fields(a)} == {
            f.name: catalog.encode_type(f.type) for f in dataclasses.fields(b)}, name


def test_the_catalog_is_keyed_by_every_source_file(tmp_path, monkeypatch):
    (tmp_path / "methods").mkdir()
    (tmp_path / "methods" / "ewc.py").write_text("x = 1\n")
    (tmp_path / "config.py").write_text("y = 2\n")
    monkeypatch.setattr(catalog, "PACKAGE", tmp_path)
    first = catalog.digest()
    (tmp_path / "methods" / "ewc.py").write_text("x = 2\n")
    second = catalog.digest()
    (tmp_path / "methods" / "new.py").write_text("")
    assert len({first, second, catalog.digest()}) == 3
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))
    assert catalog.load() is None  # no catalog of this tree: the full path


def test_the_cache_keeps_the_newest_catalogs(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))
    for age in range(1, catalog.KEPT + 3):
        old = tmp_path / f"catalog-old{age}.json"
        old.write_text("{}")
        os.utime(old, (old.stat().st_atime - age * 3600,) * 2)
    catalog.save()
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == catalog.KEPT and catalog.location().name in kept and "catalog-old1.json" in kept
    assert catalog.load()["methods"]["ewc"]["traits"]["scenarios"] == ["class", "task"]


def test_the_catalog_holds_every_trait_of_every_method():
    """`cl-bench list` reads a method's Traits from the catalog: every field, as JSON, read back equal."""
    from cl_bench import methods
    from cl_bench.methods.base import Traits
    cached = json.loads(json.dumps(catalog.build()))["methods"]
    fields = [f.name for f in dataclasses.fields(Traits)]
    for name, cls in methods.METHODS.items():
        traits = cached[name]["traits"]
        assert list(traits) == fields, name
        assert set(traits["scenarios"]) == cls.traits.scenarios and traits["graph_safe"] == cls.traits.graph_safe
        assert traits["health_checks"] == [c.name for c in cls.traits.health_checks], name


def test_a_config_of_every_type_the_catalog_knows_is_rebuilt_as_declared():
    """Types no built-in option uses yet (Any, a dict), beside those they do: a user's backbone may declare them."""
    @dataclasses.dataclass
    class Mine:
        extra: typing.Any = None
        widths: dict[str, int] = dataclasses.field(default_factory=lambda: {"stem": 8})
        depths: list[int] = dataclasses.field(default_factory=lambda: [2, 2])
        scale: float | None = 0.5

    rebuilt = catalog.rebuild(json.loads(json.dumps(catalog.describe_config(Mine))))
    assert {f.name: f.type for f in dataclasses.fields(rebuilt)} == {
        "extra": typing.Any, "widths": dict[str, int], "depths": list[int], "scale": float | None}
    assert dataclasses.asdict(rebuilt()) == dataclasses.asdict(Mine())
    assert rebuilt().widths is not rebuilt().widths  # a factory still: no default shared between instances


def test_a_config_the_catalog_cannot_describe_says_what_to_change():
    @dataclasses.dataclass
    class Pair:
        size: tuple[int, int] = (3, 3)

    @dataclasses.dataclass
    class Bare:
        width: int

    with pytest.raises(TypeError, match=r"cannot describe a config field of type tuple\[int, int\]: teach "
                                        r"encode_type and decode_type"):
        catalog.describe_config(Pair)
    with pytest.raises(TypeError, match="Bare.width has no default: the config's nodes hold one for every field"):
        catalog.describe_config(Bare)


def test_only_plain_overrides_take_the_fast_path():
    """Overrides alone are composed over the catalog; a sweep, resume=, a flag or what Hydra cannot parse goes to
    hydra.main, which answers it in its own words."""
    from cl_bench import app
    assert app.plain_overrides(["method=er", "method.lr=0.1", "dataset.class_order=[2,1,0]"])
    for args in (["seed=1,2"], ["resume=outputs/run"], ["--cfg", "job"], ["method.lr=[1,"]):
        assert not app.plain_overrides(args), args
