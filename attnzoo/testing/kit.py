"""``check_model``: run the conformance properties on one variant, built-in, third-party or not registered."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch

from attnzoo.conventions import get_convention
from attnzoo.core import create, load, model_info
from attnzoo.core.spec import thaw
from attnzoo.errors import AttnzooError, ConfigError, PropertyTimeout
from attnzoo.io.folders import CONFIG_FILE, read_folder
from attnzoo.layers.modes import kept_state
from attnzoo.testing.properties import FAST, PROPERTIES, SLOW
from attnzoo.testing.report import EXEMPT, FAILED, PASSED, SKIPPED, Report, Result
from attnzoo.testing.subject import Failure, NotApplicable, Subject

__all__ = [
    "check_model",
    "check_property",
    "property_names",
    "property_time_limit",
    "PropertyTimeout",
]


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
    kept: ExitStack,
) -> tuple[Subject | None, dict[str, str], Result | None]:
    """The subject to check, its exemptions, and a failed ``card`` result if it cannot be set up. The
    modules a factory returns have their state kept in ``kept`` (see :func:`_kept_builds`)."""

    folder = saved_folder(name_or_factory)
    if folder is not None:  # a saved model, checked with its own weights and config
        record = read_folder(folder)
        spec = model_info(record["name"])
        shown, conv_name = str(folder), convention or spec.convention
        example = dict(record.get("config") or {})
        exemptions = {**dict(spec.exempt), **dict(exempt or {})}

        def build(dtype=None, device=None):
            return load(folder, dtype=dtype, device=device)

        names = (shown, spec.name)
        registered, kind = True, spec.kind
    elif isinstance(name_or_factory, str):
        spec = model_info(name_or_factory)
        shown = name_or_factory
        conv_name = convention or spec.convention
        example = thaw(spec.example) if config is None else dict(config)
        exemptions = {**dict(spec.exempt), **dict(exempt or {})}

        def build(dtype=None, device=None):
            return create(name_or_factory, config=example, dtype=dtype, device=device)

        names = (shown, spec.name)
        registered, kind = True, spec.kind
    else:
        if not callable(name_or_factory):
            raise TypeError(
                f"check_model takes a registered name, a saved folder or a factory, got {name_or_factory!r}"
            )
        shown = getattr(name_or_factory, "__name__", repr(name_or_factory))
        conv_name = convention or getattr(name_or_factory, "convention", "")
        factory = _kept_builds(name_or_factory, kept)  # it may hand out the caller's own module
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
                "card (see attnzoo.conventions) so the kit can build its inputs",
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


class _VariantInterrupt(Exception):
    """A variant raised KeyboardInterrupt itself (no Ctrl-C was pressed): a failure, not a stop."""


# what else a variant may change for the whole process: the kit restores it and fails the property
WATCHED_ENVIRONMENT = ("ATTNZOO_", "HF_HUB_OFFLINE", "HF_ENDPOINT")


class _ProcessState:
    """The process-wide state a property must leave as it found it: torch's global settings (default dtype
    and device, threads, grad mode, deterministic algorithms, anomaly detection), the working directory,
    attnzoo's environment variables and the threads that keep a process alive. ``restore()`` puts each
    back and says what had changed (threads cannot be put back: they are named)."""

    def __init__(self) -> None:
        import os
        import threading

        self.dtype, self.threads, self.grad = (
            torch.get_default_dtype(),
            torch.get_num_threads(),
            torch.is_grad_enabled(),
        )
        self.device = torch.get_default_device() if hasattr(torch, "get_default_device") else None
        self.deterministic = torch.are_deterministic_algorithms_enabled()
        self.anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        self.cwd = os.getcwd()
        self.environ = {k: v for k, v in os.environ.items() if k.startswith(WATCHED_ENVIRONMENT)}
        self.alive = set(threading.enumerate())

    def restore(self) -> list[str]:
        import os
        import threading

        changed = []
        if torch.get_default_dtype() != self.dtype:
            changed.append(f"the default dtype ({torch.get_default_dtype()})")
        torch.set_default_dtype(self.dtype)
        if self.device is not None:
            if torch.get_default_device() != self.device:
                changed.append(f"the default device ({torch.get_default_device()})")
            torch.set_default_device(self.device if str(self.device) != "cpu" else None)
        torch.set_num_threads(self.threads)  # restored, not blamed: libraries a property runs may set it
        if torch.is_grad_enabled() != self.grad:
            changed.append("grad mode")
        torch.set_grad_enabled(self.grad)
        if torch.are_deterministic_algorithms_enabled() != self.deterministic:
            changed.append("deterministic algorithms")
        torch.use_deterministic_algorithms(self.deterministic)
        if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != self.anomaly:
            changed.append("anomaly detection")
        torch.set_anomaly_enabled(*self.anomaly)
        if os.getcwd() != self.cwd:
            changed.append(f"the working directory ({os.getcwd()})")
            os.chdir(self.cwd)
        environ = {k: v for k, v in os.environ.items() if k.startswith(WATCHED_ENVIRONMENT)}
        for key in sorted(set(environ) | set(self.environ)):
            if environ.get(key) != self.environ.get(key):
                changed.append(f"{key} in os.environ")
                if key in self.environ:
                    os.environ[key] = self.environ[key]
                else:
                    del os.environ[key]
        # an executor's idle workers (torch.compile keeps a pool) are joined at exit: they cannot hang it
        running = [
            t
            for t in threading.enumerate()
            if t not in self.alive and t.is_alive() and not t.daemon and not t.name.startswith("ThreadPoolExecutor-")
        ]
        if running:  # a non-daemon thread keeps the process from ending: nothing can stop it from here
            changed.append(f"a thread still running ({', '.join(t.name for t in running[:3])}), not a daemon")
        return [f"{what} left changed (restored)" if "thread" not in what else what for what in changed]


@contextmanager
def _isolated(limit: float, changes: list[str] | None = None):
    """The process as it was before the property (see :class:`_ProcessState`; what a variant changed is
    added to ``changes``, and the random generators are forked), an alarm after ``limit`` seconds where
    one can be set (the main thread, on POSIX), and a KeyboardInterrupt that no Ctrl-C caused turned into
    :class:`_VariantInterrupt`: a variant that changes the process, hangs or raises cannot change what the
    next property or variant sees, nor end the check."""
    import signal
    import threading

    state = _ProcessState()
    main = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    alarm, pressed = main and limit > 0, []

    def expired(signum, frame):  # noqa: ANN001 - signal's signature
        raise PropertyTimeout(f"ran past its time limit of {limit:g} s (ATTNZOO_CHECK_TIMEOUT)")

    def interrupted(signum, frame):  # noqa: ANN001 - a real Ctrl-C still stops the check
        pressed.append(True)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, expired) if alarm else None
    previous_int = signal.signal(signal.SIGINT, interrupted) if main else None
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []):
            yield
    except KeyboardInterrupt:
        if pressed or not main:
            raise
        raise _VariantInterrupt("raised KeyboardInterrupt itself (no Ctrl-C was pressed)") from None
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if main:
            signal.signal(signal.SIGINT, previous_int)
        found = state.restore()
        if changes is not None:
            changes.extend(found)


def check_property(subject: Subject, prop: str) -> Result:
    """Run one property on a prepared subject, isolated (see :func:`_isolated`); a property that leaves the
    process changed fails, whatever it found, and says what it changed."""
    return _checked(subject, prop)[0]


def _checked(subject: Subject, prop: str) -> tuple[Result, bool]:
    """The property's result, and whether the property itself held (before any change it left behind)."""
    start = time.perf_counter()
    changes: list[str] = []
    status, reason = _run_property(subject, prop, changes)
    held = status == PASSED
    if changes:
        status, reason = FAILED, "; ".join([*([reason] if reason else []), *changes])
    return Result(subject.name, prop, status, reason, time.perf_counter() - start), held


