"""The Keras layers ``to_source()`` writes as torch's own functions and layers (padding and cropping,
UpSampling, Max/AveragePooling, LayerNormalization, transposed convolutions, the ReLU/LeakyReLU/ELU and
Softmax layers) compute what their node classes compute: the node (``build_node`` of the same spec, called
with the list protocol) is the reference, itself tested against Keras (tests/test_keras_layers.py); a
converted model runs the written module, so the model and the node are compared directly. Odd sizes, each
padding and stride case, eval and train, outputs and gradients. A spec torch's form does not compute exactly
keeps its node call. The last test builds the layers in Keras itself (the torch backend) and compares."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnzoo
from attnzoo.keras.nodes import NODES, build_node


def _model(spec: dict, rank: int, keras_class: str = "Layer"):
    graph = {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [{"id": "x", "name": "x", "shape": [None] * rank, "dtype": "float32"}],
        "layers": {"layer": {**spec, "keras": {"name": "layer", "class": keras_class}}},
        "calls": [{"id": "layer", "layer": "layer", "args": [{"ref": ["x", 0]}], "kwargs": {}}],
        "outputs": [["layer", 0]],
    }
    return attnzoo.create("keras_model", graph=graph)


def _pad(margins, first=False):
    return {"op": "spatial_pad", "margins": margins, "channels_first": first}


def _up(size, interpolation="nearest", first=False):
    return {
        "op": "upsampling",
        "rank": len(size),
        "size": size,
        "interpolation": interpolation,
        "channels_first": first,
    }


def _pool(kind, k, s, padding, first=False):
    spec = {"op": "pool", "rank": len(k), "kind": kind, "pool_size": k, "strides": s, "padding": padding}
    return {**spec, "channels_first": first}


def _norm(center=True, scale=True, **extra):
    spec = {"op": "layer_norm", "axis": [-1], "shape": [5], "epsilon": 1e-3, "center": center, "scale": scale}
    return {**spec, "rms_scaling": False, **extra}


def _transpose(k, s, padding, output_padding=None, d=None, first=False, **extra):
    spec = {"op": "conv_transpose", "rank": len(k), "filters": 4, "in_channels": 3, "kernel_size": k, "strides": s}
    spec.update(dilation_rate=d or [1] * len(k), padding=padding, output_padding=output_padding)
    return {**spec, "activation": "linear", "use_bias": True, "channels_first": first, **extra}


def _merge(mode, keras3=True):
    return {"op": "merge", "mode": mode, "keras3": keras3, "same_rank": True}


def _separable(k, s, padding, d=None, **settings):
    spec = {"op": "separable_conv", "rank": len(k), "filters": 4, "in_channels": 3, "depth_multiplier": 2}
    spec.update(kernel_size=k, strides=s, dilation_rate=d or [1] * len(k), padding=padding)
    return {**spec, "activation": "linear", "use_bias": True, "channels_first": False, **settings}


def _batch_norm(axis=-1, **settings):
    spec = {"op": "batch_norm", "axis": axis, "features": 3, "epsilon": 1e-3, "center": True, "scale": True}
    return {**spec, "momentum": 0.99, **settings}


def _relu(**settings):
    return {"op": "activation", "activation": "relu_layer", **settings}


# (id, spec, input shape, text the written line holds, exact: bit for bit)
CASES = [
    ("zero_padding1d", _pad([[2, 1]]), [2, 5, 3], "F.pad(", True),
    ("zero_padding2d", _pad([[1, 2], [0, 3]]), [2, 5, 7, 3], "F.pad(", True),
    ("zero_padding2d_first", _pad([[1, 0], [2, 3]], True), [2, 3, 5, 7], "F.pad(", True),
    ("zero_padding3d", _pad([[1, 1], [0, 2], [1, 0]]), [2, 3, 5, 3, 2], "F.pad(", True),
    ("cropping1d", _pad([[-1, -2]]), [2, 7, 3], "[:, 1:-2]", True),
    ("cropping2d", _pad([[-1, 0], [-2, -1]]), [2, 5, 7, 3], "[:, 1:, 2:-1]", True),
    ("cropping2d_first", _pad([[0, -1], [-3, 0]], True), [2, 3, 5, 7], "[:, :, :-1, 3:]", True),
    ("cropping3d", _pad([[-1, -1], [0, -1], [-2, 0]]), [2, 5, 3, 5, 2], "[:, 1:-1, :-1, 2:]", True),
    ("upsampling1d", _up([3]), [2, 5, 3], ".repeat_interleave(3, dim=1)", True),
    ("upsampling2d", _up([2, 3]), [2, 3, 5, 2], ".repeat_interleave(3, dim=2)", True),
    ("upsampling2d_first", _up([3, 1], first=True), [2, 2, 3, 5], ".repeat_interleave(3, dim=2)", True),
    ("upsampling3d", _up([1, 2, 2]), [2, 3, 3, 5, 2], ".repeat_interleave(2, dim=3)", True),
    ("upsampling2d_bilinear", _up([2, 3], "bilinear"), [2, 3, 5, 2], 'mode="bilinear"', True),
    ("max_valid2d", _pool("max", [2, 3], [2, 1], "valid"), [2, 7, 9, 3], "F.max_pool2d(", True),
    ("max_valid2d_first", _pool("max", [3, 2], [1, 2], "valid", True), [2, 3, 7, 9], "F.max_pool2d(", True),
    ("max_same1d_odd", _pool("max", [2], [2], "same"), [2, 7, 3], "conv_padding(", True),
    ("max_same1d_even", _pool("max", [3], [2], "same"), [2, 8, 3], "conv_padding(", True),
    ("max_same2d_strided", _pool("max", [3, 2], [2, 3], "same"), [2, 7, 8, 3], "conv_padding(", True),
    ("max_same2d_centred", _pool("max", [3, 5], [1, 1], "same"), [2, 5, 7, 3], "padding=[1, 2]", True),
    ("average_valid2d", _pool("average", [2, 2], [2, 2], "valid"), [2, 7, 9, 3], "F.avg_pool2d(", True),
    ("average_same1d_centred", _pool("average", [3], [1], "same"), [2, 7, 3], "count_include_pad=False", False),
    ("average_same2d_centred", _pool("average", [3, 5], [1, 1], "same"), [2, 5, 7, 3], "count_include_pad", False),
    ("average_same3d_centred", _pool("average", [3, 1, 3], [1, 1, 1], "same"), [2, 3, 5, 3, 2], "avg_pool3d", False),
    ("layer_norm", _norm(), [2, 3, 5], "nn.LayerNorm(5, eps=0.001)", False),
    ("layer_norm_scale_only", _norm(center=False), [2, 3, 5], "nn.LayerNorm(5, eps=0.001, bias=False)", False),
    ("layer_norm_neither", _norm(center=False, scale=False), [2, 3, 5], "F.layer_norm(", False),
    (
        "rms_norm",
        {"op": "keras_hub_rms_norm", "features": 5, "epsilon": 1e-6},
        [2, 3, 5],
        "nn.RMSNorm(5, eps=1e-06)",
        False,
    ),
    ("transpose2d_valid_output_padding", _transpose([4, 3], [2, 3], "valid", [1, 2]), [2, 3, 5, 3], "output", False),
    ("transpose1d_valid_wide_stride", _transpose([2], [3], "valid"), [2, 5, 3], "output_padding=[1]", False),
    ("transpose2d_same_even", _transpose([4, 4], [2, 2], "same"), [2, 5, 7, 3], "padding=[1, 1]", False),
    ("transpose1d_same_stride1", _transpose([3], [1], "same"), [2, 7, 3], "padding=[1]", False),
    ("transpose2d_same_dilated", _transpose([3, 3], [1, 1], "same", d=[2, 1]), [2, 5, 7, 3], "dilation", False),
    ("transpose1d_same_output_padding", _transpose([4], [3], "same", [2]), [2, 5, 3], "padding=[1]", False),
    ("transpose1d_same_odd_total", _transpose([3], [2], "same"), [2, 5, 3], "[:, :, :-1]", False),
    ("transpose2d_same_odd_total", _transpose([3, 4], [2, 2], "same"), [2, 5, 7, 3], "[:, :, :-1, :]", False),
    (
        "transpose2d_first_relu",
        _transpose([3, 2], [2, 2], "valid", first=True, activation="relu", use_bias=False),
        [2, 3, 5, 7],
        "bias=False",
        False,
    ),
    ("rescaling", {"op": "rescaling", "scale": 0.5, "offset": -1.0}, [2, 5, 3], " * 0.5 + -1.0", True),
    ("rescaling_scale_only", {"op": "rescaling", "scale": 0.25, "offset": 0.0}, [2, 5, 3], " * 0.25", True),
    (
        "rescaling_per_channel",
        {"op": "rescaling", "scale": [0.5, 2.0, -1.0], "offset": [1.0, 0.0, 0.25]},
        [2, 5, 3],
        "torch.tensor([0.5, 2.0, -1.0], device=",
        True,
    ),
    ("relu", _relu(), [2, 5, 3], "torch.relu(", True),
    ("relu6", _relu(max_value=6.0), [2, 5, 3], "torch.clamp(", True),
    ("leaky_relu", _relu(negative_slope=0.3), [2, 5, 3], "torch.where(", True),
    ("relu_threshold", _relu(negative_slope=0.1, threshold=0.5, max_value=1.5), [2, 5, 3], "max=1.5", True),
    ("elu", {"op": "activation", "activation": "elu_layer", "alpha": 0.7}, [2, 5, 3], "torch.expm1(", True),
    ("softmax", {"op": "softmax", "axis": 1, "keras3": True}, [2, 5, 3], "torch.softmax(", True),
    ("softmax_axes", {"op": "softmax", "axis": [1, 2], "keras3": True}, [2, 5, 3], "torch.logsumexp(", True),
]


def _randomised(node) -> None:
    """Weights off their initial values (LayerNorm starts at ones and zeros, which would hide a swap), and the
    statistics (Normalization's mean and variance, BatchNorm's moving ones) positive and off theirs."""
    with torch.no_grad():
        for parameter in node.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5 + 0.2)
        for buffer in node.buffers():
            if buffer.is_floating_point():
                buffer.copy_(torch.rand_like(buffer) + 0.5)


@pytest.mark.parametrize(("spec", "shape", "text", "exact"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_written_layer_computes_what_its_node_computes(spec, shape, text, exact):
    torch.manual_seed(0)
    model = _model(spec, len(shape))
    source = model.to_source()
    forward = source.split("def forward", 1)[1]
    assert text in source, forward
    assert f"= {NODES[spec['op']].__name__}(" not in source  # the node class is not declared
    node = build_node(spec)
    _randomised(node)
    model.layers["layer"].load_state_dict(node.state_dict())
    tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-6, "atol": 1e-6}
    x = torch.randn(*shape)
    for training in (False, True):
        model.train(training), node.train(training)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = model(a), node([b], {}, [None])[0][0]
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, **tolerance)
        weights = torch.randn_like(want)  # the gradients of a weighted sum: every entry's own
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
        ported = dict(model.layers["layer"].named_parameters())
        for name, parameter in node.named_parameters():
            torch.testing.assert_close(ported[name].grad, parameter.grad, rtol=1e-5, atol=1e-5)
            ported[name].grad, parameter.grad = None, None


# -- every node class with a torch form (its ``write``), in a graph of its own ----------------------------
class In:
    """A call argument that is the graph's input ``index`` (the other arguments are constants)."""

    def __init__(self, index: int) -> None:
        self.index = index


