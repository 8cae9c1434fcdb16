"""``attnzoo create``: build a model and run a dummy forward."""

from __future__ import annotations

import argparse
from typing import Any

from attnzoo.cli.common import config_overrides, say
from attnzoo.core import create, model_info

HELP = "build a model and run a dummy forward"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (values parsed as YAML)")
    p.add_argument(
        "--pretrained",
        nargs="?",
        const=True,
        default=False,
        metavar="TAG",
        help="load pretrained weights (the default tag, or TAG)",
    )
    p.add_argument("--device", help="cpu, cuda:1, auto, meta, or a plugin's device string")
    p.add_argument("--dtype", help="float32, bfloat16 or float16")


def run(args: argparse.Namespace) -> int:
    overrides = config_overrides(args.overrides)
    import torch
    from torch.nn.parameter import is_lazy

    spec = model_info(args.name)
    model = create(args.name, pretrained=args.pretrained, device=args.device, dtype=args.dtype, **overrides)
    shapes = None
    if spec.convention:
        from attnzoo.conventions import get_convention, sample_inputs

        device = None if any(True for _ in model.parameters()) or args.device is None else torch.device(args.device)
        placement: dict[str, Any] = {"device": device} if device else {}
        sample = sample_inputs(model, get_convention(spec.convention), **placement)
        inputs, kwargs = sample.call_arguments()
        with torch.no_grad():
            model.eval()
            output = model(*inputs, **kwargs)
        shown = [*inputs, *kwargs.values()]
        shapes = (", ".join(_describe_output(t) for t in shown), _describe_output(output))

    say(model)  # a converted folder's repr holds its input names
    params = list(model.parameters())
    count = sum(p.numel() for p in params if not is_lazy(p))
    lazy = sum(1 for p in params if is_lazy(p))
    print(f"parameters: {count:,}" + (f" (+{lazy} lazy, sized on the first call)" if lazy else ""))
    if shapes:
        print(f"dummy forward: ({shapes[0]}) -> {shapes[1]}")
    return 0


def _describe_output(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe_output(v) for v in value) + ")"
    return type(value).__name__
