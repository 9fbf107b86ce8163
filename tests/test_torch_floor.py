"""pyproject.toml's torch floor is the release that introduced the newest torch API cl_bench calls, as listed beside
it in [tool.cl-bench.torch-apis]; the installed torch has every listed API, and torchvision's floor pairs with
torch's."""
import importlib
import inspect
import re

import pytest
import torch
from conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
APIS: dict[str, str] = PYPROJECT["tool"]["cl-bench"]["torch-apis"]


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.match(r"\d+(\.\d+)*", text).group(0).split("."))


def floor(package: str) -> tuple[int, ...]:
    """The lower bound of package in [project] dependencies."""
    found = [re.fullmatch(rf"{package}>=([\d.]+)(,.*)?", d) for d in PYPROJECT["project"]["dependencies"]]
    return version(next(f for f in found if f).group(1))


def resolve(dotted: str):
    """torch.a.b.C.d: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def test_the_torch_floor_is_the_newest_api_the_code_calls():
    assert floor("torch") == max(version(v) for v in APIS.values())


def test_torchvisions_floor_pairs_with_torchs():
    """torchvision 0.N is built for torch 2.(N - 15): 0.28 for 2.13."""
    major, minor = floor("torch")[:2]
    assert major == 2 and floor("torchvision")[:2] == (0, minor + 15)


@pytest.mark.parametrize("api", sorted(APIS))
def test_the_installed_torch_has_each_listed_api(api):
    call = re.fullmatch(r"([\w.]+)(?:\((\w+)\))?", api)
    obj = resolve(call.group(1))
    if call.group(2):
        assert call.group(2) in inspect.signature(obj).parameters, f"{api}: not a keyword in {torch.__version__}"


@pytest.mark.parametrize("api", sorted(APIS))
def test_each_listed_api_is_one_the_package_calls(api):
    """The list holds what cl_bench uses, nothing kept for its own sake: the API's last name (or keyword) appears in
    the package's sources."""
    name = re.findall(r"\w+", api)[-1]
    sources = "\n".join(p.read_text() for p in (ROOT / "cl_bench").rglob("*.py"))
    assert re.search(rf"\b{name}\b", sources), f"{api} is listed but cl_bench does not call {name}"


def test_the_installed_torch_is_within_the_floor():
    assert version(torch.__version__) >= floor("torch")