def _rnn(cell="lstm", **settings):
    spec = {"op": "recurrent", "cell": cell, "units": 4, "input_size": 3, "return_sequences": True}
    return {**spec, **settings}


def _conv(k, s, padding, d=None, first=False, **extra):
    spec = {"op": "conv", "rank": len(k), "filters": 4, "in_channels": 2, "kernel_size": k, "strides": s}
    return {**spec, "dilation_rate": d or [1] * len(k), "padding": padding, "channels_first": first, **extra}


def _normalization(axis, shape, invert=False):
    return {"op": "normalization", "axis": axis, "stats_shape": shape, "invert": invert}


def _affine(op, interpolation="bilinear", fill_mode="reflect", **factors):
    spec = {"op": op, **factors, "interpolation": interpolation, "fill_mode": fill_mode}
    return {**spec, "fill_value": 0.0, "channels_first": False}


def _zoo(model, **config):
    config = {"keras_semantics": 3, **config}
    return {"op": "zoo", "model": model, "config": config, "call": "attention", "output_mask": "input"}


def _operation(name, **config):
    return {"op": "operation", "name": name, "config": config}


# (id, spec, input shapes, call arguments, settings): ``masked`` runs a Masking layer on input 0 first, so
# the layer gets a mask; ``ids`` makes the inputs integer ids in [0, ids); ``random``: a dropout, whose
# training draws are torch's own (checked against Keras's formula, not against the node's draws)
WRITTEN = [
    (
        "embedding_mask_zero",
        {"op": "embedding", "input_dim": 7, "output_dim": 4, "mask_zero": True},
        [[2, 6]],
        None,
        {"ids": 7},
    ),
    (
        "reversible_embedding_mask_zero",
        {"op": "reversible_embedding", "input_dim": 7, "output_dim": 4, "mask_zero": True},
        [[2, 6]],
        None,
        {"ids": 7},
    ),
    ("masking", {"op": "masking", "mask_value": 0.0}, [[2, 6, 3]], None, {"masked": True}),
    (
        "dense_masked",
        {"op": "dense", "units": 4, "in_features": 3, "activation": "softplus"},
        [[2, 6, 3]],
        None,
        {"masked": True},
    ),
    (
        "dense_no_bias_softmax",
        {"op": "dense", "units": 4, "in_features": 3, "activation": "softmax", "use_bias": False},
        [[2, 3]],
        None,
        {},
    ),
    ("activation_gelu", {"op": "activation", "activation": "gelu"}, [[2, 6, 3]], None, {"masked": True}),
    ("activation_gelu_tanh", {"op": "activation", "activation": "gelu_approximate"}, [[2, 6, 3]], None, {}),
    ("conv1d_same_inside", _conv([3], [1], "same"), [[2, 7, 2]], None, {}),
    ("conv1d_causal_dilated", _conv([3], [1], "causal", d=[2]), [[2, 7, 2]], None, {}),
    ("conv2d_same_strided", _conv([3, 2], [2, 2], "same", activation="relu"), [[2, 7, 6, 2]], None, {}),
    ("conv2d_first_groups", _conv([2, 2], [1, 1], "valid", first=True, groups=2, filters=4), [[2, 2, 5, 6]], None, {}),
    ("conv3d_valid", _conv([2, 1, 2], [1, 2, 1], "valid", use_bias=False), [[2, 4, 5, 3, 2]], None, {}),
    ("flatten_first", {"op": "flatten", "channels_first": True}, [[2, 3, 4, 2]], None, {}),
    ("reshape", {"op": "reshape", "target_shape": [3, 4]}, [[2, 6, 2]], None, {}),
    ("permute", {"op": "permute", "dims": [2, 1]}, [[2, 5, 3]], None, {}),
    ("repeat_vector", {"op": "repeat_vector", "n": 3}, [[2, 4]], None, {}),
    ("dropout", {"op": "noise", "kind": "dropout", "rate": 0.4}, [[2, 6, 3]], None, {"masked": True, "random": 0.4}),
    (
        "spatial_dropout1d",
        {"op": "noise", "kind": "dropout", "rate": 0.5, "shared_axes": [1]},
        [[4, 6, 5]],
        None,
        {"masked": True, "random": 0.5},
    ),
    ("gaussian_noise_rate_0", {"op": "noise", "kind": "gaussian_noise", "rate": 0.0}, [[2, 6, 3]], None, {}),
    (
        "global_average1d_masked",
        {"op": "global_pool", "rank": 1, "kind": "average"},
        [[2, 6, 3]],
        None,
        {"masked": True},
    ),
    (
        "global_max2d_keepdims",
        {"op": "global_pool", "rank": 2, "kind": "max", "keepdims": True},
        [[2, 4, 5, 3]],
        None,
        {},
    ),
    (
        "global_average2d_first",
        {"op": "global_pool", "rank": 2, "kind": "average", "channels_first": True},
        [[2, 3, 4, 5]],
        None,
        {},
    ),
    ("operation_add_number", _operation("add"), [[2, 5, 3]], [2.5, In(0)], {}),
    ("operation_multiply", _operation("multiply"), [[2, 5, 3], [2, 5, 3]], [In(0), In(1)], {}),
    ("operation_matmul", _operation("matmul"), [[2, 5, 3], [2, 3, 4]], [In(0), In(1)], {}),
    ("operation_sum_axis", _operation("sum", axis=1, keepdims=True), [[2, 5, 3]], None, {}),
    ("operation_get_item", _operation("get_item"), [[2, 5, 3]], [In(0), [{"slice": [None, None, None]}, -1]], {}),
    ("operation_transpose", _operation("transpose", axes=[0, 2, 1]), [[2, 5, 3]], None, {}),
    ("operation_concatenate", _operation("concatenate", axis=1), [[2, 5, 3], [2, 2, 3]], [[In(0), In(1)]], {}),
    (
        "concatenate_masked",
        {"op": "concatenate", "axis": -1},
        [[2, 6, 3], [2, 6, 2]],
        [[In(0), In(1)]],
        {"masked": True},
    ),
    ("lstm_masked", _rnn(), [[2, 6, 3]], None, {"masked": True}),
    ("lstm_last_no_bias", _rnn(return_sequences=False, use_bias=False), [[2, 6, 3]], None, {"masked": True}),
    ("gru_backwards", _rnn("gru", go_backwards=True, zero_output_for_mask=True), [[2, 6, 3]], None, {"masked": True}),
    (
        "bidirectional_gru",
        {
            "op": "bidirectional",
            "merge_mode": "concat",
            "forward_layer": _rnn("gru", zero_output_for_mask=True),
            "backward_layer": _rnn("gru", zero_output_for_mask=True, go_backwards=True),
        },
        [[2, 6, 3]],
        None,
        {"masked": True},
    ),
    ("add", _merge("add"), [[2, 5, 3], [2, 5, 3]], [[In(0), In(1)]], {}),
    ("add_masked", _merge("add"), [[2, 6, 3], [2, 6, 3]], [[In(0), In(1)]], {"masked": True}),
    ("add_masked_twice", _merge("add"), [[2, 6, 3]], [[In(0), In(0)]], {"masked": True}),
    ("subtract_broadcast", _merge("subtract"), [[2, 5, 3], [2, 1, 3]], [[In(0), In(1)]], {}),
    ("multiply_keras2_masked", _merge("multiply", False), [[2, 6, 3], [2, 6, 3]], [[In(0), In(1)]], {"masked": True}),
    ("average_three", _merge("average"), [[2, 5, 3]] * 3, [[In(0), In(1), In(2)]], {}),
    ("maximum", _merge("maximum"), [[2, 5, 3], [2, 5, 3]], [[In(0), In(1)]], {}),
    ("minimum_three", _merge("minimum"), [[2, 5, 3]] * 3, [[In(0), In(1), In(2)]], {}),
    ("separable1d_same", _separable([3], [1], "same"), [[2, 7, 3]], None, {}),
    ("separable1d_causal_tanh", _separable([3], [1], "causal", activation="tanh"), [[2, 7, 3]], None, {}),
    ("separable2d_same_strided", _separable([3, 2], [2, 2], "same"), [[2, 7, 8, 3]], None, {}),
    ("separable2d_valid_dilated", _separable([3, 3], [1, 1], "valid", d=[2, 1]), [[2, 9, 7, 3]], None, {}),
    (
        "separable2d_first_no_bias",
        _separable([2, 3], [1, 2], "valid", channels_first=True, use_bias=False, depth_multiplier=1),
        [[2, 3, 6, 7]],
        None,
        {},
    ),
    ("batch_norm", _batch_norm(), [[2, 6, 3]], None, {}),
    ("batch_norm_masked", _batch_norm(momentum=0.8), [[2, 6, 3]], None, {"masked": True}),
    ("batch_norm_image", _batch_norm(epsilon=1e-2), [[3, 4, 5, 3]], None, {}),
    ("batch_norm_first_plain", _batch_norm(axis=1, center=False, scale=False), [[3, 3, 5, 4]], None, {}),
    ("normalization_masked", _normalization([-1], [3]), [[2, 6, 3]], None, {"masked": True}),
    ("normalization_invert_axes", _normalization([1, -1], [4, 3], invert=True), [[2, 4, 5, 3]], None, {}),
    ("normalization_scalar", _normalization([], []), [[2, 6, 3]], None, {}),
    ("center_crop", {"op": "center_crop", "height": 3, "width": 4}, [[2, 6, 7, 3]], None, {}),
    ("center_crop_smaller_resized", {"op": "center_crop", "height": 5, "width": 6}, [[2, 4, 9, 3]], None, {}),
    (
        "center_crop_first",
        {"op": "center_crop", "height": 2, "width": 3, "channels_first": True},
        [[2, 3, 5, 6]],
        None,
        {},
    ),
    ("resizing_bilinear", {"op": "resizing", "height": 7, "width": 3}, [[2, 4, 5, 3]], None, {}),
    (
        "resizing_nearest_cropped_first",
        {"op": "resizing", "height": 3, "width": 5, "interpolation": "nearest", "crop_to_aspect_ratio": True}
        | {"channels_first": True},
        [[2, 3, 6, 4]],
        None,
        {},
    ),
    # the random augmentations: the module and the node draw torch's numbers from the same seed
    ("random_flip", {"op": "random_flip", "mode": "horizontal_and_vertical"}, [[6, 4, 5, 3]], None, {"seed": 1}),
    (
        "random_flip_keras2_first",
        {"op": "random_flip", "mode": "vertical", "coin_per_axis": True, "channels_first": True},
        [[6, 3, 4, 5]],
        None,
        {"seed": 2},
    ),
    (
        "random_brightness",
        {"op": "random_brightness", "factor": [-0.2, 0.3], "value_range": [-1.0, 1.0]},
        [[4, 4, 5, 3]],
        None,
        {"seed": 3},
    ),
    (
        "random_contrast",
        {"op": "random_contrast", "factor": [0.1, 0.2], "value_range": [-2.0, 2.0]},
        [[4, 4, 5, 3]],
        None,
        {"seed": 4},
    ),
    ("random_crop", {"op": "random_crop", "height": 3, "width": 2}, [[3, 5, 6, 3]], None, {"seed": 5}),
    (
        "random_resize_width",
        {"op": "random_resize", "axis": "width", "factor": [-0.4, 0.4]},
        [[3, 5, 6, 3]],
        None,
        {"seed": 6},
    ),
    ("random_rotation", _affine("random_rotation", factor=[-0.2, 0.3]), [[3, 5, 6, 2]], None, {"seed": 7}),
    (
        "random_zoom_nearest_wrap",
        _affine("random_zoom", height_factor=[-0.3, 0.2], width_factor=None, interpolation="nearest", fill_mode="wrap"),
        [[3, 5, 6, 2]],
        None,
        {"seed": 8},
    ),
    (
        "random_translation_constant_first",
        _affine("random_translation", height_factor=[-0.2, 0.2], width_factor=[0.0, 0.3], fill_mode="constant")
        | {"fill_value": 0.5, "channels_first": True},
        [[3, 2, 5, 6]],
        None,
        {"seed": 9},
    ),
    ("attention_dot_masked", _zoo("keras_dot", use_scale=True), [[2, 6, 3]] * 2, [[In(0), In(1)]], {"masked": True}),
    (
        "attention_concat_keras2_self",
        _zoo("keras_dot", use_scale=True, score_mode="concat", keras_semantics=2),
        [[2, 6, 3]],
        [[In(0), In(0)]],
        {"masked": True},
    ),
    (
        "attention_additive_key",
        _zoo("keras_additive", dim=3),
        [[2, 5, 3], [2, 6, 3], [2, 6, 3]],
        [[In(0), In(1), In(2)]],
        {"masked": True},
    ),
    *[(f"case_{c[0]}", c[1], [c[2]], None, {}) for c in CASES],
]


