"""What EWC, SI and MAS share: a quadratic penalty s Σ_i Ω_i (θ_i - θ*_i)² on every trainable parameter, kept in
expanded form whatever the number of tasks, with its gradient added in closed form after the backward pass.

The three differ only in the importance Ω they estimate and in how a new task's importance joins the old:

- add(Ω, θ*): one more term, Σ_k Ω_k (θ - θ*_k)² (EWC: a Fisher and an anchor per task);
- reanchor(Ω, decay): one term, (decay·Ω_old + Ω)(θ - θ*)², anchored at the current weights (online EWC, SI,
  MAS: the running importance pulls towards the weights at the end of the last task only).

Either way the penalty is A θ² - 2 B θ + C per parameter, with A = Σ Ω_k, B = Σ Ω_k θ*_k, C = Σ Ω_k θ*_k² (one
term when re-anchored): exact, and three tensors per parameter for any number of tasks. Its gradient, 2s(A θ - B),
is added to the gradients after backward rather than differentiated through: two in-place passes per parameter
instead of a graph of a dozen (on an MLP the autograd version cost as much as the training itself); its value
still joins the reported loss (near the anchor that value, about 0, is a difference of large sums and shows their
float32 rounding, slightly negative at times).

Step size: per weight the penalty is a quadratic of curvature 2sA, and SGD on it is stable only while
lr·2s·max A < 2(1 + momentum); past that the weights oscillate away from the anchor and the loss becomes NaN,
which stops the run naming the step. Importances summed over tasks (SI, MAS) grow towards that bound.
"""
import abc

import torch

from .base import Method, Traits


class QuadraticPenalty(Method):
    """A Method trained as the loss of the current task plus penalty(). Subclasses set key_prefix (the state-dict
    names of their A and B buffers), implement strength() (s) and consolidate(task) (after each task's training:
    estimate the importance, then add() or reanchor())."""

    key_prefix = "quad"
    # graph_safe: the penalty and its gradient read the anchors (A, B, C) and SI's scratch buffers, all updated in
    # place.
    traits = Traits(scenarios=frozenset({"task", "class"}), distributed_scenarios=frozenset({"task", "class"}),
                    graph_safe=True)

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        self.anchored = [n for n, p in self.named_parameters() if p.requires_grad]
        for n in self.anchored:
            p = self.get_parameter(n)
            self.register_buffer(self._key("A", n), torch.zeros_like(p))
            self.register_buffer(self._key("B", n), torch.zeros_like(p))
        self.register_buffer("C", torch.zeros(()))

    @classmethod
    def _key(cls, kind, name):
        return f"{cls.key_prefix}_{kind}_{name.replace('.', '_')}"

    @abc.abstractmethod
    def strength(self) -> float:
        """s: the penalty is s Σ Ω (θ - θ*)² (EWC: λ/2, SI: c, MAS: λ)."""

    @abc.abstractmethod
    def consolidate(self, task) -> None:
        """After a task's training: fold its importance into the penalty (add or reanchor)."""

    def anchored_params(self) -> list[torch.Tensor]:
        return [self.get_parameter(n) for n in self.anchored]

    def quadratics(self):
        for n in self.anchored:
            yield self.get_parameter(n), getattr(self, self._key("A", n)), getattr(self, self._key("B", n))

    @torch.no_grad()
    def penalty(self) -> torch.Tensor:
        """s (A θ² - 2Bθ + C) summed over the parameters: the value only (its gradient: penalty_grad)."""
        total = self.C.clone()
        for p, a, b in self.quadratics():
            total += (a * p).sub_(b, alpha=2).mul_(p).sum()
        return self.strength() * total

    @torch.no_grad()
    def ensure_grads(self) -> None:
        """A zero gradient for every anchored parameter the loss did not reach, as differentiating the penalty
        would create."""
        for n in self.anchored:
            p = self.get_parameter(n)
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    @torch.no_grad()
    def penalty_grad(self) -> None:
        """Add 2s(A θ - B), the penalty's gradient, to every anchored parameter's gradient."""
        self.ensure_grads()
        k = 2 * self.strength()
        for p, a, b in self.quadratics():
            p.grad.addcmul_(a, p, value=k).sub_(b, alpha=k)

    def train_task(self, task):
        self.loop.fit(task, lambda batch: self.loss(batch, task.id) + self.penalty(),
                      after_backward=self.penalty_grad)
        self.consolidate(task)

    @torch.no_grad()
    def add(self, importance: dict[str, torch.Tensor]) -> None:
        """One more term Ω (θ - θ*)², anchored at the current weights: A += Ω, B += Ω θ, C += Σ Ω θ²."""
        c = torch.zeros(())
        for n, (p, a, b) in zip(self.anchored, self.quadratics(), strict=True):
            a.add_(importance[n])
            b.add_(importance[n] * p)
            c = c.to(p.device) + (importance[n] * p * p).sum()
        self.C.copy_(self.C + c)

    @torch.no_grad()
    def reanchor(self, importance: dict[str, torch.Tensor], decay: float = 1.0, floor: float | None = None) -> None:
        """One term for everything so far, anchored at the current weights: A = decay·A + Ω (clamped to at least
        floor, when given), B = A θ, C = Σ A θ²."""
        c = torch.zeros(())
        for n, (p, a, b) in zip(self.anchored, self.quadratics(), strict=True):
            a.mul_(decay).add_(importance[n])
            if floor is not None:
                a.clamp_(min=floor)
            b.copy_(a * p)
            c = c.to(p.device) + (a * p * p).sum()
        self.C.copy_(c)

    def total_importance(self) -> dict[str, torch.Tensor]:
        """A per anchored parameter: the running importance (the sum of the added terms' Ω when not re-anchored)."""
        return {n: getattr(self, self._key("A", n)) for n in self.anchored}
