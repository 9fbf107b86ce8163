"""The method registry: name -> Method class. Each method lives in one file of this package."""
from omegaconf import DictConfig, OmegaConf

from .. import backbones
from ..errors import UserError
from .agem import AGEM
from .base import Method, MethodConfig, Traits
from .bic import BiC
from .context import Context
from .cpg import CPG
from .der import DER, DERpp
from .er import ER
from .er_ace import ERACE
from .ewc import EWC
from .finetune import Finetune
from .gated import Gated
from .gdumb import GDumb
from .hat import HAT
from .icarl import ICaRL
from .independent import Independent
from .joint import Joint
from .lamaml import LaMAML
from .lucir import LUCIR
from .lwf import LwF
from .mas import MAS
from .nccl import NCCL
from .packnet import PackNet
from .piggyback import Piggyback
from .si import SI

METHODS: dict[str, type[Method]] = {m.name: m for m in (Finetune, Joint, Independent, EWC, SI, MAS, LwF, ER, DER,
                                                       DERpp, ERACE, ICaRL, BiC, LUCIR, GDumb, Gated, NCCL, AGEM,
                                                       LaMAML, PackNet, Piggyback, CPG, HAT)}


def get(name: str) -> type[Method]:
    if name not in METHODS:
        raise UserError(f"unknown method {name!r}: choose one of {', '.join(sorted(METHODS))}")
    return METHODS[name]


def check_scenario(name: str, scenario: str) -> None:
    traits = get(name).traits
    if scenario not in traits.scenarios:
        others = [m for m, cls in sorted(METHODS.items()) if scenario in cls.traits.scenarios]
        raise UserError(f"method={name} does not support scenario={scenario} (it supports "
                        f"{', '.join(sorted(traits.scenarios))}); methods for scenario={scenario}: "
                        f"{', '.join(others)}")


def check_distributed(name: str, scenario: str) -> None:
    if scenario not in get(name).traits.distributed_scenarios:
        able = [m for m, cls in sorted(METHODS.items()) if scenario in cls.traits.distributed_scenarios]
        raise UserError(f"method={name} does not support hardware=ddp in the {scenario} scenario yet (its "
                        f"training is not a plain epoch loop); methods that do: {', '.join(able)}")


def build(cfg, backbone, info, ctx) -> Method:
    check_scenario(cfg.name, info.scenario)
    backbones.require(backbone, get(cfg.name).needs_for(cfg), f"method={cfg.name}")
    if isinstance(cfg, DictConfig):
        # The method's own Config dataclass: hot loops read hyperparameters, and an attribute of a DictConfig
        # costs ~80 µs (a third of an MLP's training step here), one of a dataclass well under 1 µs.
        # Merged onto the schema first: a config read back from a run's config.yaml carries no types.
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(get(cfg.name).Config), cfg))
    return get(cfg.name)(cfg, backbone, info, ctx).to(ctx.device)


__all__ = ["METHODS", "Context", "Method", "MethodConfig", "Traits", "build", "check_distributed", "check_scenario",
           "get"]
