"""FedD2S's layered CNNs M1 / M2 (paper Sec. IV-A; docs/methods/fedd2s.md#model-architecture,
docs/methods/fedd2s.md#head-model-layers, docs/methods/fedd2s.md#layer-outputs).

Paper (Sec. IV-A, verbatim)::

    M1 = [C1(8);  C2(16); C3(32);  F1(32);  F2(16); F3(10)]
    M2 = [C1(16); C2(64); C3(128); F1(128); F2(32); F3(10)]

The paper leaves kernels, padding, pooling and activations unspecified; edgefd's choices are:
``Ci`` = Conv2d(3x3, stride 1, pad 1) -> ReLU -> MaxPool2d(2) (floor); ``F1`` = Flatten -> Linear ->
ReLU; ``F2`` = Linear -> ReLU; ``F3`` = Linear(-> C) logits (F3 outputs C, fixing M2's "F3(10)" on 62
and 100 class data). No BN, no dropout, PyTorch default init.

The model is a stack of L = 6 blocks in ``model.layers`` (an ``nn.ModuleList``). With the paper's
1-based layer index l: ``H_l = model.trunk(x, l)`` is the output of block l (after ReLU and pool; the
flatten belongs to F1, so H_3 is the C3 map), and ``model.head(H_l, l)`` runs blocks l+1..L (the
"head model" theta_{+l}). In 0-based half-open terms ``run_layers(x, a, b)`` runs blocks [a, b), so
``trunk(x, l) == run_layers(x, 0, l)`` and ``head(h, l) == run_layers(h, l, L)``.

Pinned counts (docs/methods/fedd2s.md#model-architecture, docs/methods/fedd2s.md#messages):

- M1, 3x32x32, C = 10: 23,146 params; P_head(l) = 0, 170, 698, 17,114, 21,754 for l = 6..2.
- M2, 1x28x28, C = 62: 237,054; P_head = 0, 2,046, 6,174, 153,758, 227,614.
- M2, 3x32x32, C = 100: 353,284; P_head = 0, 3,300, 7,428, 269,700, 343,556.
- M1 ("M1-mini"), 1x8x8, C = 10: 7,642.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

from ._common import image_shape, infer_output_shape

__all__ = ["LayeredCNN", "build_fedd2s_m1", "build_fedd2s_m2", "M1_CFG", "M2_CFG"]

M1_CFG = ((8, 16, 32), (32, 16))
M2_CFG = ((16, 64, 128), (128, 32))
BLOCK_NAMES = ("C1", "C2", "C3", "F1", "F2", "F3")


class LayeredCNN(nn.Module):
    """Conv blocks + dense blocks in one ``nn.ModuleList`` so the model can be split at any layer."""

    def __init__(
        self,
        shape: tuple[int, int, int],
        num_classes: int,
        conv_channels: Sequence[int],
        fc_units: Sequence[int],
        name: str = "fedd2s",
    ):
        super().__init__()
        blocks: list[nn.Module] = []
        c = shape[0]
        for ch in conv_channels:
            blocks.append(nn.Sequential(nn.Conv2d(c, int(ch), 3, stride=1, padding=1), nn.ReLU(), nn.MaxPool2d(2)))
            c = int(ch)
        conv_stack = nn.Sequential(*blocks)
        conv_out = infer_output_shape(name, conv_stack, shape)
        d = int(torch.Size(conv_out).numel())
        for i, units in enumerate(fc_units):
            lin = nn.Linear(d, int(units))
            blocks.append(nn.Sequential(nn.Flatten(), lin, nn.ReLU()) if i == 0 else nn.Sequential(lin, nn.ReLU()))
            d = int(units)
        last = nn.Linear(d, num_classes)
        blocks.append(nn.Sequential(nn.Flatten(), last) if not fc_units else last)
        self.layers = nn.ModuleList(blocks)
        self.input_shape = tuple(shape)
        self.num_classes = int(num_classes)
        # per-sample output shape of every block, H_1..H_L
        shapes: list[tuple[int, ...]] = []
        s: tuple[int, ...] = tuple(shape)
        with torch.no_grad():
            h = torch.zeros(1, *s)
            for block in self.layers:
                h = block(h)
                shapes.append(tuple(h.shape[1:]))
        self.layer_output_shapes: tuple[tuple[int, ...], ...] = tuple(shapes)

    # ---- structure -------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """L, the number of blocks (6 for M1 / M2)."""
        return len(self.layers)

    def layer_dims(self) -> list[int]:
        """d_l = elements of H_l per sample, for l = 1..L."""
        return [int(torch.Size(s).numel()) for s in self.layer_output_shapes]

    def _check(self, a: int, b: int) -> None:
        if not (0 <= a <= b <= self.num_layers):
            raise ValueError(f"layer range [{a}, {b}) outside [0, {self.num_layers}]")

    # ---- running parts ---------------------------------------------------------------------------
    def run_layers(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Run blocks ``start .. end-1`` (0-based, half-open). ``run_layers(x, a, a)`` is ``x``."""
        self._check(start, end)
        for block in self.layers[start:end]:
            x = block(x)
        return x

    def trunk(self, x: torch.Tensor, l: int) -> torch.Tensor:
        """H_l = F(x; theta_{-l}): blocks 1..l (paper's 1-based l; ``l = 0`` returns ``x``)."""
        return self.run_layers(x, 0, l)

    def head(self, h: torch.Tensor, l: int) -> torch.Tensor:
        """F(h; theta_{+l}): blocks l+1..L applied to H_l (``l = L`` returns ``h``, the logits)."""
        return self.run_layers(h, l, self.num_layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_layers(x, 0, self.num_layers)

    def forward_all(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[H_1, ..., H_L] in one pass (H_L = logits). The multi-output graph for ONNX export."""
        outs = []
        for block in self.layers:
            x = block(x)
            outs.append(x)
        return outs

    def as_multi_output(self) -> nn.Module:
        """A module sharing this model's parameters whose ``forward(x)`` returns the tuple
        ``(H_1, ..., H_L)``: export it to ONNX so that one inference pass yields ``H_1`` and
        ``H_{l}`` for any distillation layer l (phase A of docs/methods/fedd2s.md#what-the-paper-does)."""
        return _MultiOutput(self)

    # ---- parameters of parts ---------------------------------------------------------------------
    def layer_parameter_counts(self) -> list[int]:
        """Parameters of block l, for l = 1..L."""
        return [sum(p.numel() for p in block.parameters()) for block in self.layers]

    def parts_parameters(self, start: int, end: int):
        """Parameters of blocks [start, end) (0-based)."""
        self._check(start, end)
        for block in self.layers[start:end]:
            yield from block.parameters()

    def head_parameter_count(self, l: int) -> int:
        """P_head(l): parameters of blocks l+1..L (0 for l = L)."""
        return sum(p.numel() for p in self.parts_parameters(l, self.num_layers))

    def head_module(self, l: int) -> nn.Sequential:
        """Blocks l+1..L as an ``nn.Sequential`` *sharing* this model's parameters (deep-copy it for a
        frozen copy)."""
        self._check(l, self.num_layers)
        return nn.Sequential(*list(self.layers[l:]))

    def trunk_module(self, l: int) -> nn.Sequential:
        """Blocks 1..l as an ``nn.Sequential`` sharing this model's parameters."""
        self._check(0, l)
        return nn.Sequential(*list(self.layers[:l]))

    def head_state_dict(self, l: int) -> OrderedDict[str, torch.Tensor]:
        """Entries of ``state_dict()`` that belong to blocks l+1..L (keys as in the full model,
        ``layers.<i>.…`` with 0-based i >= l). Loadable with ``load_state_dict(sd, strict=False)``."""
        self._check(l, self.num_layers)
        out: OrderedDict[str, torch.Tensor] = OrderedDict()
        for key, value in self.state_dict().items():
            idx = int(key.split(".")[1])
            if idx >= l:
                out[key] = value
        return out


class _MultiOutput(nn.Module):
    def __init__(self, model: LayeredCNN):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.model.forward_all(x))


def _build(name: str, cfg):
    conv_channels, fc_units = cfg

    def builder(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> LayeredCNN:
        return LayeredCNN(image_shape(name, in_channels, input_shape), num_classes, conv_channels, fc_units, name)

    builder.__name__ = f"build_{name}"
    builder.__doc__ = f"FedD2S {name[-2:].upper()}: C({conv_channels}) + F({fc_units}, C), split-able by layer."
    return builder


build_fedd2s_m1 = _build("fedd2s_m1", M1_CFG)
build_fedd2s_m2 = _build("fedd2s_m2", M2_CFG)