def _written_graph(spec: dict, shapes: list, args: list, settings: dict) -> dict:
    """One input per shape; Masking on input 0 first where ``masked``; the layer; a masked average over the
    steps of a 3-D output (its mask, read by a second output: the layer's output mask is checked too)."""
    dtype = "int32" if settings.get("ids") else "float32"
    inputs = [{"id": f"x{i}", "name": f"x{i}", "shape": [None] * len(s), "dtype": dtype} for i, s in enumerate(shapes)]
    calls = []
    if settings.get("masked"):
        calls.append({"id": "masking", "layer": "masking", "args": [{"ref": ["x0", 0]}], "kwargs": {}})

    def ref(value):
        if isinstance(value, In):
            return {"ref": ["masking" if value.index == 0 and settings.get("masked") else f"x{value.index}", 0]}
        return [ref(v) for v in value] if isinstance(value, list) else value

    layers = {"layer": {**spec, "keras": {"name": "layer", "class": "Layer"}}, "masking": {"op": "masking"}}
    layers["probe"] = {"op": "global_pool", "rank": 1, "kind": "average"}
    calls.append({"id": "layer", "layer": "layer", "args": ref(args), "kwargs": {}})
    calls.append({"id": "probe", "layer": "probe", "args": [{"ref": ["layer", 0]}], "kwargs": {}})
    graph = {"format": 1, "keras_version": "3.15.1", "inputs": inputs, "layers": layers, "calls": calls}
    return {**graph, "outputs": [["layer", 0], ["probe", 0]]}


