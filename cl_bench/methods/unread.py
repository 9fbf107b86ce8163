"""The shared training keys (MethodConfig's) that a method's configuration never reads: set away from the method's
default, or named on the command line, such a key would change nothing, so config.validate refuses it in one line
(as DatasetConfig.refuse_unread does for dataset keys)."""
import dataclasses

from ..errors import UserError

SGD_ONLY = ("momentum", "nesterov")  # torch's Adam and AdamW take neither


def unread(cfg) -> dict[str, str]:
    """The shared keys cfg never reads, each with what it would take to read it. A method whose own phases read
    one anyway names it in its Config's `read_anyway` (BiC's stage-2 SGD takes method.momentum)."""
    found = {}
    if cfg.optimizer != "sgd":
        found.update({key: "method.optimizer=sgd" for key in SGD_ONLY})
    # lr_gamma scales the lr at every milestone list without a gamma of its own (mask_lr_milestones has
    # mask_lr_gamma): lr_milestones, and a method's other phases' (BiC's bias_lr_milestones, PackNet's
    # retrain_lr_milestones, LUCIR's finetune_milestones)
    names = {f.name for f in dataclasses.fields(cfg)}
    lists = sorted(n for n in names if n.endswith("milestones")
                   and (n == "lr_milestones" or n.replace("milestones", "gamma") not in names))
    if not any(getattr(cfg, n) for n in lists):
        found["lr_gamma"] = f"a non-empty {' or '.join(f'method.{n}' for n in lists)}"
    return {k: v for k, v in found.items() if k not in getattr(cfg, "read_anyway", ())}


def refuse_unread(cfg, given: set[str] = frozenset()) -> None:
    """A shared key cfg never reads (unread()), set away from the method's default or named in `given` (the keys
    set on the command line), is refused: it would change nothing."""
    defaults = {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(cfg)}
    for key, needs in unread(cfg).items():
        value = getattr(cfg, key)
        if key in given or value != defaults[key]:
            shown = str(value).lower() if isinstance(value, bool) else value
            raise UserError(f"method.{key}={shown} is not read by method={cfg.name} as configured, which would "
                            f"ignore it: drop it; it is read only with {needs}")
