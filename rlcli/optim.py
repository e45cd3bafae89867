"""Adam, as one fused kernel call per step, without ``torch.optim``.

``torch.optim.Optimizer.__init__`` imports torch's compiler stack (``torch._dynamo``), about 0.9 s of
every process that trains: a fifth of a whole CartPole run that stops at 475. This class runs the same
ATen kernel that ``torch.optim.Adam(fused=True)`` runs (``torch._fused_adam_``), so its arithmetic is the
same to the bit, and keeps torch's state-dict layout (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter
index), so checkpoints written by either load into the other. Where a torch build lacks the fused kernel
for a device, the step falls back to ``_foreach`` ops with the same formula.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import torch


class Adam:
    """Adam (Kingma & Ba 2015) over one group of parameters; ``lr`` may be changed between steps."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam needs at least one parameter")
        self.lr, self.eps, self.betas = lr, eps, betas
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.fused = _has_fused_kernel(str(self.params[0].device))
        # gradients take their parameter's device and dtype: one group, or torch's grouping clip below
        self._one_group = len({(p.device, p.dtype) for p in self.params}) == 1
        # float32 step counters on the parameters' device, as the fused kernel reads them; on one device,
        # views of one tensor, so that a step where every parameter learns counts with one op, not one each
        devices = {p.device for p in self.params}
        self._counts = (torch.zeros(len(self.params), dtype=torch.float32, device=self.params[0].device)
                        if len(devices) == 1 else None)
        self.steps = (list(self._counts.unbind()) if self._counts is not None else
                      [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params])

    def zero_grad(self) -> None:
        """Drops every gradient (set to None, as torch.optim does by default)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scales the gradients to a total 2-norm of at most ``max_norm``; returns the norm before.
        ``nn.utils.clip_grad_norm_(foreach=True)``'s ops, so its bits, without its per-call grouping of
        tensors by device and dtype (one group here): 145 -> 93 µs for Hopper PPO's 18 tensors."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.params[0].device)
        if not self._one_group:
            return torch.nn.utils.clip_grad_norm_(self.params, max_norm, foreach=True)
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        # a factor of 1 changes no bit; on a CPU reading it costs nothing, and spares a product per tensor
        if coef.device.type != "cpu" or not float(coef) >= 1.0:
            torch._foreach_mul_(grads, coef)
        return total

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params = [self.params[i] for i in live]
        grads = [self.params[i].grad for i in live]
        exp_avgs = [self.exp_avgs[i] for i in live]
        exp_avg_sqs = [self.exp_avg_sqs[i] for i in live]
        steps = [self.steps[i] for i in live]
        if self._counts is not None and len(live) == len(self.params):
            self._counts.add_(1)
        else:
            torch._foreach_add_(steps, 1)
        beta1, beta2 = self.betas
        if self.fused:
            torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=self.lr, beta1=beta1,
                               beta2=beta2, weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
            return
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2)
        for p, m, v, s in zip(params, exp_avgs, exp_avg_sqs, steps, strict=True):
            t = float(s)
            bias1, bias2 = 1.0 - beta1**t, 1.0 - beta2**t
            denom = (v.sqrt() / math.sqrt(bias2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / bias1)

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: per-parameter state under its index, and the hyperparameters."""
        state = {i: {"step": s.clone(), "exp_avg": m, "exp_avg_sq": v}  # a copy: the counters share storage
                 for i, (s, m, v) in enumerate(zip(self.steps, self.exp_avgs, self.exp_avg_sqs, strict=True))
                 if float(s) > 0}
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0.0, "amsgrad": False,
                 "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                 "fused": self.fused or None, "decoupled_weight_decay": False,
                 "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Takes this class's state dict or ``torch.optim.Adam``'s (the learning rate is not taken:
        the agent's schedule sets it)."""
        for index, state in state_dict["state"].items():
            i = int(index)
            if not 0 <= i < len(self.params):
                raise ValueError(f"optimizer state for parameter {i}; this optimizer has {len(self.params)}")
            p = self.params[i]
            for name, target in (("exp_avg", self.exp_avgs), ("exp_avg_sq", self.exp_avg_sqs)):
                value = torch.as_tensor(state[name])
                if value.shape != p.shape:
                    raise ValueError(f"optimizer state {i}.{name} has shape {tuple(value.shape)}; "
                                     f"the parameter has {tuple(p.shape)}")
                target[i].copy_(value)
            self.steps[i].fill_(float(torch.as_tensor(state["step"])))


@functools.cache
def _has_fused_kernel(device: str) -> bool:
    """Whether this torch build runs ``_fused_adam_`` on ``device`` (CPU since torch 2.4, CUDA)."""
    if not hasattr(torch, "_fused_adam_"):
        return False
    probe = [torch.zeros(1, device=device)]
    try:
        torch._fused_adam_(probe, [torch.zeros(1, device=device)], [torch.zeros(1, device=device)],
                           [torch.zeros(1, device=device)], [], [torch.ones((), device=device)], lr=0.0,
                           beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    except (RuntimeError, NotImplementedError):
        return False
    return True