def _masked_mean(y, mask):
    """Keras's masked GlobalAveragePooling1D, written naively: the kept steps' sum over their count."""
    if mask is None:
        return y.mean(dim=1)
    keep = mask.to(y.dtype).unsqueeze(-1)
    return (y * keep).sum(dim=1) / keep.sum(dim=1)


def _written_inputs(shapes, settings):
    if settings.get("ids"):
        xs = [torch.randint(1, settings["ids"], s) for s in shapes]
        xs[0][0, -2:] = 0  # padding ids: masked steps
        return xs
    xs = [torch.randn(*s) for s in shapes]
    if settings.get("masked"):
        xs[0][0, -2:] = 0.0  # right padding in sample 0, a hole in sample 1
        xs[0][1, 2] = 0.0
    return xs


WRITERS = sorted({cls.__name__ for cls in NODES.values() if cls.write is not None})


def test_every_node_with_a_torch_form_is_checked_against_its_node_here():
    """The torch forms are the registry's (``attnzoo.keras.nodes.writes``): one without a case fails here."""
    checked = {NODES[spec["op"]].__name__ for _, spec, *_ in WRITTEN}
    assert WRITERS and not set(WRITERS) - checked, f"add a case to WRITTEN for {sorted(set(WRITERS) - checked)}"


