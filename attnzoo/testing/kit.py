"""``check_model``: run the conformance properties on one variant, built-in, third-party or not registered."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from attnzoo.core.spec import thaw
from attnzoo.errors import AttnzooError, PropertyTimeout
from attnzoo.io.folders import CONFIG_FILE, read_folder
from attnzoo.testing.conventions import get_convention
from attnzoo.testing.properties import FAST, PROPERTIES, SLOW, Failure, NotApplicable, Subject
from attnzoo.testing.report import EXEMPT, FAILED, PASSED, SKIPPED, Report, Result

__all__ = ["check_model", "check_property", "property_names", "property_time_limit", "PropertyTimeout"]


def property_names(*, slow: bool = False) -> tuple[str, ...]:
    """The properties in the order the kit runs them (the slow tier last, when asked for)."""
    return FAST + (SLOW if slow else ())


def _seeded(build: Callable[..., Any]) -> Callable[..., Any]:
    """Build with fixed random weights, leaving the caller's random state as it was; eval mode."""

    def run(**kwargs: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = build(**kwargs)
        return model.eval() if isinstance(model, torch.nn.Module) else model

    return run


def saved_folder(value: Any) -> Path | None:
    """``value`` as the path of a folder written by ``attnzoo.save`` (it holds a config.yaml), else None. A
    folder of that name wins over a registered name: ``attnzoo check runs/model`` checks the folder."""
    if isinstance(value, (str, os.PathLike)) and str(value):
        path = Path(value)
        if (path / CONFIG_FILE).is_file():
            return path
    return None


def _subject(
    name_or_factory: str | os.PathLike | Callable[..., Any],
    config: Mapping[str, Any] | None,
    convention: str | None,
    exempt: Mapping[str, str] | None,
) -> tuple[Subject | None, dict[str, str], Result | None]:
    """The subject to check, its exemptions, and a failed ``card`` result if it cannot be set up."""
    import attnzoo

    folder = saved_folder(name_or_factory)
    if folder is not None:  # a saved model, checked with its own weights and config
        record = read_folder(folder)
        spec = attnzoo.model_info(record["name"])
        shown, conv_name = str(folder), convention or spec.convention
        example = dict(record.get("config") or {})
        exemptions = {**dict(spec.exempt), **dict(exempt or {})}

        def build(dtype=None, device=None):
            return attnzoo.load(folder, dtype=dtype, device=device)

        names = (shown, spec.name)
        registered, kind = True, spec.kind
    elif isinstance(name_or_factory, str):
        spec = attnzoo.model_info(name_or_factory)
        shown = name_or_factory
        conv_name = convention or spec.convention
        example = thaw(spec.example) if config is None else dict(config)
        exemptions = {**dict(spec.exempt), **dict(exempt or {})}

        def build(dtype=None, device=None):
            return attnzoo.create(name_or_factory, config=example, dtype=dtype, device=device)

        names = (shown, spec.name)
        registered, kind = True, spec.kind
    else:
        factory = name_or_factory
        if not callable(factory):
            raise TypeError(
                f"check_model takes a registered name, a saved folder or a factory, got {name_or_factory!r}"
            )
        shown = getattr(factory, "__name__", repr(factory))
        conv_name = convention or getattr(factory, "convention", "")
        example = dict(config or {})
        exemptions = dict(exempt or {})

        def build(dtype=None, device=None):
            if device is not None and str(device) == "meta":
                with torch.device("meta"):
                    model = factory(**example)
            else:
                model = factory(**example)
            return model.to(dtype=dtype) if dtype is not None else model

        names = (shown,)
        registered, kind = False, "layer"
    unknown = sorted(set(exemptions) - set(PROPERTIES))
    if unknown:
        return (
            None,
            exemptions,
            Result(shown, "card", FAILED, f"exempt names unknown properties {unknown}; known: {', '.join(PROPERTIES)}"),
        )
    if not conv_name:
        return (
            None,
            exemptions,
            Result(
                shown,
                "card",
                FAILED,
                "no calling convention: add `convention:` to the "
                "card (see attnzoo.testing.conventions) so the kit can build its inputs",
            ),
        )
    try:
        conv = get_convention(conv_name).for_config(example)
    except KeyError as e:
        return None, exemptions, Result(shown, "card", FAILED, str(e.args[0]))
    subject = Subject(shown, names, conv, _seeded(build), kind=kind, registered=registered, seq=conv.seq)
    return subject, exemptions, None


def _add_model_names(subject: Subject) -> None:
    """Error messages may name the variant by its module's ``name`` or class name too."""
    try:
        model = subject.build()
    except Exception:  # noqa: BLE001 - reported by the builds property
        return
    extra = [getattr(model, "name", None), type(model).__name__]
    subject.names = tuple(dict.fromkeys([*subject.names, *[n for n in extra if isinstance(n, str) and n]]))


PROPERTY_TIMEOUT = 300.0  # seconds one property may take (torch.compile's is the slowest); ATTNZOO_CHECK_TIMEOUT


def property_time_limit() -> float:
    import os

    try:
        return float(os.environ.get("ATTNZOO_CHECK_TIMEOUT", PROPERTY_TIMEOUT))
    except ValueError:
        return PROPERTY_TIMEOUT


@contextmanager
def _isolated(limit: float):
    """torch's global state as it was before the property (default dtype and device, threads, grad mode,
    deterministic algorithms, the random generators), and an alarm after ``limit`` seconds where one can
    be set (the main thread, on POSIX): a variant that changes them, or hangs, cannot change what the
    next property or variant sees."""
    import signal
    import threading

    dtype, threads, grad = torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled()
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else None
    deterministic = torch.are_deterministic_algorithms_enabled()
    alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread() and limit > 0

    def expired(signum, frame):  # noqa: ANN001 - signal's signature
        raise PropertyTimeout(f"ran past its time limit of {limit:g} s (ATTNZOO_CHECK_TIMEOUT)")

    previous = signal.signal(signal.SIGALRM, expired) if alarm else None
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []):
            yield
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        torch.set_default_dtype(dtype)
        if device is not None:
            torch.set_default_device(device if str(device) != "cpu" else None)
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        torch.use_deterministic_algorithms(deterministic)


