"""EWC (Kirkpatrick et al. 2017) and online EWC (Schwarz et al. 2018).

After each task the diagonal empirical Fisher F of the parameters is estimated on the task's training
data, and later tasks pay λ/2 Σ F (θ - θ*)². Rather than keeping a (F, θ*) pair per task, the quadratic
is kept in expanded form, Σ_k F_k(θ - θ*_k)² = A θ² - 2 B θ + C with A = Σ F_k, B = Σ F_k θ*_k,
C = Σ F_k θ*_k², which is exact and costs three tensors whatever the number of tasks. Online EWC decays
the old Fisher by γ and re-anchors everything at the newest θ*.

The penalty's gradient, λ(A θ - B), is added to the gradients in closed form after the backward pass rather
than differentiated through. That machinery is quadratic.py's QuadraticPenalty, shared with SI and MAS.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .base import MethodConfig
from .quadratic import QuadraticPenalty


@dataclass
class EWCConfig(MethodConfig):
    name: str = "ewc"
    ewc_lambda: float = 5000.0  # λ, strength of the penalty (FACIL's default)
    online: bool = False  # online EWC: one running Fisher, decayed by gamma, anchored at the last θ*
    gamma: float = 1.0  # decay of the old Fisher in online EWC

    def checks(self):
        return [*super().checks(), ("ewc_lambda", self.ewc_lambda >= 0, "0 or more"),
                ("gamma", 0 <= self.gamma <= 1, "a decay in [0, 1]")]


class EWC(QuadraticPenalty):
    name = "ewc"
    scenarios = frozenset({"task", "class"})
    distributed_scenarios = frozenset({"task", "class"})
    Config = EWCConfig
    key_prefix = "ewc"

    def strength(self) -> float:
        return 0.5 * self.cfg.ewc_lambda

    def fisher(self, task) -> dict[str, torch.Tensor]:
        """Diagonal empirical Fisher: squared gradients of the log-likelihood of the true labels, per batch,
        weighted by batch size (the batched estimate FACIL and Mammoth use)."""
        fisher = {n: torch.zeros_like(self.get_parameter(n)) for n in self.anchored}
        self.eval()
        for raw, y, _ in self.phase_batches(task.train.batches(self.cfg.batch_size)):
            self.zero_grad(set_to_none=True)
            with self.ctx.autocast():
                loss = F.cross_entropy(self(self.info.view.eval(raw), task.id), self.targets(y, task.id))
            loss.backward()
            for n in self.anchored:
                g = self.get_parameter(n).grad
                if g is not None:
                    fisher[n].addcmul_(g, g, value=len(y))
        self.zero_grad(set_to_none=True)
        return {n: f / len(task.train) for n, f in fisher.items()}

    def consolidate(self, task):
        with self.phase("fisher"):
            fisher = self.fisher(task)
        with torch.no_grad():
            self._accumulate(fisher)

    def _accumulate(self, fisher):
        if self.cfg.online:  # one Fisher, decayed, anchored at the current weights
            self.reanchor(fisher, decay=self.cfg.gamma)
        else:  # a (F, θ*) term per task
            self.add(fisher)
