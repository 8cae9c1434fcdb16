"""The hooks. attnzoo imports this module when it lists models, so it must not import torch:
the layer lives in layers.py and is named by a "module:attr" string that only create() imports."""

from pathlib import Path

from attnzoo import hookimpl

CARDS = Path(__file__).parent / "cards"
DEVICE_PREFIX = "example"


@hookimpl
def attnzoo_register_models(register):
    register("gated_pool", config=str(CARDS / "gated_pool.yaml"))


@hookimpl
def attnzoo_register_keras_layers(register):
    # called when a Keras model is converted; torch is imported by then, so the converter may need it
    from .keras_layers import convert_label_wise

    register("attnzoo_example>LabelWiseAttention", convert_label_wise)


@hookimpl
def attnzoo_resolve_device(device):
    # claim our own strings; returning None leaves every other string to the next plugin
    if isinstance(device, str) and device.split(":", 1)[0] == DEVICE_PREFIX:
        return device
    return None


@hookimpl
def attnzoo_place_model(model, device, dtype):
    if not (isinstance(device, str) and device.split(":", 1)[0] == DEVICE_PREFIX):
        return None
    # a real accelerator plugin would move the model to its device here; this one stays on the CPU
    # and records where it was asked to go, so that users (and tests) can see the hook ran
    model = model.to(device="cpu", dtype=dtype)
    model.placed_on = device
    return model


@hookimpl
def attnzoo_register_commands(register):
    # `attnzoo example-devices`: a verb of the plugin's own, next to the built-in ones
    register("example-devices", show_devices, help="place gated_pool on example:N devices", arguments=device_arguments)


def device_arguments(parser):
    parser.add_argument("--count", type=int, default=2, help="how many example:N devices to try")
    parser.add_argument("--json", action="store_true")


def show_devices(args):
    import json

    import attnzoo  # torch comes with create(); the verb imports it only when it runs

    placed = {
        f"{DEVICE_PREFIX}:{n}": attnzoo.create(
            "example:gated_pool", hidden_size=8, device=f"{DEVICE_PREFIX}:{n}"
        ).placed_on
        for n in range(args.count)
    }
    if args.json:
        print(json.dumps(placed))
    else:
        for asked, where in placed.items():
            print(f"{asked}: placed by the example plugin ({where})")
    return 0
