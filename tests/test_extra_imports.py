"""An optional import that fails says why (attnzoo.errors.extra_import_message, at every extra's import).

A package that is absent gets the extra's pip command; a package that is there but raises while it is
imported (the user's case: a torchvision built for another torch, so transformers' lazy import of
``AttentionInterface`` fails with ``RuntimeError: operator torchvision::nms does not exist``) gets that
exception's type and first line and the module that raised it, and no claim that pip would fix it. The
stand-ins are modules served by a finder placed first on ``sys.meta_path``: ``brokenvision`` raises the
RuntimeError when imported, and the extra's package (or the transformers submodule that defines
``AttentionInterface``) imports it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path

import pytest

from attnzoo.cli.common import UsageError
from attnzoo.errors import ConfigError, DataError, ExportError, WeightsError

REASON = "operator torchvision::nms does not exist"
BROKEN = f"raise RuntimeError({REASON!r} + '\\n(a second line the message leaves out)')"


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves each named module from a line of source (compiled as a module, as a real file would be)."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in self.sources else None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        exec(compile(self.sources[module.__name__], f"<stand-in {module.__name__}>", "exec"), module.__dict__)


def _serve(monkeypatch, sources: dict[str, str | None], forget: tuple[str, ...] = ()) -> None:
    """Forget the named modules (their submodules and ``forget``'s too) for this test; serve each from its
    source, or make it absent (``None``: Python's own "import halted" ModuleNotFoundError, whose name is the
    module's)."""
    for name in list(sys.modules):
        if any(name == s or name.startswith(s + ".") for s in (*sources, *forget, "brokenvision")):
            monkeypatch.delitem(sys.modules, name)
    for name, source in sources.items():
        if source is None:
            monkeypatch.setitem(sys.modules, name, None)
    served = {n: s for n, s in sources.items() if s is not None}
    monkeypatch.setattr(sys, "meta_path", [_StandIns({**served, "brokenvision": BROKEN}), *sys.meta_path])


def _pyplot():
    from attnzoo.io.figures import pyplot

    pyplot()


def _hub():
    from attnzoo.io.sources import hub_url

    hub_url("org/repo", "model.safetensors")


def _parquet(tmp_path: Path):
    from attnzoo.train.files import read_table

    (tmp_path / "rows.parquet").write_bytes(b"PAR1")
    read_table(tmp_path / "rows.parquet", ["text"])


def _onnx():
    import attnzoo.interop.export as export

    export._onnx_program(None, None, (), None)  # the import comes before anything is read


def _onnxruntime(tmp_path: Path):
    from attnzoo.interop.export_check import onnx_runner

    onnx_runner(tmp_path / "model.onnx", None)


def _h5py(tmp_path: Path):
    from attnzoo.keras.files import read_keras_model

    (tmp_path / "model.h5").write_bytes(b"\x89HDF\r\n\x1a\n")  # reading any .h5 imports h5py first
    read_keras_model(tmp_path / "model.h5")


def _keras_check():
    from attnzoo.keras.check import _import_keras

    _import_keras()


def _train_cli():
    from attnzoo.cli.verbs.train import _require_train_extra

    _require_train_extra(baseline=False)  # tqdm only (scikit-learn's case adds --no-baseline to the message)


# (the package made absent or broken, the call that imports it, the error it raises, the extra it names)
SITES = {
    "h5py": (_h5py, WeightsError, "keras"),
    "keras": (lambda tmp: _keras_check(), WeightsError, "keras-check"),
    "tqdm": (lambda tmp: _train_cli(), UsageError, "train"),
    "matplotlib": (lambda tmp: _pyplot(), ConfigError, "train"),
    "huggingface_hub": (lambda tmp: _hub(), ConfigError, "hub"),
    "pyarrow": (_parquet, DataError, "parquet"),
    "onnx": (lambda tmp: _onnx(), ExportError, "export"),
    "onnxruntime": (_onnxruntime, ExportError, "export"),
}


@pytest.mark.parametrize("package", sorted(SITES))
def test_an_extra_that_fails_to_import_says_why(monkeypatch, tmp_path, package):
    call, error, extra = SITES[package]
    _serve(monkeypatch, {package: "import brokenvision"})
    with pytest.raises(error) as caught:
        call(tmp_path)
    message = str(caught.value)
    assert f"RuntimeError: {REASON} (raised while importing brokenvision)" in message, message
    assert "second line" not in message and "does not fix it" in message


@pytest.mark.parametrize("package", sorted(SITES))
def test_an_absent_extra_gets_its_pip_command(monkeypatch, tmp_path, package):
    call, error, extra = SITES[package]
    _serve(monkeypatch, {package: None})
    with pytest.raises(error) as caught:
        call(tmp_path)
    message = str(caught.value)
    assert message.endswith(f": pip install 'attnzoo[{extra}]'") and "failed to import" not in message, message


def test_transformers_lazy_import_failure_names_the_cause(monkeypatch):
    """The user's case: transformers is installed, the module behind ``AttentionInterface`` fails to import,
    and transformers' lazy module wraps that in "Could not import module 'AttentionInterface'"."""
    transformers = pytest.importorskip("transformers")
    home = transformers._class_to_module["AttentionInterface"]  # the submodule transformers imports lazily
    for name in ("AttentionInterface", "AttentionMaskInterface"):
        monkeypatch.delattr(transformers, name, raising=False)  # the lazy module caches what it imported
    _serve(monkeypatch, {f"transformers.{home}": "import brokenvision"}, forget=("attnzoo.integrations.transformers",))
    with pytest.raises(ImportError) as caught:
        importlib.import_module("attnzoo.integrations.transformers")
    message = str(caught.value)
    assert message.startswith("attnzoo.integrations.transformers needs transformers>=5, which is installed")
    assert f"RuntimeError: {REASON} (raised while importing brokenvision)" in message, message
    assert "Could not import module" not in message  # the wrapper's words, which blame the wrong thing


def test_transformers_too_old_keeps_the_pip_command(monkeypatch):
    """A transformers without ``AttentionInterface`` (4.x): "cannot import name", and the pip command."""
    _serve(monkeypatch, {"transformers": "__version__ = '4.40.0'"}, forget=("attnzoo.integrations.transformers",))
    with pytest.raises(ImportError) as caught:
        importlib.import_module("attnzoo.integrations.transformers")
    message = str(caught.value)
    assert "cannot import name 'AttentionInterface'" in message, message
    assert message.endswith(": pip install 'attnzoo[transformers]'")


def test_a_run_without_scikit_learn_says_why_its_baseline_is_skipped(monkeypatch, capsys):
    from attnzoo.train.trainer import _have_sklearn

    _serve(monkeypatch, {"sklearn": None})
    assert _have_sklearn(verbose=True) is False
    said = capsys.readouterr().out.strip()
    assert said == "baseline skipped: the TF-IDF baseline needs scikit-learn: pip install 'attnzoo[train]'", said
    _serve(monkeypatch, {"sklearn": "import brokenvision"})
    assert _have_sklearn(verbose=True) is False
    assert f"RuntimeError: {REASON} (raised while importing brokenvision)" in capsys.readouterr().out