@pytest.mark.parametrize(("spec", "shapes", "args", "settings"), [c[1:] for c in WRITTEN], ids=[c[0] for c in WRITTEN])
def test_each_torch_form_computes_what_its_node_computes(spec, shapes, args, settings):
    """The written module (the converted model runs it) against the node called with the list protocol: the
    output, the output's mask (through a masked average of a 3-D output), eval and train, the gradients of
    the inputs and of every weight."""
    torch.manual_seed(0)
    args = args if args is not None else [In(0)]
    model = _written_graph_model(spec, shapes, args, settings)
    node = build_node(spec)
    _randomised(node)
    model.load_state_dict({f"layers.layer.{k}": v for k, v in node.state_dict().items()})
    xs = _written_inputs(shapes, settings)
    for training in (False, True):
        model.train(training), node.train(training and not settings.get("random"))
        ours = [x.clone().requires_grad_(x.is_floating_point()) for x in xs]
        theirs = [x.clone().requires_grad_(x.is_floating_point()) for x in xs]
        if "seed" in settings:
            torch.manual_seed(settings["seed"])
        got, probe = model(*ours)
        if "seed" in settings:
            torch.manual_seed(settings["seed"])
        want, want_mask = _node_run(node, theirs, args, settings)
        if training and settings.get("random"):  # torch's own draws: each entry dropped, or scaled as Keras's
            kept = got != 0
            assert 0 < kept.sum() < kept.numel()
            want = torch.where(kept, want / (1 - settings["random"]), torch.zeros_like(want))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        if got.dim() == 3:
            torch.testing.assert_close(probe, _masked_mean(want, want_mask), rtol=1e-5, atol=1e-6)
        weights = torch.randn_like(want)
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        for a, b in zip(ours, theirs, strict=True):
            if a.requires_grad:
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
        _same_weight_gradients(model, node)


