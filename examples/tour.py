"""A tour of attnzoo on its built-in cards: the main job, end to end.

    python examples/tour.py

1. lists the registry (reading cards only: torch is not imported yet);
2. builds every built-in layer from its card and pushes a padded batch through it, checking that the
   padding changes nothing and that an empty sequence attends to nothing;
3. loads each pretrained model (sha256 checked) and runs it on a few inputs;
4. saves a model and loads it back.
"""

from __future__ import annotations

import sys
import tempfile

import attnzoo


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> int:
    section("the registry (cards only, torch not imported)")
    names = attnzoo.list_models(provider="attnzoo")
    layers = [n for n in names if attnzoo.model_info(n).kind == "layer"]
    models = [n for n in names if attnzoo.model_info(n).kind == "model"]
    print(f"{len(layers)} layers: {', '.join(layers)}")
    print(f"{len(models)} models: {', '.join(models)}")
    print(f"pretrained: {', '.join(attnzoo.list_models(pretrained=True)) or 'none'}")
    print(f"torch imported so far: {'torch' in sys.modules}")

    import torch

    section("every layer from its card, on a padded batch")
    # each card names its calling convention and a small example config; the inputs come from there
    from attnzoo.conventions import get_convention, sample_inputs

    torch.manual_seed(0)
    for name in layers:
        spec = attnzoo.model_info(name)
        layer = attnzoo.create(name, config=dict(spec.example)).eval()
        sample = sample_inputs(layer, get_convention(spec.convention), batch=2, seq=9)
        args, kwargs = sample.call_arguments()
        with torch.no_grad():
            out = layer(*args, **kwargs)
        first = out[0] if isinstance(out, tuple) else out
        shapes = " -> ".join(
            [
                ", ".join(str(list(a.shape)) for a in args),
                ", ".join(str(list(o.shape)) for o in (out if isinstance(out, tuple) else (out,))),
            ]
        )
        print(f"  {name:<18} {spec.convention:<20} {shapes:<44} finite={bool(torch.isfinite(first).all())}")

    x = torch.randn(2, 6, 8)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0] * 6], dtype=torch.bool)  # the second text is empty
    layer = attnzoo.create("labelwise", num_labels=4)
    logits, weights = layer(x, mask, return_attention=True)
    garbage = x.clone()
    garbage[0, 4:] = 1e4
    print(
        f"  labelwise: padding ignored: {torch.allclose(layer(garbage, mask)[0], logits[0])}; "
        f"empty text attends to nothing: {bool((weights[1] == 0).all())}"
    )

    section("pretrained models (sha256 checked on every load)")
    samples = {
        "multilabel": "a large wild animal of the cat family with a striped coat",
        "multiclass": "a person who writes books",
        "g2p": "attention",
    }
    for name in attnzoo.list_models(pretrained=True):
        model = attnzoo.create(name, pretrained=True)
        meta = model.attnzoo_metadata
        text = samples[meta["output"]]
        result = attnzoo.predict(model, text, top=3)
        shown = (
            " ".join(result.phonemes)
            if result.output == "g2p"
            else ", ".join(f"{label.name} {label.probability:.2f}" for label in result.labels)
        )
        print(f"  {name}: {text!r} -> {shown}")
        print(f"    metrics on its test split: {dict(attnzoo.model_info(name).weights[meta['tag']].metrics)}")

    section("save and load")
    with tempfile.TemporaryDirectory() as tmp:
        model = attnzoo.create("laat", num_labels=5, attention_size=16, hidden_size=8)
        folder = attnzoo.save(model, f"{tmp}/laat")
        again = attnzoo.load(folder)
        print(
            f"  saved {sorted(p.name for p in folder.iterdir())}; reloaded outputs equal: "
            f"{torch.equal(again(x, mask), model(x, mask))}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
