"""A run's settings identity: the composed config less what cannot change what is learned (where files live, the
logger, hardware placement, threads, checkpointing). Two runs with equal settings trained the same thing; a sweep
finds its jobs by it (app.py), a resume refuses to change it, and the report groups runs by it (report.py).

Torch-free: the command line reaches it before any method is imported."""
import hashlib
import json

# Keys (dotted, or a prefix of dotted keys) that never change the numbers a run learns. Everything else, seed
# included, is part of the identity; the report groups by it all but the seed.
NON_LEARNING = (
    "logger",  # console, W&B
    "hardware.device", "hardware.threads", "hardware.distributed", "hardware.channels_last", "hardware.compile",
    "hardware.cuda_graphs",  # placement and launch mechanics (graphs are proven bit-equal to eager)
    "data.root", "data.download", "data.cache", "data.residency", "data.workers",  # where the images come from
    "data.eval_batch_size",  # evaluation batching
    "checkpoint",  # what is written to disk
    "resume", "profile_task",
    "sweep",  # what a job hands its sweeper
)
SEED = "seed"


def is_learning(key: str) -> bool:
    return not any(key == k or key.startswith(k + ".") for k in NON_LEARNING)


def flatten(node, prefix: str = "") -> dict:
    """A nested container as {dotted.key: value}; lists stay values."""
    flat = {}
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def settings(cfg) -> dict:
    """The learning settings of a composed config (an OmegaConf node, Hydra's own node aside, or a plain dict),
    flat and resolved, values as JSON has them."""
    from omegaconf import OmegaConf
    if OmegaConf.is_config(cfg):
        node = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    else:
        node = dict(cfg)
    node.pop("hydra", None)
    flat = flatten(node)
    return json.loads(json.dumps({k: v for k, v in sorted(flat.items()) if is_learning(k)}, default=str))


def identity(learning: dict) -> str:
    """A short stable digest of settings()."""
    text = json.dumps(learning, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def differing(a: dict, b: dict) -> list[str]:
    """The keys whose values differ between two settings (a key in one only counts)."""
    return sorted(k for k in set(a) | set(b) if a.get(k, MissingKey) != b.get(k, MissingKey))


class MissingKey:
    """A key absent from one side's settings."""


def changes(before: dict, after: dict, limit: int = 4) -> str:
    """`method.lr 0.01 -> 0.5, seed 0 -> 1` for the differing keys, the first `limit` of them."""
    def shown(settings_, key):
        return json.dumps(settings_[key]) if key in settings_ else "(unset)"
    keys = differing(before, after)
    text = ", ".join(f"{k} {shown(before, k)} -> {shown(after, k)}" for k in keys[:limit])
    return text + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
