"""The modules: :class:`Linear` (``nn.Linear`` on the library's kernels) and
:func:`replace_linear` (which swaps a model's ``nn.Linear`` layers for it, or for a
:class:`QuantLinear`)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from ._api import linear
from ._checks import _act_name
from ._quantized import FORMATS, QuantLinear


class Linear(nn.Linear):
    """``nn.Linear`` on pycutlass_rt's kernels, with an optional fused activation.

    The same parameters (``weight`` (out_features, in_features), ``bias``), initialization
    and state_dict as ``nn.Linear``, so checkpoints load either way; ``forward`` is
    :func:`linear` (``act(x @ weight.T + bias)`` in one kernel).

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: None or one of ``ACTIVATIONS`` ("relu", "gelu", "gelu_tanh", "silu",
            "sigmoid", "tanh", "hardswish", "leaky_relu" (slope 0.01)), applied after the bias.

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> lin = pt.Linear(1024, 4096, activation="silu")
        >>> lin
        Linear(in_features=1024, out_features=4096, bias=True, activation='silu')

    Example (on a GPU):
        >>> lin = lin.to("cuda", torch.bfloat16)
        >>> lin(torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)).shape
        torch.Size([8, 4096])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        activation: str | None = None,
    ):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.activation = _act_name(activation)

    @classmethod
    def from_linear(cls, linear: nn.Linear, activation: str | None = None) -> Linear:
        """A :class:`Linear` on ``linear``'s own parameters (shared, not copied): optimizer
        state, tied weights and hooks on the parameters carry over.

        Example:
            >>> import torch, pycutlass_rt.torch as pt
            >>> lin = torch.nn.Linear(16, 8)
            >>> fast = pt.Linear.from_linear(lin, activation="relu")
            >>> fast.weight is lin.weight
            True
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        if linear.bias is None:
            new.register_parameter("bias", None)
        else:
            new.bias = linear.bias
        new.activation = _act_name(activation)
        new.train(linear.training)
        return new

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        act = f", activation={self.activation!r}" if self.activation else ""
        return super().extra_repr() + act


def replace_linear(model: nn.Module, activation=None, quant: str | None = None) -> nn.Module:
    """Swaps every ``nn.Linear`` of ``model`` for a :class:`Linear` on the same parameters,
    or (``quant``) for a :class:`QuantLinear` of its weight quantized.

    In place: the model keeps its parameters (so optimizers, tied weights and the
    state_dict stay as they were) and is returned. Only modules whose type is exactly
    ``nn.Linear`` are swapped (subclasses such as attention's out_proj, used through their
    weights, are left as they are); one module used at several places stays one module
    (with the activation of the first of its names).
    A model that is itself an ``nn.Linear`` cannot be swapped in place: its
    :class:`Linear` is returned.

    Args:
        model: the module to change.
        activation: None; one name (fused into every swapped layer: the model must not
            apply it again); or a mapping from a layer's name in
            ``model.named_modules()`` to its activation (other layers get none; a name
            that is not an ``nn.Linear`` of the model raises ValueError).
        quant: None, or a :class:`QuantLinear` format ("block_fp8", "fp8", "int8"): each
            layer's float weight is quantized into one (no longer shared: the model then
            serves, it does not train); a checkpoint of that format loads into the model
            afterwards (``load_state_dict``) as it is stored.

    Returns:
        ``model``.

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> mlp = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 8))
        >>> mlp = pt.replace_linear(mlp, activation={"0": "gelu"})
        >>> mlp
        Sequential(
          (0): Linear(in_features=8, out_features=32, bias=True, activation='gelu')
          (1): Linear(in_features=32, out_features=8, bias=True)
        )
    """
    if quant is not None and quant not in FORMATS:
        raise ValueError(f"quant must be None or one of {', '.join(map(repr, FORMATS))}")

    def make(linear, act):
        if quant is None:
            return Linear.from_linear(linear, act)
        return QuantLinear.from_linear(linear, quant, act)

    by_name = activation if isinstance(activation, Mapping) else None
    if by_name is None:
        _act_name(activation)
    else:
        for act in by_name.values():
            _act_name(act)
    if type(model) is nn.Linear:
        act = by_name.get("", None) if by_name is not None else activation
        return make(model, act)
    swapped: dict = {}  # id(nn.Linear) -> its Linear, for modules used at several places
    named = dict(model.named_modules(remove_duplicate=False))
    if by_name is not None:
        bad = [n for n in by_name if type(named.get(n)) is not nn.Linear]
        if bad:
            raise ValueError(
                f"replace_linear: {', '.join(map(repr, bad))} name no nn.Linear of the model"
            )
    for parent_name, parent in named.items():
        for child_name, child in list(parent._modules.items()):  # every name, shared or not
            if type(child) is not nn.Linear:
                continue
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if id(child) not in swapped:
                act = by_name.get(full) if by_name is not None else activation
                swapped[id(child)] = make(child, act)
            setattr(parent, child_name, swapped[id(child)])
    return model
