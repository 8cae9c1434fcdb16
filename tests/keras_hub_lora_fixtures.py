"""Make the LoRA adapter fixtures of ``tests/data/keras_hub_lm/{llama,phi3}/`` with keras-hub (run once, in an
environment with keras-hub 0.32, torch backend; CI only reads what it wrote)::

    KERAS_BACKEND=torch python tests/keras_hub_lora_fixtures.py

For each family the script loads the committed ``causal_lm_preset/`` (``keras_hub.models.CausalLM.from_preset``;
its logits on expected.npz's right batch must be ``right/logits`` within 1e-5), calls
``backbone.enable_lora(rank=2, target_layer_names=...)``, moves ``lora_kernel_a`` (``rng*0.3 + a*0.5``) and
``lora_kernel_b`` off zero (``rng*0.3``), and writes:

* ``adapters.lora.h5``: ``backbone.save_lora_weights``'s file (``lora/vars/rank`` and, per adapted layer,
  ``lora/<i>/vars/lora_kernel_a`` and ``lora_kernel_b``, ``i`` the layer's index among the backbone's
  ``_flatten_layers(include_self=False)`` that have weights). It sits beside the preset, not in it: the preset
  folder converts to its base model as before.
* ``lora.npz``: ``lora/logits``, the adapted model's logits on the right batch (float32), and ``lora/layers``,
  the adapted layers' paths in the order of their indices (for the reader of a failing test).

``llama``: adapters on ``query``, ``value`` (kernels [D, heads, d]: every head its own A, B shared),
``attention_output`` ([heads, d, D]) and ``feedforward_output_dense`` (a Dense [I, D]).
``phi3``: keras-hub's default targets (``query``, ``value``); transformers' Phi-3 fuses them into ``qkv_proj``.

The script reloads the preset, loads the adapters with ``backbone.load_lora_weights`` and checks the logits
are ``lora/logits`` again.

It also writes ``attnzoo/keras/lora_order.py``: for each keras-hub layer class with sub-layers in the committed
fixtures' backbones (``backbone_preset/``, else ``causal_lm_preset/``, ``classifier_preset/``), the paths of its
sub-layers that have weights (as ``model.weights.h5`` names their groups), in the order of keras's
``_flatten_layers`` (sub-layers in reverse creation order, depth first), the order whose indices
``save_lora_weights`` writes. A class whose sub-layers differ between fixtures (Gemma's with and without its
post norms) gets the order that holds all of them; the script checks each fixture's order is a part of it.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "keras_hub_lm")
FAMILIES = {
    "llama": ["query", "value", "attention_output", "feedforward_output_dense"],
    "phi3": None,  # keras-hub's default_lora_layer_names()
}


def call(model, inputs: dict) -> np.ndarray:
    with torch.no_grad():
        out = model({k: keras.ops.convert_to_tensor(v) for k, v in inputs.items()}, training=False)
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")))


def make(name: str, targets: list[str] | None, seed: int) -> None:
    folder = os.path.join(HERE, name)
    expected = np.load(os.path.join(folder, "expected.npz"))
    right = {"token_ids": expected["right/token_ids"], "padding_mask": expected["right/padding_mask"]}
    lm = keras_hub.models.CausalLM.from_preset(os.path.join(folder, "causal_lm_preset"))
    base = call(lm, right)
    assert np.abs(base - expected["right/logits"]).max() <= 1e-5, np.abs(base - expected["right/logits"]).max()
    backbone = lm.backbone
    backbone.enable_lora(rank=2, target_layer_names=targets)
    rng = np.random.default_rng(seed)
    layers = []
    for weight in backbone.weights:
        if weight.path.endswith("lora_kernel_a"):
            moved = rng.standard_normal(weight.shape).astype("float32") * 0.3 + np.asarray(weight.numpy()) * 0.5
            weight.assign(moved)
            layers.append(weight.path.rsplit("/", 1)[0])
        elif weight.path.endswith("lora_kernel_b"):
            weight.assign(rng.standard_normal(weight.shape).astype("float32") * 0.3)
    adapted = call(lm, right)
    diff = float(np.abs(adapted - base).max())
    assert diff > 1e-2, diff
    print(f"{name}: adapters on {layers}; logits moved by {diff:.3f}; indices {backbone._lora_enabled_layers}")
    path = os.path.join(folder, "adapters.lora.h5")
    backbone.save_lora_weights(path)
    np.savez_compressed(os.path.join(folder, "lora.npz"), **{"lora/logits": adapted, "lora/layers": np.array(layers)})
    again = keras_hub.models.CausalLM.from_preset(os.path.join(folder, "causal_lm_preset"))
    again.backbone.load_lora_weights(path)
    if targets is not None:  # load_lora_weights enables the default targets: the same ones again by hand
        again = keras_hub.models.CausalLM.from_preset(os.path.join(folder, "causal_lm_preset"))
        again.backbone.enable_lora(rank=2, target_layer_names=targets)
        again.backbone.load_lora_weights(path)
    reloaded = float(np.abs(call(again, right) - adapted).max())
    assert reloaded <= 1e-6, reloaded
    print(f"  reloaded with load_lora_weights: max difference {reloaded:.2e}")


def sub_layer_paths(layer, segment: list) -> list[str]:
    """The paths of ``segment``'s layers (the layer and its weighted sub-layers, as the backbone's
    ``_flatten_layers`` takes them) relative to the layer's group in a weights file (itself: ``""``), found by
    saving the layer and noting where each sub-layer writes."""
    import tempfile

    from keras.src.saving import saving_lib

    where: dict[int, str] = {}
    last: list[str] = [""]
    with tempfile.TemporaryDirectory() as scratch:
        store = saving_lib.H5IOStore(os.path.join(scratch, "x.weights.h5"), mode="w")
        make_store = store.make

        def make_noted(path, metadata=None):
            last[0] = path
            return make_store(path, metadata=metadata)

        store.make = make_noted
        layers = layer._flatten_layers(include_self=True)
        for sub in layers:
            own = sub.save_own_variables

            def noted(s, sub=sub, own=own):
                where[id(sub)] = last[0]
                return own(s)

            object.__setattr__(sub, "save_own_variables", noted)
        try:
            saving_lib._save_state(layer, store, None, "", set())
        finally:
            for sub in layers:
                object.__delattr__(sub, "save_own_variables")
            store.close()
    return [where[id(sub)].strip("/") for sub in segment]


def merged(orders: list[list[str]]) -> list[str]:
    longest = max(orders, key=len)
    out = list(longest)
    for order in orders:
        for path in order:
            if path not in out:  # after the last of its predecessors that the merged order holds
                before = [p for p in order[: order.index(path)] if p in out]
                out.insert(out.index(before[-1]) + 1 if before else 0, path)
    for order in orders:
        assert [p for p in out if p in order] == order, (order, out)
    return out


def write_orders() -> None:
    found: dict[str, list[list[str]]] = {}
    for name in sorted(os.listdir(HERE)):
        folder = os.path.join(HERE, name)
        for preset in ("backbone_preset", "causal_lm_preset", "classifier_preset"):
            if os.path.isdir(os.path.join(folder, preset)):
                break
        else:
            continue
        backbone = keras_hub.models.Backbone.from_preset(os.path.join(folder, preset))
        flat = [sub for sub in backbone._flatten_layers(include_self=False) if sub.weights]
        top = {id(layer) for layer in backbone.layers}
        starts = [i for i, x in enumerate(flat) if id(x) in top]
        in_order = [id(flat[i]) for i in starts] == [id(x) for x in backbone.layers if x.weights] and starts[0] == 0
        assert in_order, f"{name}: _flatten_layers takes the backbone's layers out of its graph's order"
        for start, end in zip(starts, [*starts[1:], len(flat)], strict=True):
            paths = sub_layer_paths(flat[start], flat[start:end])
            assert paths[0] == "", paths
            if len(paths) > 1:
                found.setdefault(type(flat[start]).__name__, []).append(paths[1:])
        print(f"{name}: {len(flat)} weighted layers, the backbone's in the order of its graph")
    lines = [
        '"""The order keras-hub 0.32\'s ``Backbone.save_lora_weights`` numbers a layer\'s weighted sub-layers in',
        "(keras's ``_flatten_layers``: reverse creation order, depth first), by their groups' paths in a weights file;",
        "written by tests/keras_hub_lora_fixtures.py from the fixtures' backbones, read by :mod:`attnzoo.keras.lora`.",
        '"""',
        "",
        "ORDER: dict[str, tuple[str, ...]] = {",
    ]
    for cls in sorted(found):
        lines.append(f"    {cls!r}: (")
        lines += [f"        {path!r}," for path in merged(found[cls])]
        lines.append("    ),")
    lines.append("}")
    target = os.path.join(os.path.dirname(HERE), "..", "..", "attnzoo", "keras", "lora_order.py")
    with open(target, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {os.path.normpath(target)}: {len(found)} classes")


def main() -> int:
    for seed, (name, targets) in enumerate(FAMILIES.items()):
        make(name, targets, 1000 + seed)
    write_orders()
    return 0


if __name__ == "__main__":
    sys.exit(main())