def _written_graph_model(spec, shapes, args, settings):
    model = attnzoo.create("keras_model", graph=_written_graph(spec, shapes, args, settings))
    assert f"= {NODES[spec['op']].__name__}(" not in model.to_source(), "the layer kept its node call"
    return model


def _node_run(node, xs, args, settings):
    """The node on the inputs as the graph passes them (Masking by Keras's rule, written naively, first)."""
    masks = [None] * len(xs)
    if settings.get("masked"):
        keep = (xs[0] != 0).any(dim=-1)
        xs = [xs[0] * keep.unsqueeze(-1).to(xs[0].dtype), *xs[1:]]
        masks[0] = keep

    def tensors(value, structure):
        if isinstance(value, In):
            return structure[value.index]
        return [tensors(v, structure) for v in value] if isinstance(value, list) else value if structure is xs else None

    outputs, output_masks = node(tensors(args, xs), {}, tensors(args, masks))
    return outputs[0], output_masks[0]


def _same_weight_gradients(model, node):
    ported = dict(model.named_parameters())
    for name, parameter in node.named_parameters():
        key = model.node_keys.get(f"layers.layer.{name}", f"layers.layer.{name}")
        if key in ported:  # an LSTM's second bias is a zero buffer in torch's form: Keras has one
            torch.testing.assert_close(ported[key].grad, parameter.grad, rtol=1e-5, atol=1e-5)
            ported[key].grad, parameter.grad = None, None
        parameter.grad = None


# specs torch's form would compute otherwise: the node class stays
DECLINED = [
    ("average_same_strided", _pool("average", [3], [2], "same"), [2, 8, 3]),  # uneven "same" at even lengths
    ("average_same_even_window", _pool("average", [2, 2], [1, 1], "same"), [2, 5, 7, 3]),
    ("layer_norm_offset_only", _norm(scale=False), [2, 3, 5]),
    ("layer_norm_rms", _norm(center=False, rms_scaling=True), [2, 3, 5]),
    ("layer_norm_middle_axis", {**_norm(), "axis": [1]}, [2, 5, 3]),
    ("upsampling3d_bilinear", _up([2, 2, 2], "bilinear"), [2, 3, 3, 3, 2]),
]


@pytest.mark.parametrize(("spec", "shape"), [c[1:] for c in DECLINED], ids=[c[0] for c in DECLINED])
def test_a_spec_torch_s_form_does_not_compute_keeps_its_node(spec, shape):
    model = _model(spec, len(shape))
    cls = NODES[spec["op"]]
    assert f'self.layers["layer"] = {cls.__name__}(' in model.to_source()
    assert type(model.layers["layer"]) is cls


