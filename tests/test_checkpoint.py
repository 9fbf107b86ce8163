"""Checkpoints: tensors through safetensors, masks as bits, checksums, and fallback past damaged ones."""
import pickle

import pytest
import torch
from torch import nn

from cl_bench import checkpoint
from cl_bench.errors import UserError


class Masked(nn.Module):
    name = "masked"

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 5))
        self.register_buffer("picking", torch.rand(3, 5) > 0.5)
        self.register_buffer("owner", torch.randint(0, 4, (3, 5), dtype=torch.uint8))

    def mask_keys(self):
        return {"picking", "owner"}


RNG = {"torch": torch.get_rng_state(), "data": torch.Generator().manual_seed(3).get_state()}


def test_roundtrip_keeps_every_tensor_and_packs_bool_masks_to_bits(tmp_path):
    m = Masked()
    path = checkpoint.save(tmp_path, 0, m, {"acc": [[0.5]]}, RNG, 1.0)
    assert (path / "masks.safetensors").stat().st_size < (path / "state.safetensors").stat().st_size
    state, masks, meta, problems = checkpoint.load(tmp_path)
    state, rng = checkpoint.split_rng(state)
    assert problems == [] and meta["acc"] == [[0.5]] and set(masks) == {"picking", "owner"}
    assert masks["picking"].dtype == torch.bool and torch.equal(masks["picking"], m.picking)
    assert torch.equal(masks["owner"], m.owner) and torch.equal(state["weight"], m.weight.detach())
    assert torch.equal(rng["data"], RNG["data"])
    fresh = Masked()
    fresh.load_state_dict({**state, **masks})
    assert torch.equal(fresh.weight, m.weight)


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


DAMAGE = {  # file of task_001 -> what happens to it
    "truncated state (a full disk)": ("state.safetensors", lambda b: b[:-7]),
    "altered state (one byte)": ("state.safetensors", _flip_last_byte),
    "altered masks (one byte)": ("masks.safetensors", _flip_last_byte),
    "empty meta": ("meta.json", lambda b: b""),
    "meta not JSON": ("meta.json", lambda b: b"{not json"),
    "meta without checksums": ("meta.json", lambda b: b'{"task_id": 1}'),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_last_names_the_newest_and_a_damaged_one_falls_back(tmp_path, damage):
    m = Masked()
    checkpoint.save(tmp_path, 0, m, {"acc": [[0.5]]}, RNG, 1.0)
    with torch.no_grad():
        m.weight.add_(1)
    checkpoint.save(tmp_path, 1, m, {"acc": [[0.5], [0.4, 0.6]]}, RNG, 2.0)
    assert (tmp_path / "checkpoints" / "last").read_text() == "task_001"
    name, change = DAMAGE[damage]
    target = tmp_path / "checkpoints" / "task_001" / name
    target.write_bytes(change(target.read_bytes()))
    state, _, meta, problems = checkpoint.load(tmp_path)
    assert meta["task_id"] == 0 and len(problems) == 1
    assert str(target.parent) in problems[0], problems  # the damaged checkpoint is named by its path
    assert not torch.equal(state["weight"], m.weight.detach())


class Boom:
    def __reduce__(self):
        return (exec, ("open(__import__('os').environ['BOOM_MARKER'], 'w').write('ran')",))


def test_a_planted_pickle_is_never_unpickled(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("BOOM_MARKER", str(marker))
    checkpoint.save(tmp_path, 0, Masked(), {"acc": [[0.5]]}, RNG, 1.0)
    planted = pickle.dumps(Boom())
    (tmp_path / "checkpoints" / "task_000" / "state.safetensors").write_bytes(planted)
    assert checkpoint.load(tmp_path)[0] is None  # no valid checkpoint remains
    assert not marker.exists()


def test_optimizer_state_within_a_task_round_trips_with_its_scalars(tmp_path):
    """A within-task checkpoint keeps the optimiser's tensors in state.safetensors and its plain numbers (as
    optimisers such as LBFGS keep counts) in meta.json; empty slots (None) are dropped."""
    m = Masked()
    buffer = torch.randn(3, 5)
    optimizer = {"state": {0: {"momentum_buffer": buffer, "n_iter": 7, "lr_scale": 0.5, "prev": None}},
                 "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": [0]}]}
    within = {"phase": "train", "epoch": 2, "optimizer": optimizer}
    checkpoint.save(tmp_path, 0, m, {"acc": []}, RNG, 1.0, within=within)
    state, _, meta, problems = checkpoint.load(tmp_path, within=True)
    assert problems == [] and meta["within"]["epoch"] == 2
    back = checkpoint.optimizer_state(meta["within"]["optimizer"], state)
    assert back["param_groups"] == optimizer["param_groups"] and set(back["state"]) == {0}
    slots = back["state"][0]
    assert set(slots) == {"momentum_buffer", "n_iter", "lr_scale"} and torch.equal(slots["momentum_buffer"], buffer)
    assert (slots["n_iter"], slots["lr_scale"]) == (7, 0.5)
    assert not any(k.startswith("_optim.") for k in state)  # taken out: what is left is the method's and the RNG's


def test_absent_says_why_in_a_line(tmp_path):
    assert checkpoint.absent(tmp_path, None, 1) == (f"{tmp_path} holds no checkpoints: it stopped before its first, "
                                                    "or ran with checkpoint.enabled=false")
    checkpoint.save(tmp_path, 0, Masked(), {"acc": []}, RNG, 1.0,
                    within={"phase": "train", "epoch": 1, "optimizer": {"state": {}, "param_groups": []}})
    root = tmp_path / "checkpoints"
    assert checkpoint.absent(tmp_path, None, 1) == (f"{root} holds no complete task's checkpoint: the run stopped "
                                                    "within its first task")
    assert checkpoint.absent(tmp_path, "best", 1) == (f"no checkpoint named 'best': names are task_<ttt> (e.g. "
                                                      f"task_000); {root} holds task_000_within")


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_side_state_missing_or_damaged_is_one_line(tmp_path, damage):
    side = checkpoint.SideStore(tmp_path)
    side.put(2, "goal", torch.arange(6.0))
    assert torch.equal(side.get(2, "goal"), torch.arange(6.0))
    path = tmp_path / "side" / "task_002" / "goal.safetensors"
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(UserError, match=r"goal\.safetensors is missing or unreadable \((FileNotFoundError|"
                                        r"SafetensorError)\): the run's side state for task 2; restart the run"):
        side.get(2, "goal")
