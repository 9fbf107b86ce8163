"""EWC (Kirkpatrick et al. 2017) and online EWC (Schwarz et al. 2018).

After each task the diagonal empirical Fisher F of the parameters is estimated on the task's training
data, and later tasks pay λ/2 Σ F (θ - θ*)². Rather than keeping a (F, θ*) pair per task, the quadratic
is kept in expanded form, Σ_k F_k(θ - θ*_k)² = A θ² - 2 B θ + C with A = Σ F_k, B = Σ F_k θ*_k,
C = Σ F_k θ*_k², which is exact and costs three tensors whatever the number of tasks. Online EWC decays
the old Fisher by γ and re-anchors everything at the newest θ*.

The penalty's gradient, λ(A θ - B), is added to the gradients in closed form after the backward pass rather
than differentiated through: two in-place passes per parameter instead of a graph of a dozen (on an MLP the
autograd version cost as much as the training itself). The penalty's value still joins the reported loss.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .base import Method, MethodConfig


@dataclass
class EWCConfig(MethodConfig):
    name: str = "ewc"
    ewc_lambda: float = 5000.0  # λ, strength of the penalty (FACIL's default)
    online: bool = False  # online EWC: one running Fisher, decayed by gamma, anchored at the last θ*
    gamma: float = 1.0  # decay of the old Fisher in online EWC

    def checks(self):
        return [*super().checks(), ("ewc_lambda", self.ewc_lambda >= 0, "0 or more"),
                ("gamma", 0 <= self.gamma <= 1, "a decay in [0, 1]")]


class EWC(Method):
    name = "ewc"
    scenarios = frozenset({"task", "class"})
    distributed_scenarios = frozenset({"task", "class"})
    Config = EWCConfig

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        self.anchored = [n for n, p in self.named_parameters() if p.requires_grad]
        for n in self.anchored:
            p = self.get_parameter(n)
            self.register_buffer(self._key("A", n), torch.zeros_like(p))
            self.register_buffer(self._key("B", n), torch.zeros_like(p))
        self.register_buffer("C", torch.zeros(()))

    @staticmethod
    def _key(kind, name):
        return f"ewc_{kind}_{name.replace('.', '_')}"

    def quadratics(self):
        for n in self.anchored:
            yield self.get_parameter(n), getattr(self, self._key("A", n)), getattr(self, self._key("B", n))

    @torch.no_grad()
    def penalty(self) -> torch.Tensor:
        """λ/2 (A θ² - 2Bθ + C) summed over the parameters: the value only (its gradient: penalty_grad)."""
        total = self.C.clone()
        for p, a, b in self.quadratics():
            total += (a * p).sub_(b, alpha=2).mul_(p).sum()
        return 0.5 * self.cfg.ewc_lambda * total

    @torch.no_grad()
    def penalty_grad(self) -> None:
        """Add λ(A θ - B), the penalty's gradient, to every anchored parameter's gradient (creating it where
        the loss did not reach the parameter, as differentiating the penalty would)."""
        lam = self.cfg.ewc_lambda
        for p, a, b in self.quadratics():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.addcmul_(a, p, value=lam).sub_(b, alpha=lam)

    def train_task(self, task):
        self.fit(task, lambda batch: self.loss(batch, task.id) + self.penalty(), after_backward=self.penalty_grad)
        self.consolidate(task)

    def fisher(self, task) -> dict[str, torch.Tensor]:
        """Diagonal empirical Fisher: squared gradients of the log-likelihood of the true labels, per batch,
        weighted by batch size (the batched estimate FACIL and Mammoth use)."""
        fisher = {n: torch.zeros_like(self.get_parameter(n)) for n in self.anchored}
        self.eval()
        for raw, y, _ in task.train.batches(self.cfg.batch_size):
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
        fisher = self.fisher(task)
        with torch.no_grad():
            self._accumulate(fisher)

    def _accumulate(self, fisher):
        decay = self.cfg.gamma if self.cfg.online else 1.0
        c = torch.zeros(())
        for (n, (p, a, b)) in zip(self.anchored, self.quadratics(), strict=True):
            if self.cfg.online:  # one Fisher, decayed, anchored at the current weights
                a.mul_(decay).add_(fisher[n])
                b.copy_(a * p)
                c = c.to(p.device) + (a * p * p).sum()
            else:
                a.add_(fisher[n])
                b.add_(fisher[n] * p)
                c = c.to(p.device) + (fisher[n] * p * p).sum()
        self.C.copy_(c if self.cfg.online else self.C + c)