def test_a_softmax_of_a_masked_input_keeps_its_node_and_a_relu_and_a_layer_norm_pass_the_mask_on():
    """Softmax reads its input's mask (masked scores are zero): the node call stays; the ReLU layer's and the
    LayerNormalization's outputs have their input's mask, as their nodes'."""
    graph = {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [{"id": "x", "name": "x", "shape": [None, None, None], "dtype": "float32"}],
        "layers": {
            "masking": {"op": "masking", "mask_value": 0.0},
            "relu": _relu(negative_slope=0.2),
            "norm": {**_norm(), "shape": [3]},
            "softmax": {"op": "softmax", "axis": -1, "keras3": True},
        },
        "calls": [
            {"id": "masking", "layer": "masking", "args": [{"ref": ["x", 0]}], "kwargs": {}},
            {"id": "relu", "layer": "relu", "args": [{"ref": ["masking", 0]}], "kwargs": {}},
            {"id": "norm", "layer": "norm", "args": [{"ref": ["relu", 0]}], "kwargs": {}},
            {"id": "softmax", "layer": "softmax", "args": [{"ref": ["norm", 0]}], "kwargs": {}},
        ],
        "outputs": [["softmax", 0]],
    }
    model = attnzoo.create("keras_model", graph=graph)
    source = model.to_source()
    assert 'self.layers["softmax"] = Softmax(' in source and "torch.where(" in source and "nn.LayerNorm(3" in source
    assert "layers.softmax.keras_call(norm, input_mask=masking_mask)" in source  # the ReLU and the norm pass it on
    x = torch.randn(2, 4, 3)
    x[0, 1] = 0.0  # a masked step
    with torch.no_grad():
        # by hand: the masked step stays 0; the norm's gamma is 1, its beta 0 (a fresh layer's); a
        # [batch, steps] mask is no score mask of [batch, steps, 3] scores
        relu = torch.where(x >= 0, x, 0.2 * x)
        centred = relu - relu.mean(-1, keepdim=True)
        norm = centred / (centred.square().mean(-1, keepdim=True) + 1e-3).sqrt()
        want = torch.softmax(norm, dim=-1)
        torch.testing.assert_close(model.eval()(x), want, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_the_written_layers_predict_what_keras_predicts(tmp_path, monkeypatch):
    """Keras 3 (torch backend) builds each layer in one model, saved and converted: the written module's
    outputs equal Keras's predictions, and none of these layers is a node call."""
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    from attnzoo.keras import convert_keras_model

    layers = keras.layers
    image = keras.Input((7, 9, 3))
    sequence = keras.Input((7, 5))
    outputs = [
        layers.MaxPooling2D((3, 2), strides=(2, 3), padding="same")(image),
        layers.AveragePooling2D((3, 3), strides=1, padding="same")(image),
        layers.AveragePooling1D(2, padding="valid")(sequence),
        layers.Conv2DTranspose(4, 4, strides=2, padding="same", activation="tanh")(image),
        layers.Conv2DTranspose(2, (3, 2), strides=(2, 3), output_padding=(1, 2))(image),
        layers.Conv1DTranspose(3, 3, padding="same")(sequence),
        layers.LayerNormalization(center=False, epsilon=1e-5)(sequence),
        layers.LayerNormalization()(sequence),
        layers.UpSampling2D((2, 3))(image),
        layers.UpSampling1D(2)(sequence),
        layers.ZeroPadding2D(((1, 2), (0, 3)))(image),
        layers.Cropping2D(((1, 0), (2, 1)))(image),
        layers.Cropping1D((2, 1))(sequence),
        layers.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.2)(sequence),
        layers.LeakyReLU(negative_slope=0.3)(sequence),
        layers.ELU(alpha=0.7)(sequence),
        layers.Softmax(axis=1)(sequence),
        layers.BatchNormalization(momentum=0.9, epsilon=1e-2)(image),
        layers.BatchNormalization()(sequence),
        layers.SeparableConv2D(4, (3, 2), strides=2, padding="same", depth_multiplier=2)(image),
        layers.SeparableConv1D(3, 3, dilation_rate=2, activation="relu")(sequence),
        layers.Add()([sequence, layers.Dense(5)(sequence)]),
        layers.Maximum()([sequence, layers.Dense(5)(sequence)]),
    ]
    keras_model = keras.Model([image, sequence], outputs)
    keras.utils.set_random_seed(3)
    for weight in keras_model.weights:  # off their initial values (ones, zeros)
        value = keras.random.normal(weight.shape, seed=int(keras.random.randint((), 0, 10**6))) * 0.5
        weight.assign(keras.ops.abs(value) + 0.1 if "variance" in weight.path else value)  # a variance is > 0
    keras_model.save(tmp_path / "model.keras")
    inputs = [torch.randn(2, 7, 9, 3), torch.randn(2, 7, 5)]
    want = [torch.as_tensor(keras.ops.convert_to_numpy(y)) for y in keras_model([x.numpy() for x in inputs])]
    model = convert_keras_model(tmp_path / "model.keras").eval()
    source = model.to_source()
    for name in ("Pool(", "ConvTranspose(", "LayerNorm(", "UpSampling(", "SpatialPad(", "Activation(", "Softmax(") + (
        "BatchNorm(",
        "SeparableConv(",
        "Merge(",
    ):
        assert f"= {name}" not in source, name
    with torch.no_grad():
        got = model(*inputs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=lambda m, i=i: f"output {i}: {m}")


@pytest.mark.slow
def test_every_small_transposed_convolution_and_pooling_is_written_exactly_where_torch_can_and_equals_its_node():
    """Over windows 1-4, strides 1-3, dilations 1-2, both paddings and every output_padding Keras takes, at an
    odd and an even length: a written transposed convolution or pooling equals its node; for a transposed
    convolution kept as its node, no ``padding`` and ``output_padding`` torch takes gives the node's output
    (brute force over them), so declining loses nothing."""
    torch.manual_seed(1)
    written = declined = 0
    specs = []
    grid = [(k, s, d, p) for k in range(1, 5) for s in range(1, 4) for d in (1, 2) for p in ("valid", "same")]
    for k, s, d, padding in grid:
        for output_padding in [None, *([[p] for p in range(s)] if d == 1 else [])]:
            specs.append(_transpose([k], [s], padding, output_padding, d=[d]))
        if d == 1:
            specs += [_pool(kind, [k], [s], padding) for kind in ("max", "average")]
    for spec in specs:
        model = _model(spec, 3)
        node = build_node(spec)
        _randomised(node)
        if isinstance(model.layers["layer"], NODES[spec["op"]]):
            declined += 1
            if spec["op"] == "conv_transpose":
                _no_torch_padding_gives(node, spec)
            continue
        written += 1
        model.layers["layer"].load_state_dict(node.state_dict())
        for length in (6, 7):
            x = torch.randn(2, length, 3)
            with torch.no_grad():
                got, want = model.eval()(x), node.eval()([x], {}, [None])[0][0]
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=lambda m, spec=spec: f"{spec}: {m}")
    assert written > declined > 0, (written, declined)