def _run_property(subject: Subject, prop: str, changes: list[str]) -> tuple[str, str]:
    try:
        with _isolated(property_time_limit(), changes):
            PROPERTIES[prop].check(subject)
    except Failure as e:
        return FAILED, str(e)
    except NotApplicable as e:
        return SKIPPED, str(e)
    except (PropertyTimeout, _VariantInterrupt) as e:
        return FAILED, str(e)
    except SystemExit as e:  # sys.exit inside a variant must not end the check as a success
        return FAILED, f"called sys.exit({e.code!r})"
    except (AttnzooError, Exception) as e:  # noqa: BLE001 - a crash is a failure with its reason
        message = str(e).splitlines()[0] if str(e) else ""
        return FAILED, f"raised {type(e).__name__}: {message[:300]}"
    return PASSED, ""


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
    kept = ExitStack()
    subject, exemptions, card_problem = _subject(name_or_factory, config, convention, exempt, kept)
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
            raise ConfigError(f"unknown properties {sorted(unknown)}; known: {', '.join(PROPERTIES)}")
        wanted = [p for p in PROPERTIES if p in chosen or p == "builds"]
    skipped = set(skip)
    with kept:  # the modules a factory handed out get their state back here
        _run_properties(subject, report, wanted, exemptions, skipped, on_property)
    return report


def _kept_builds(build: Callable[..., Any], kept: ExitStack) -> Callable[..., Any]:
    """``build``, with the state of every module it returns (modes, grad flags, weights, dtype, device)
    saved the first time it is seen and put back when ``kept`` closes: a factory that returns the
    caller's own module gets it back as it was, whatever the properties did to it."""
    seen: set[int] = set()

    def run(**kwargs: Any) -> Any:
        model = build(**kwargs)
        if isinstance(model, torch.nn.Module) and id(model) not in seen:
            seen.add(id(model))
            kept.enter_context(kept_state(model))
        return model

    return run


def _run_properties(
    subject: Subject,
    report: Report,
    wanted: list[str],
    exemptions: Mapping[str, str],
    skipped: set[str],
    on_property: Callable[[str], None] | None,
) -> None:
    shown = report.variant
    try:
        with _isolated(property_time_limit()):
            _add_model_names(subject)
    except (SystemExit, PropertyTimeout, _VariantInterrupt):  # reported by the builds property
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
            result, held = _checked(subject, prop)
            report.results.append(result)
            built = not (prop == "builds" and not held)
