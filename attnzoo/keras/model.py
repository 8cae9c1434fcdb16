"""``KerasModel`` (registered as ``keras_model``): a converted Keras model, run as the PyTorch module its
graph is written as.

The whole model is its config, ``graph``, plain data that ``attnzoo.save`` writes to config.yaml and
``attnzoo.load`` reads back, with no Keras installed::

    graph = {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs":  [{"id": "ids", "name": "ids", "shape": [None, None], "dtype": "int32", "vocab": 50}],
        "layers":  {"embedding": {"op": "embedding", "input_dim": 50, ...}, ...},   # module key -> node
        "calls":   [{"id": "embedding", "layer": "embedding", "args": [{"ref": ["ids", 0]}], "kwargs": {}},
                    ...],                                 # in order; "layer": null passes tensors on
        "outputs": [["dense", 0]],                        # (call id, output index), Keras's output order
    }

Each call's ``args`` and ``kwargs`` keep the Keras call's structure with ``{"ref": [call, index]}``
where a tensor goes. Every tensor travels with its Keras mask (bool [batch, time], True = keep, or
None), which the layers make, use and pass on as Keras does (:mod:`attnzoo.keras.masks` holds the rules);
an explicit ``mask`` argument of a call (keras 3 records them) takes the place of the implicit one.

One plan, printed and run: the model writes its graph once as a PyTorch module
(:func:`attnzoo.keras.emit.emit`: torch's own layers where torch has the computation, attnzoo's node
classes where Keras's semantics need them, straight-line ``forward``), compiles it
(:mod:`attnzoo.keras.compiled`) and holds that module's layers. ``forward`` checks the inputs and calls the
compiled ``forward``, so ``model.code`` (what ``to_source()`` returns) is the code that runs, and a
traceback through the model shows its lines.

``convert_keras_model`` and ``attnzoo.load`` build the model on the meta device and assign its weights (every
tensor a node holds is in its weights: :mod:`attnzoo.keras.materialised`); built otherwise (``attnzoo.create``
without weights) its layers hold fresh initial values. The state dict is the emitted module's, so its
``load_state_dict`` takes a saved folder's tensors as they are: the layers sit under ``layers.<key>``, each
keyed as the class the module declares keys it. Where that is a torch layer whose keys differ from its node's,
one map per node class says how (:meth:`Node.torch_key <attnzoo.keras.nodes.Node.torch_key>`): a ``Recurrent``
(Keras's LSTM, GRU) as ``nn.LSTM`` / ``nn.GRU``, ``rnn.weight_ih_l0`` -> ``weight_ih_l0``; a ``Bidirectional``
as one bidirectional ``nn.LSTM``, ``forward_layer.rnn.weight_ih_l0`` -> ``weight_ih_l0`` and
``backward_layer.rnn.weight_ih_l0`` -> ``weight_ih_l0_reverse`` (the same for ``weight_hh``, ``bias_ih``,
``bias_hh``); every other node's keys are its torch layer's (``nn.Linear``'s ``weight``, ``bias``). The model
applies the map (``node_keys``, :meth:`KerasModel.convert_layout`) when it is built, and, as a
``load_state_dict`` pre-hook and in ``attnzoo.load``, to the tensors it is given: a folder saved while the
layer was its node (before attnzoo wrote it as torch) loads, renamed, and so does the other way round. A key
under such a layer that neither form has is a ``WeightsError``, never dropped. An LSTM's second bias
(``bias_hh_l0``, zero: Keras's LSTM has one) is a buffer in both forms, so training trains Keras's variables.

``forward`` takes the model's inputs as Keras names them (:mod:`attnzoo.keras.inputs`): by keyword
(``model(token_ids=ids, padding_mask=mask)``), as the dict Keras takes (``model({"token_ids": ids, ...})``),
or positionally in Keras's flat order (``model.inputs``: a dict's entries by sorted key), mixed as Python
binds a call. Integer tensors or numpy arrays for integer inputs (token ids; a padding mask also as
bools, cast as Keras casts them), floating ones for the others, a list of str for a string input (the
texts a TextVectorization inside the model reads), any batch size, and any length on an axis Keras left
open; a bool tensor for a ``dtype="bool"`` input (a mask). Ids outside the table they index and a padding
mask of other values than 0 and 1 are refused, naming the input. A model of nested lists also takes them
nested. It returns one tensor, a tuple in the Keras model's output order, or the dict (nested lists as
nested tuples) Keras returns. ``train()`` is Keras's ``training=True``, ``eval()`` its inference.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import attnzoo.keras.converters  # noqa: F401 - defines every node class
from attnzoo.errors import WeightsError
from attnzoo.keras.compiled import CompiledPort, compile_port
from attnzoo.keras.converters.text import string_input
from attnzoo.keras.emit import Emitted, emit
from attnzoo.keras.graph_check import GRAPH_FORMAT, validate_graph
from attnzoo.keras.image_converter import CarriesPreprocessing
from attnzoo.keras.inputs import ValueRule, bind, check_values, input_names, value_rules
from attnzoo.keras.layer_keys import module_keys
from attnzoo.keras.masks import call_masks
from attnzoo.keras.materialised import refuse_meta_left
from attnzoo.keras.nodes import INTEGER_DTYPES, Node, build_node
from attnzoo.keras.policy import set_compute_dtypes
from attnzoo.keras.torch_layers import KerasAugmentation
from attnzoo.layers.kv_cache import DecodingCache

__all__ = ["KerasModel", "GRAPH_FORMAT"]


class KerasModel(CarriesPreprocessing, nn.Module):
    """A Keras model converted by :func:`attnzoo.keras.convert_keras_model` (see the module docstring); a
    keras-hub model converted from a preset folder carries its tokenizer and image converter
    (:class:`~attnzoo.keras.image_converter.CarriesPreprocessing`)."""

    name = "keras_model"
    # attnzoo.load keeps the dtype the weights were saved in: the Keras file's (a bfloat16 port stays bfloat16)
    keeps_saved_dtype = True
    # whether a call reads its inputs' values to refuse ids past their table or a padding mask of other values
    # than 0 and 1 (one device sync on CUDA); a setting of the model object, like ``train()``, not saved
    checks_values = True

    def __init__(self, graph: dict[str, Any]) -> None:
        super().__init__()
        validate_graph(graph)
        self.graph = graph
        graph, original = module_keys(graph)
        self.keras_names = {
            key: _keras(spec).get("name", original.get(key, key)) for key, spec in graph["layers"].items()
        }
        self.keras_classes = {key: _keras(spec).get("class", spec["op"]) for key, spec in graph["layers"].items()}
        nodes = {
            key: build_node(_node_spec(spec), f"layer {str(self.keras_names[key])[:80]!r}")
            for key, spec in graph["layers"].items()
        }
        self.inputs_spec = [dict(i) for i in graph["inputs"]]
        self.calls = [dict(c) for c in graph["calls"]]
        self.outputs = [tuple(o) for o in graph["outputs"]]
        self.keras3 = not str(graph.get("keras_version", "3")).strip().startswith(("1", "2"))
        self.input_structure = graph.get("input_structure")
        self.output_structure = graph.get("output_structure")
        # each call's mask rules (keras/masks.py), read off the graph once; the emitted forward follows them
        self.mask_plans = {
            call["id"]: call_masks(call, None if call["layer"] is None else nodes[call["layer"]], self.keras3)
            for call in self.calls
        }
        self.emitted: Emitted = emit(graph, self.mask_plans)
        self.layers, self.node_keys = _adopted(self._port.cls, nodes)
        self._register_load_state_dict_pre_hook(self._layout_pre_hook)
        self.register_load_state_dict_post_hook(refuse_meta_left)
        dtypes = {k: _keras(s)["compute_dtype"] for k, s in graph["layers"].items() if "compute_dtype" in _keras(s)}
        set_compute_dtypes(self.layers, dtypes)  # a mixed-precision policy computed as Keras does, when asked
        self.by_policy = bool(dtypes)  # then the inputs stay as Keras declared them, each layer casts its own
        for key, spec in graph["layers"].items():
            if _keras(spec).get("trainable") is False:  # Keras's trainable: false stays frozen
                layer = self.layers[key]
                layer.trainable = False
                layer.requires_grad_(False)

    # -- state-dict keys --------------------------------------------------------------------------------
    def convert_layout(self, state_dict: dict[str, Any], prefix: str) -> None:
        """Rename, in place, the keys of a layer's other form to those it holds (``node_keys``, see the
        class docstring): ``layers.lstm.rnn.weight_ih_l0`` -> ``layers.lstm.weight_ih_l0``, as a folder
        saved before that LSTM was torch's holds them (and back, for a layer the emitted module keeps as
        its node); ``load_state_dict`` (a pre-hook) and ``attnzoo.load`` apply it. A key under such a layer
        that is neither of its forms, or a tensor given under both, is a ``WeightsError``: nothing is
        dropped. A node's constant that the emitted code writes as a literal (:meth:`Node.constants
        <attnzoo.keras.nodes.Node.constants>`, such as Rescaling's ``scale``), given as a folder saved before
        held it, is dropped where it equals the literal and a ``WeightsError`` where it does not."""
        self._drop_constants(state_dict, prefix)
        if not self.node_keys:  # every layer holds its node's keys: nothing to rename or to tell apart
            return
        for old, new in self.node_keys.items():
            if prefix + old in state_dict:
                if prefix + new in state_dict:
                    raise WeightsError(f"keras_model: the weights hold both {old!r} and {new!r}, one tensor twice")
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        layers = tuple({".".join(new.split(".")[:2]) + "." for new in self.node_keys.values()})  # "layers.<key>."
        known = [k for k in self.state_dict(keep_vars=True) if k.startswith(layers)]
        unknown = [k for k in state_dict if k.startswith(prefix) and k[len(prefix) :].startswith(layers)]
        unknown = [k for k in unknown if k[len(prefix) :] not in set(known)]
        if unknown:
            raise WeightsError(
                f"keras_model: the weights hold {', '.join(map(repr, unknown[:4]))}, which is no key of the model's "
                f"layers nor of their other form ({', '.join(known[:4])} ...); nothing was loaded"
            )

    def _drop_constants(self, state_dict: dict[str, Any], prefix: str) -> None:
        for key, layer in self.layers.items():
            if not isinstance(layer, Node):
                continue
            for name, held in layer.constants().items():
                given = state_dict.get(f"{prefix}layers.{key}.{name}")
                if given is None:
                    continue
                same = isinstance(given, torch.Tensor) and given.shape == held.shape and bool((given == held).all())
                if not same:
                    raise WeightsError(
                        f"keras_model: the weights hold 'layers.{key}.{name}' = {given!r}, but the model's code "
                        f"writes that constant as {held.tolist()!r} (from the layer's config); convert the "
                        "Keras file again, or give the config that holds this value; nothing was loaded"
                    )
                del state_dict[f"{prefix}layers.{key}.{name}"]

    def _layout_pre_hook(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        self.convert_layout(state_dict, prefix)

    @property
    def _port(self) -> CompiledPort:
        return compile_port(self.emitted.source, self.emitted.class_name)

    @property
    def code(self) -> str:
        """The PyTorch module this model is, as text: its ``forward`` is the function that runs (what
        ``to_source()`` returns, and ``inspect.getsource(model.compiled_forward)`` shows)."""
        return self.emitted.source

    @property
    def compiled_forward(self) -> Any:
        """The emitted module's ``forward`` as compiled, which :meth:`forward` calls with this model as
        ``self`` once its inputs are checked."""
        return self._port.forward

    def augmentation(self, enabled: bool = True) -> KerasModel:
        """Whether ``train()`` applies the model's Keras random augmentation layers (RandomFlip,
        RandomRotation, RandomZoom, ...; on after conversion, as in Keras's ``fit``). ``False`` makes them the
        identity in training too, for data augmented before the model; ``eval()`` never augments. A setting
        of this model object, like ``train()``: not saved. Returns the model."""
        for module in self.modules():
            if isinstance(module, KerasAugmentation):
                module.augment = bool(enabled)
        return self

    @property
    def input_names(self) -> list[str]:
        """The Keras model's input names, in its order (exports name their inputs so)."""
        return [str(spec["name"]) for spec in self.inputs_spec]

    # -- inputs ---------------------------------------------------------------------------------------
    @functools.cached_property
    def _by_name(self) -> tuple[list[str], list[ValueRule | None]]:
        """The name each input goes by in a call, and the rule its values keep (:mod:`attnzoo.keras.inputs`):
        read off the graph once, on the first call."""
        return input_names(self.graph), value_rules(self.graph)

    def _reference(self) -> Tensor | None:
        # the first floating one: read lazily, as every forward asks (a CNN holds hundreds of tensors)
        return next((t for t in itertools.chain(self.parameters(), self.buffers()) if t.is_floating_point()), None)

    def _check_inputs(self, inputs: list[Any]) -> list[Tensor]:
        names, rules = self._by_name
        reference = self._reference()
        checked = []
        batch = None
        for spec, name, rule, x in zip(self.inputs_spec, names, rules, inputs, strict=True):
            shape = spec["shape"]
            if spec["dtype"] == "string":  # texts for a TextVectorization or StringLookup inside the model
                x = string_input(x, shape, name)
                if batch is not None and len(x) != batch:
                    raise ValueError(
                        f"keras_model expects every input with the same batch size, got {batch} and {len(x)}"
                    )
                batch = len(x)
                checked.append(x)
                continue
            if isinstance(x, np.ndarray) and x.dtype.kind in "biuf":  # numpy arrays, as Keras takes them
                x = torch.from_numpy(np.ascontiguousarray(x))
                x = x.to(reference.device) if reference is not None else x
            if not isinstance(x, Tensor):
                raise ValueError(
                    f"keras_model expects input {name!r} as a tensor {_shape_text(shape)}, got {type(x).__name__}"
                )
            if x.dim() != len(shape) or any(
                d is not None and d != s for d, s in zip(shape[1:], x.shape[1:], strict=False)
            ):
                raise ValueError(
                    f"keras_model expects input {name!r} of shape {_shape_text(shape)}, got {list(x.shape)}"
                )
            x = _typed(spec, rule, name, x)
            if reference is not None and x.device != reference.device:
                raise ValueError(
                    f"keras_model expects input {name!r} on {reference.device} (where its weights are), got "
                    f"{x.device}; move one of them with .to(...)"
                )
            if batch is not None and x.shape[0] != batch:
                raise ValueError(
                    f"keras_model expects every input with the same batch size, got {batch} and {x.shape[0]}"
                )
            batch = x.shape[0]
            target = torch.float32 if self.by_policy else None if reference is None else reference.dtype
            if x.is_floating_point() and target is not None and x.dtype != target:
                x = x.to(target)  # Keras casts its inputs to the layers' dtype as well
            checked.append(x)
        return checked

    # -- running ----------------------------------------------------------------------------------------
    def forward(self, *inputs: Any, **named: Any) -> Any:
        """The Keras model's call: its inputs by name, as the dict Keras takes, or in Keras's flat order;
        ``cache=`` a :class:`~attnzoo.layers.kv_cache.DecodingCache` to decode token by token (a model whose
        layers decode: a converted keras-hub causal or encoder-decoder LM, :mod:`attnzoo.keras.decoding`)."""
        port = self._port
        cache = named.pop("cache", None) if "cache" not in self._by_name[0] else None
        arguments = self._arguments(inputs, named, decoding=cache is not None)
        return self.call_checked(arguments, port.forward, port.filename, cache=cache)

    def _arguments(self, inputs: tuple[Any, ...], named: dict[str, Any], decoding: bool = False) -> list[Any]:
        """The emitted ``forward``'s arguments, one per input in Keras's flat order: the call's inputs bound
        by name (:func:`~attnzoo.keras.inputs.bind`), checked, and their values checked (``decoding``: for a
        call given a decoding cache, which takes no padding)."""
        names, rules = self._by_name
        checked = self._check_inputs(bind(names, self.input_structure, inputs, named))
        if self.checks_values:  # (one dict is one: no order to show)
            check_values(checked, rules, names, len(inputs), decoding=decoding)
        return checked

    def _run(self, function: Any, filename: str, inputs: tuple[Any, ...], named: dict[str, Any]) -> Any:
        return self.call_checked(self._arguments(inputs, named), function, filename)

    def call_checked(
        self, arguments: list[Any], function: Any = None, filename: str | None = None, *, cache: Any = None
    ) -> Any:
        """The emitted ``forward`` (or ``function``, compiled from ``filename``) on ``arguments``, one per input
        in Keras's flat order (:attr:`input_names`), as :meth:`forward` passes them once bound and checked:
        no binding, no checks, the same errors naming the failing layer. For a caller that made the inputs
        itself and checked them once (:func:`~attnzoo.keras.decoding.generate`'s steps after the first).
        ``cache``: the decoding cache, passed on to the emitted ``forward``."""
        if function is None or filename is None:
            port = self._port
            function, filename = port.forward, port.filename
        extra = {}
        if cache is not None:
            if not self.emitted.decodes:
                raise ValueError(
                    "keras_model: cache= is for decoding token by token, and no layer of this model decodes (the "
                    "converted keras-hub causal and encoder-decoder LMs do); call it without cache"
                )
            if not isinstance(cache, DecodingCache):
                raise ValueError(
                    f"keras_model expects cache as a DecodingCache(batch_size) (attnzoo.layers.kv_cache), got "
                    f"{type(cache).__name__}"
                )
            # refused here, before any layer caches the call's tokens (a layer's refusal would come after the
            # ones before it had cached them)
            cache.check_batch(next(x.shape[0] for x in arguments if isinstance(x, Tensor)))
            extra["cache"] = cache
        try:
            with contextlib.nullcontext() if cache is None else cache.call(self):
                return function(self, *arguments, **extra)
        except (ValueError, IndexError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and not _is_shape_error(e):
                raise
            key = self._failing_layer(e, filename)
            if key is None:
                raise
            layer = self.layers[key]
            if isinstance(layer, nn.Embedding) and isinstance(e, IndexError):  # torch says "index out of range"
                raise ValueError(
                    f"keras_model: layer {self.keras_names.get(key, key)!r} (Embedding) expects input ids in "
                    f"[0, {layer.num_embeddings}), got an id outside it; pass ids below the vocabulary size"
                ) from None
            raise ValueError(
                f"keras_model: layer {self.keras_names.get(key, key)!r} ({self.keras_classes.get(key)}): "
                f"{' '.join(str(e).split())[:300]}"
            ) from None

    def _failing_layer(self, error: BaseException, filename: str) -> str | None:
        """The layer key of the call whose line of the emitted module raised ``error``, or None."""
        line = None
        trace = error.__traceback__
        while trace is not None:
            if trace.tb_frame.f_code.co_filename == filename:
                line = trace.tb_lineno
            trace = trace.tb_next
        call = self.emitted.line_calls.get(line) if line is not None else None
        layer = next((c["layer"] for c in self.calls if c["id"] == call), None)
        return layer

    def generate(
        self,
        ids: Any,
        max_new_tokens: int,
        *,
        padding_mask: Any = None,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float = 1.0,
        seed: int | torch.Generator | None = None,
        stop_token_ids: int | list[int] | None = None,
        pad_token_id: int = 0,
        use_cache: bool = True,
    ) -> Tensor:
        """A converted keras-hub causal LM's decoding (:func:`attnzoo.keras.decoding.generate`): ``ids``
        [B, T] (right-padded where ``padding_mask`` is 0; an encoder-decoder LM's: the dict of keras-hub's
        ``encoder_token_ids``, ``decoder_token_ids`` and their padding masks) -> [B, T + max_new_tokens]
        (fewer where every row chose one of ``stop_token_ids``; ``pad_token_id`` after a row's stop), greedy
        or sampled (``top_k``, ``top_p``, ``temperature``, ``seed``), each step on the layers' KV caches. Any
        other model raises a ``ConfigError`` naming the classes that decode."""
        from attnzoo.keras.decoding import generate

        options = {"padding_mask": padding_mask, "top_k": top_k, "top_p": top_p, "temperature": temperature}
        options |= {"seed": seed, "stop_token_ids": stop_token_ids, "pad_token_id": pad_token_id}
        return generate(self, ids, max_new_tokens, use_cache=use_cache, **options)

    def trace(self, *inputs: Any, **named: Any) -> dict[str, list[Any]]:
        """Every call's outputs, by call id (a layer's name for its first call), in the order they ran:
        what ``attnzoo convert-keras --check`` compares with Keras layer by layer. The emitted ``forward``
        runs, returning its variables instead of its result; an output nothing reads is None."""
        port = self._port
        variables = self._run(port.every, port.filename, inputs, named)
        # an output nothing reads is unpacked into ``_``, which every such output shares: None, not its value
        variables.pop("_", None)
        values: dict[str, list[Any]] = {}
        for spec in self.inputs_spec:
            values[spec["id"]] = [variables.get(name) for name in self.emitted.outputs[spec["id"]]]
        for call in self.calls:
            values[call["id"]] = [variables.get(name) for name in self.emitted.outputs.get(call["id"], [])]
        return values

    def to_source(self, class_name: str | None = None) -> str:
        """This model as one readable, self-contained PyTorch module (a ``class <KerasName>(nn.Module)``
        whose ``load_state_dict`` takes this model's weights as they are), the module this model runs: see
        :mod:`attnzoo.keras.emit`. Another ``class_name`` renames the class, nothing else."""
        if class_name is None:
            return self.emitted.source
        return emit(self.graph, self.mask_plans, class_name).source

    def extra_repr(self) -> str:
        inputs = ", ".join(f"{s['name']}: {_shape_text(s['shape'])} {s['dtype']}" for s in self.inputs_spec)
        return f"inputs=({inputs}), keras_version={self.graph.get('keras_version')!r}"


def _adopted(cls: type, nodes: dict[str, Node]) -> tuple[nn.ModuleDict, dict[str, str]]:
    """The layers the emitted class ``cls`` declares, holding the built ``nodes``' tensors, and the keys of
    the form each layer does not take (a node's, or its torch layer's: :meth:`Node.torch_key
    <attnzoo.keras.nodes.Node.torch_key>`) -> the key it holds, from ``layers.``, where the two differ. A node
    class it declares is the node itself; a torch layer (``nn.Linear`` for a Dense, ``nn.LSTM`` for an LSTM
    or a Bidirectional of two) takes the node's tensors under their torch keys, and
    trains what the node trains (a node's buffer, an LSTM's zero recurrent bias, stays untrained). Built on
    the meta device first, so no layer is initialised twice. A node that no call uses stays as it is, so the
    state dict holds every layer of the graph."""
    with torch.device("meta"):
        port = cls()
    layers = port.layers
    renamed: dict[str, str] = {}
    for key, node in nodes.items():
        declared = layers[key] if key in layers else None  # noqa: SIM401 - a ModuleDict has no get
        node_state = node.state_dict()  # read once: a CNN holds hundreds of nodes
        node_form = declared is None or type(declared) is type(node)
        for name in node_state:  # the form the layer does not take -> the one it takes
            old, new = (node.torch_key(name), name) if node_form else (name, node.torch_key(name))
            if old != new:
                renamed[f"layers.{key}.{old}"] = f"layers.{key}.{new}"
        if node_form:
            layers[key] = node
            continue
        state = {node.torch_key(name): tensor for name, tensor in node_state.items()}
        declared.load_state_dict(state, strict=True, assign=True)
        if isinstance(declared, nn.RNNBase):  # run by run_rnn, whose traced steps go through scan (export)
            declared.traces_any_length = True
        trains = {node.torch_key(name): p.requires_grad for name, p in node.named_parameters()}
        for name, parameter in declared.named_parameters():  # assign keeps the meta layer's flags: the node's
            parameter.requires_grad_(trains.get(name, False))
    return layers, renamed


def _typed(spec: dict[str, Any], rule: ValueRule | None, name: str, x: Tensor) -> Tensor:
    """The input ``x`` of the declared ``spec`` in the dtype the model computes with, or a ValueError: Keras's
    casts where Keras casts (float ids declared float, a bool padding mask), a refusal otherwise."""
    integer = spec["dtype"] in INTEGER_DTYPES
    mask = rule is not None and rule.kind == "padding mask"
    if spec["dtype"] == "bool":  # a mask input (True = keep), as Keras declared it
        if x.dtype != torch.bool:
            raise ValueError(f"keras_model expects input {name!r} as a bool tensor (True = keep), got {x.dtype}")
    elif integer and mask and x.dtype == torch.bool:
        x = x.to(getattr(torch, spec["dtype"], torch.int64))  # Keras casts a bool mask to its int dtype
    elif integer and x.is_floating_point() and spec.get("keras_dtype") not in (None, *INTEGER_DTYPES):
        # float ids into an Embedding, as the file declared them (a Keras 2 ``Input(shape=(T,))``):
        # Keras casts them to int32, truncating toward zero, as ``.to`` does
        x = x.to(torch.int64)
    elif integer and (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
        what = "a padding mask of 1 and 0 (ints or bools)" if mask else "integer ids"
        advice = "pass an int or bool tensor" if mask else "pass a LongTensor of token ids"
        raise ValueError(f"keras_model expects input {name!r} as {what} ({spec['dtype']}), got {x.dtype}; {advice}")
    elif not integer and not x.is_floating_point():
        raise ValueError(f"keras_model expects input {name!r} as a floating tensor ({spec['dtype']}), got {x.dtype}")
    return x


def _keras(spec: dict[str, Any]) -> dict[str, Any]:
    """A layer's Keras name and class as the graph records them (a hand-edited one may hold anything)."""
    keras = spec.get("keras")
    return keras if isinstance(keras, dict) else {}


def _node_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != "keras"}


def _shape_text(shape: list[Any]) -> str:
    return "[" + ", ".join("batch" if i == 0 else ("?" if d is None else str(d)) for i, d in enumerate(shape)) + "]"


def _is_shape_error(error: RuntimeError) -> bool:
    text = str(error)
    return any(word in text for word in ("shape", "size", "dimension", "mat1", "Expected", "expected"))