def _no_torch_padding_gives(node, spec: dict) -> None:
    (k,), (s,), (d,) = spec["kernel_size"], spec["strides"], spec["dilation_rate"]
    x = torch.randn(2, 7, 3)
    with torch.no_grad():
        want = node.eval()([x], {}, [None])[0][0].movedim(-1, 1)
        for padding in range((k - 1) * d + 1):
            for extra in range(max(s, d)):
                y = F.conv_transpose1d(x.movedim(-1, 1), node.weight, node.bias, s, padding, extra, 1, d)
                assert y.shape != want.shape or not torch.allclose(y, want, atol=1e-5), (spec, padding, extra)


@pytest.mark.parametrize("masked", [False, True])
def test_the_written_batch_norm_moves_keras_s_statistics(masked):
    """Keras moves its moving variance towards the batch's biased variance (torch's BatchNorm: the unbiased),
    over the kept steps of a masked input; Keras's rule written naively: moving = moving * m + batch * (1 - m).
    The state dict holds Keras's four variables, no num_batches_tracked."""
    torch.manual_seed(2)
    model = _written_graph_model(_batch_norm(momentum=0.8), [[2, 6, 3]], [In(0)], {"masked": masked})
    assert sorted(k for k in model.state_dict() if k.startswith("layers.layer.")) == [
        f"layers.layer.{k}" for k in ("bias", "running_mean", "running_var", "weight")
    ]
    x = _written_inputs([[2, 6, 3]], {"masked": masked})[0]
    x = torch.where(x != 0, x * 3.0 + 1.0, 0.0)  # padding stays 0, 3 of 12 steps where masked
    keep = (x != 0).any(dim=-1) if masked else torch.ones(2, 6, dtype=torch.bool)
    assert int(keep.sum()) == (9 if masked else 12)
    kept = x[keep]  # [kept steps, 3]
    mean, variance = kept.mean(0), ((kept - kept.mean(0)) ** 2).mean(0)
    model.train()(x)
    layer = model.layers["layer"]
    torch.testing.assert_close(layer.running_mean, 0.2 * mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer.running_var, 0.8 + 0.2 * variance, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("spec", "masked"),
    [({"op": "merge", "mode": "add"}, False), (_merge("multiply"), True), (_merge("maximum"), True)],
    ids=["ranks_unknown", "keras3_multiply_masked", "keras3_maximum_masked"],
)
def test_a_merge_of_unknown_ranks_or_one_that_reads_masks_keeps_its_node(spec, masked):
    graph = _written_graph(spec, [[2, 6, 3], [2, 6, 3]], [[In(0), In(1)]], {"masked": masked})
    model = attnzoo.create("keras_model", graph=graph)
    assert 'self.layers["layer"] = Merge(' in model.to_source()


def test_the_written_spatial_dropout_drops_whole_channels():
    """SpatialDropout1D: one draw per sample and channel, shared along the steps (Keras's noise_shape
    [batch, 1, channels]); what is kept is scaled by 1 / (1 - rate)."""
    torch.manual_seed(3)
    spec = {"op": "noise", "kind": "dropout", "rate": 0.5, "shared_axes": [1]}
    model = _written_graph_model(spec, [[8, 6, 5]], [In(0)], {}).train()
    x = torch.rand(8, 6, 5) + 1.0
    got = model(x)[0]
    kept = got != 0
    assert (kept == kept[:, :1]).all() and 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(got[kept], (x * 2.0)[kept])


def test_a_node_of_the_default_forward_is_called_with_its_tensor_and_mask_not_lists():
    """Normalization has no torch form: its node is called as a torch layer is, ``layers.layer(masking)`` (its
    compute reads no mask, so none is passed), and its output ((x - mean) / sqrt(variance), by hand) carries
    the input's mask on to the masked average (Keras's, written naively)."""
    spec = {"op": "normalization", "axis": [-1], "stats_shape": [3]}
    model = attnzoo.create("keras_model", graph=_written_graph(spec, [[2, 6, 3]], [In(0)], {"masked": True}))
    source = model.to_source()
    assert "layer = layers.layer(masking)" in source, source
    assert "], {}, [" not in source  # no call with the list protocol
    mean, variance = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([4.0, 0.25, 1.0])
    model.layers["layer"].mean.copy_(mean)
    model.layers["layer"].variance.copy_(variance)
    x = _written_inputs([[2, 6, 3]], {"masked": True})[0]
    keep = (x != 0).any(dim=-1)
    with torch.no_grad():
        got, probe = model.eval()(x)
    want = (x * keep.unsqueeze(-1) - mean) / variance.sqrt()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(probe, _masked_mean(want, keep))


def test_a_frozen_written_batch_norm_runs_as_at_inference_in_train_mode():
    """Keras runs a BatchNormalization it froze (``trainable=False``) in inference mode even when training:
    the moving statistics normalise (by hand: (x - mean) / sqrt(var + eps) * gamma + beta), and stay."""
    graph = _written_graph(_batch_norm(), [[2, 6, 3]], [In(0)], {})
    graph["layers"]["layer"]["keras"]["trainable"] = False
    model = attnzoo.create("keras_model", graph=graph)
    assert "KerasBatchNorm(" in model.to_source()
    layer = model.layers["layer"]
    with torch.no_grad():
        for name, value in (("weight", 1.5), ("bias", 0.25), ("running_mean", -0.5), ("running_var", 2.0)):
            getattr(layer, name).fill_(value)
    x = torch.randn(2, 6, 3)
    got = model.train()(x)[0]
    torch.testing.assert_close(got, (x + 0.5) / (2.0 + 1e-3) ** 0.5 * 1.5 + 0.25)
    assert (layer.running_mean == -0.5).all() and (layer.running_var == 2.0).all()