def check_property(subject: Subject, prop: str) -> Result:
    """Run one property on a prepared subject, isolated (see :func:`_isolated`)."""
    start = time.perf_counter()
    try:
        with _isolated(property_time_limit()):
            PROPERTIES[prop].check(subject)
    except Failure as e:
        return Result(subject.name, prop, FAILED, str(e), time.perf_counter() - start)
    except NotApplicable as e:
        return Result(subject.name, prop, SKIPPED, str(e), time.perf_counter() - start)
    except PropertyTimeout as e:
        return Result(subject.name, prop, FAILED, str(e), time.perf_counter() - start)
    except SystemExit as e:  # sys.exit inside a variant must not end the check as a success
        return Result(subject.name, prop, FAILED, f"called sys.exit({e.code!r})", time.perf_counter() - start)
    except (AttnzooError, Exception) as e:  # noqa: BLE001 - a crash is a failure with its reason
        message = str(e).splitlines()[0] if str(e) else ""
        return Result(
            subject.name, prop, FAILED, f"raised {type(e).__name__}: {message[:300]}", time.perf_counter() - start
        )
    return Result(subject.name, prop, PASSED, "", time.perf_counter() - start)


def check_model(
    name_or_factory: str | os.PathLike | Callable[..., Any],
    config: Mapping[str, Any] | None = None,
    *,
    skip: Iterable[str] = (),
    only: Iterable[str] | None = None,
    slow: bool = False,
    convention: str | None = None,
    exempt: Mapping[str, str] | None = None,
    on_property: Callable[[str], None] | None = None,
) -> Report:
    """Run the conformance properties on a variant and return a :class:`Report`.

    Args:
        name_or_factory: a registered name (``"labelwise"``, ``"my_plugin:my_layer"``), a folder written
            by ``attnzoo.save`` (checked with its own config and weights: a converted Keras model, a
            trained run) or a factory (a class or function that builds the module from ``config``).
        config: the config to build it with; default: the card's ``example``.
        skip: properties not to run (reported as skipped).
        only: run just these properties (``builds`` always runs first).
        slow: include the slow tier (``compile``).
        convention: the calling convention, for a factory (a registered name's card says it).
        exempt: property -> reason, added to the card's ``exempt``.
        on_property: called with each property's name as it starts (``attnzoo check`` reports progress).

    A property that the card exempts is not run and reported as exempt with the card's reason. When the
    variant does not build, every other property is skipped.
    """
    subject, exemptions, card_problem = _subject(name_or_factory, config, convention, exempt)
    shown = (
        subject.name
        if subject
        else (name_or_factory if isinstance(name_or_factory, str) else getattr(name_or_factory, "__name__", "variant"))
    )
    report = Report(shown, subject.convention.name if subject else "")
    if card_problem is not None:
        report.results.append(card_problem)
        return report
    wanted = list(property_names(slow=slow))
    if only is not None:
        chosen = set(only)
        unknown = chosen - set(PROPERTIES)
        if unknown:
            raise ValueError(f"unknown properties {sorted(unknown)}; known: {', '.join(PROPERTIES)}")
        wanted = [p for p in PROPERTIES if p in chosen or p == "builds"]
    skipped = set(skip)
    try:
        with _isolated(property_time_limit()):
            _add_model_names(subject)
    except (SystemExit, PropertyTimeout):  # reported by the builds property
        pass
    built = True
    for prop in wanted:
        if prop in exemptions:
            report.results.append(Result(shown, prop, EXEMPT, exemptions[prop]))
        elif prop in skipped:
            report.results.append(Result(shown, prop, SKIPPED, "skipped by the caller"))
        elif not built:
            report.results.append(Result(shown, prop, SKIPPED, "it does not build"))
        else:
            if on_property is not None:
                on_property(prop)
            result = check_property(subject, prop)
            report.results.append(result)
            built = not (prop == "builds" and result.failed)
    return report
