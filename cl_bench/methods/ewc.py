"""EWC (Kirkpatrick et al. 2017) and online EWC (Schwarz et al. 2018), by default as Mammoth's ewc_on
(aimagelab/mammoth, models/ewc_on.py) computes them.

After each task a diagonal Fisher F of the parameters is estimated on the task's training data, and later tasks
pay λ Σ F (θ - θ*)² (Mammoth's penalty, models/ewc_on.py:38, without the paper's 1/2; method.penalty=half for
λ/2 Σ F (θ - θ*)², Kirkpatrick et al. eq. 3 and FACIL's src/approach/ewc.py:142-143). The Fisher (method.fisher):
- mammoth (default): per sample, the squared gradient of log p(y|x) of its true label, weighted by p(y|x), summed
  and divided by the number of batches times the batch size (models/ewc_on.py:44-57);
- batched: per batch, the squared gradient of the batch's mean cross-entropy times the batch size, divided by the
  number of samples: FACIL's compute_fisher_matrix_diag (src/approach/ewc.py:65-97) with --fi-sampling-type true
  (FACIL's default, max_pred, takes the predicted labels), cl-bench's estimate before Mammoth's.
Where Mammoth differs and is not followed: it estimates F with the network in training mode, on augmented
training images (its train_loader, batch-norm statistics of single samples); here in evaluation mode on the plain
images (no difference for networks without batch norm, on data without augmentation, such as MNIST's MLP).

Rather than keeping a (F, θ*) pair per task, the quadratic is kept in expanded form, Σ_k F_k(θ - θ*_k)² = A θ²
- 2 B θ + C with A = Σ F_k, B = Σ F_k θ*_k, C = Σ F_k θ*_k², which is exact and costs three tensors whatever the
number of tasks. Online EWC (Mammoth's ewc_on, models/ewc_on.py:59-65) decays the old Fisher by γ, adds the new
one, and re-anchors everything at the newest θ*.

The penalty's gradient is added to the gradients in closed form after the backward pass rather than
differentiated through, as Mammoth does (models/ewc_on.py:67-68, 75). That machinery is quadratic.py's
QuadraticPenalty, shared with SI and MAS.
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from ..checks import Choice
from .base import MethodConfig
from .quadratic import QuadraticPenalty


class Fisher(Choice):
    """How the diagonal Fisher is estimated after a task (see the module's docstring)."""

    mammoth = "mammoth"  # per sample, p(y|x)·(∂ log p(y|x)/∂θ)², ÷ (batches · batch size): models/ewc_on.py:44-57
    batched = "batched"  # per batch, (∂ mean CE/∂θ)² · batch size, ÷ samples: FACIL's, true labels


class Penalty(Choice):
    full = "full"  # λ Σ F (θ - θ*)²: Mammoth's ewc_on (models/ewc_on.py:38)
    half = "half"  # λ/2 Σ F (θ - θ*)²: Kirkpatrick et al. eq. 3, FACIL (src/approach/ewc.py:142-143)


@dataclass
class EWCConfig(MethodConfig):
    name: str = "ewc"
    # λ, the penalty's strength: Mammoth's tuned e_lambda for seq-cifar10 (models/config/ewc_on.yaml; 0.7 on
    # perm-/rot-mnist, 90 on seq-mnist, 25 on seq-tinyimg in its utils/best_args.py); FACIL's default is 5000 with
    # fisher=batched penalty=half
    ewc_lambda: float = 10.0
    online: bool = False  # online EWC: one running Fisher, decayed by gamma, anchored at the last θ* (ewc_on)
    gamma: float = 1.0  # decay of the old Fisher in online EWC (Mammoth's tuned gamma: 1.0 everywhere)
    fisher: Fisher = Fisher.mammoth  # see Fisher
    penalty: Penalty = Penalty.full  # see Penalty

    def checks(self):
        return [*super().checks(), ("ewc_lambda", self.ewc_lambda >= 0, "0 or more"),
                ("gamma", 0 <= self.gamma <= 1, "a decay in [0, 1]")]


class EWC(QuadraticPenalty):
    name = "ewc"
    Config = EWCConfig
    traits = replace(QuadraticPenalty.traits, backbone_use="functional")  # per-sample gradients by torch.func
    key_prefix = "ewc"

    def strength(self) -> float:
        return self.cfg.ewc_lambda * (0.5 if self.cfg.penalty == "half" else 1.0)

    def fisher(self, task) -> dict[str, torch.Tensor]:
        return self.sample_fisher(task) if self.cfg.fisher == "mammoth" else self.batched_fisher(task)

    def sample_fisher(self, task, chunk: int = 32) -> dict[str, torch.Tensor]:
        """Mammoth's ewc_on estimate (models/ewc_on.py:44-57): for every training sample alone, the squared
        gradient of log p(y|x) for its true label y, times p(y|x); summed, then divided by the number of batches
        of batch_size times batch_size (the sample count rounded up to whole batches). Per-sample gradients in
        chunks of `chunk` samples (torch.func), in evaluation mode."""
        self.eval()
        params = {n: self.get_parameter(n).detach() for n in self.anchored}
        total = {n: torch.zeros_like(p) for n, p in params.items()}

        def log_likelihood(params, x, y):
            with self.ctx.autocast():
                out = functional_call(self, params, (x.unsqueeze(0), task.id))
            log_p = -F.cross_entropy(out.float(), y.unsqueeze(0))
            return log_p, log_p.detach()

        per_sample = vmap(grad(log_likelihood, has_aux=True), in_dims=(None, 0, 0))
        with torch.compiler.set_stance("force_eager"):  # the transforms trace the plain modules
            for raw, y, t in self.loop.phase_batches(task.train.batches(chunk)):
                grads, log_p = per_sample(params, self.info.view.eval(raw, t), self.targets(y, task.id))
                p = log_p.exp()
                for n, g in grads.items():
                    total[n] += torch.einsum("b,b...->...", p, g.square())
        batches = math.ceil(len(task.train) / self.cfg.batch_size)
        return {n: f / (batches * self.cfg.batch_size) for n, f in total.items()}

    def batched_fisher(self, task) -> dict[str, torch.Tensor]:
        """FACIL's estimate (src/approach/ewc.py:65-97, --fi-sampling-type true): per batch the squared gradient
        of the mean cross-entropy of the true labels, weighted by the batch size; divided by the sample count."""
        fisher = {n: torch.zeros_like(self.get_parameter(n)) for n in self.anchored}
        self.eval()
        for raw, y, t in self.loop.phase_batches(task.train.batches(self.cfg.batch_size)):
            self.zero_grad(set_to_none=True)
            with self.ctx.autocast():
                loss = F.cross_entropy(self(self.info.view.eval(raw, t), task.id), self.targets(y, task.id))
            loss.backward()
            for n in self.anchored:
                g = self.get_parameter(n).grad
                if g is not None:
                    fisher[n].addcmul_(g, g, value=len(y))
        self.zero_grad(set_to_none=True)
        return {n: f / len(task.train) for n, f in fisher.items()}

    def consolidate(self, task):
        with self.loop.phase("fisher"):
            fisher = self.fisher(task)
        with torch.no_grad():
            self._accumulate(fisher)

    def _accumulate(self, fisher):
        if self.cfg.online:  # one Fisher, decayed, anchored at the current weights
            self.reanchor(fisher, decay=self.cfg.gamma)
        else:  # a (F, θ*) term per task
            self.add(fisher)
