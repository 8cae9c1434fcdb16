"""The ``attnzoo`` command: every verb is a :class:`Command` registered through a ``register(name, run, ...)``:
the built-in verbs (``attnzoo.cli.verbs``) here, the plugins' through the hook ``attnzoo_register_commands``.

    attnzoo list [PATTERN ...] [--pretrained] [--provider P] [--json]
    attnzoo info NAME [--json]
    attnzoo plugins [--json]
    attnzoo create NAME [key=value ...] [--pretrained[=TAG]] [--device D] [--dtype T]
    attnzoo --help                      every verb, plugins' included

Tables for people, ``--json`` for programs. Exit status 2 for usage errors, 1 for failures, with a
one-line message (``--debug`` shows the traceback). ``--no-plugins`` skips third-party plugins (their
verbs too). torch is imported only by the verbs that build a model.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from attnzoo.cli.common import FAILURE, USAGE_ERROR, UsageError, one_line
from attnzoo.errors import AttnzooError

__all__ = ["main", "build_parser", "Command", "commands", "register_builtin_commands", "BUILTIN_VERBS"]

# the built-in verbs in the order --help lists them, and the module of attnzoo.cli.verbs of each
BUILTIN_VERBS = {
    "list": "listing",
    "info": "info",
    "plugins": "plugins",
    "create": "create",
    "check": "check",
    "export": "export",
    "bench": "bench",
    "train": "train",
    "predict": "predict",
    "evaluate": "evaluate",
    "verify": "verify",
    "download": "download",
    "cache": "cache",
    "convert-checkpoint": "convert_checkpoint",
    "convert-keras": "convert_keras",
}
_VERB = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Command:
    """One verb: ``arguments(parser)`` adds its arguments, ``run(args)`` runs it and returns the exit
    status; ``help`` is its line in ``attnzoo --help``; ``provider`` who registered it."""

    name: str
    run: Callable[[argparse.Namespace], int]
    help: str = ""
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    description: str | None = None
    provider: str = "attnzoo"


def register_builtin_commands(register: Callable[..., object]) -> None:
    """The built-in verbs (``attnzoo.cli.verbs``), through the ``register`` a plugin's hook gets."""
    for name, module_name in BUILTIN_VERBS.items():
        module = importlib.import_module(f"attnzoo.cli.verbs.{module_name}")
        register(
            name,
            module.run,
            help=module.HELP,
            arguments=module.arguments,
            description=getattr(module, "DESCRIPTION", None),
        )


def commands() -> dict[str, Command]:
    """Every verb: the built-in ones, registered here through the same ``register`` a plugin's
    ``attnzoo_register_commands`` hook gets, then the plugins', in one :class:`PluginTable` (the first
    registration of a name wins; a plugin's verb that takes a registered name is skipped with a warning
    unless it passes ``override=True``); a plugin whose hook raises is recorded (``attnzoo plugins``) and
    its other verbs are kept."""
    from attnzoo.core.registry import REGISTRY
    from attnzoo.core.spec import BUILTIN_PROVIDER
    from attnzoo.core.tables import PluginTable

    table: PluginTable[Command] = PluginTable("command")

    def register_for(plugin: str) -> Callable[..., bool]:
        def register(name, run, *, help="", arguments=None, description=None, override=False) -> bool:  # noqa: A002
            if not isinstance(name, str) or not _VERB.fullmatch(name):
                raise ValueError(f"a command name is a lower-case word (letters, digits, '-'), got {name!r}")
            if not callable(run) or (arguments is not None and not callable(arguments)):
                raise TypeError(f"command {name!r}: run and arguments must be callables")
            command = Command(name, run, str(help), arguments, description, plugin)
            return table.add(name, command, provider=plugin, override=override)

        return register

    register_builtin_commands(register_for(BUILTIN_PROVIDER))
    REGISTRY.each_plugin("attnzoo_register_commands", lambda plugin: {"register": register_for(plugin)})
    return dict(table.items())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors: exit 2, one line
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every registered verb."""
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    common.add_argument(
        "--no-plugins",
        action="store_true",
        default=argparse.SUPPRESS,
        help="skip third-party plugins (same as ATTNZOO_DISABLE_PLUGIN_AUTOLOAD=1)",
    )
    parser = _Parser(prog="attnzoo", description="A config-driven zoo of PyTorch attention layers.", parents=[common])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in commands().values():
        p = sub.add_parser(command.name, parents=[common], help=command.help, description=command.description)
        if command.arguments is not None:
            command.arguments(p)
        p.set_defaults(func=command.run)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = one_line(message)
    print(text if text.startswith("attnzoo:") else f"attnzoo: warning: {text}", file=sys.stderr)


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``attnzoo list | head -1``): not an error, and no noise at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None:  # started with stdout closed (`attnzoo list >&-`): run, and say where output went
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        if sys.stderr is not None:
            print("attnzoo: standard output is closed; what this command prints is discarded", file=sys.stderr)
    debug = "--debug" in argv
    from attnzoo.core.plugins import autoload_disabled

    # both switches are read before the parser exists: plugins' verbs are part of it
    with warnings.catch_warnings(), autoload_disabled() if "--no-plugins" in argv else contextlib.nullcontext():
        if not debug:
            warnings.showwarning = _one_line_warning  # restored when the command ends
        return _run(argv, debug)


def _run(argv: list[str], debug: bool) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        # key=value pairs may come after options (`convert-keras F --model M num_heads=2`)
        if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        elif extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see `attnzoo --help`)")
        if args.command is None:
            parser.print_help()
            return USAGE_ERROR
        code = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except UsageError as e:
        if debug:
            raise
        _say_failure(f"attnzoo: usage error: {one_line(e)}", e)
        return USAGE_ERROR
    except (AttnzooError, ValueError, OSError) as e:
        if debug:
            raise
        _say_failure(f"attnzoo: error: {one_line(e)}", e)
        return FAILURE
    except KeyboardInterrupt as e:
        _say_failure("attnzoo: interrupted", e)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug of ours: still one line, and how to see more
        if debug:
            raise
        _say_failure(
            f"attnzoo: internal error: {type(e).__name__}: {one_line(e, 300)} (run again with --debug for the "
            f"traceback)",
            e,
        )
        return FAILURE


def _other_rank() -> bool:
    """Whether this process is one of torchrun's ranks but the first (``WORLD_SIZE`` > 1, ``RANK`` > 0)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1 and int(os.environ.get("RANK", "0")) > 0
    except ValueError:  # said by the trainer's setup, which reads them
        return False


def _say_failure(line: str, error: BaseException) -> None:
    """A command's failure, one line on stderr. Under torchrun only rank 0 says it: when rank 0 fails, the
    others fail in turn (their collectives break, or they meet the same bad row) and N copies of an error, or
    gloo's "connection closed", would bury the one that matters. The other ranks write what they raised into
    torchrun's error file (``TORCHELASTIC_ERROR_FILE``), which torchrun's report shows."""
    if not _other_rank():
        print(line, file=sys.stderr)
        return
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        try:
            from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

            ErrorHandler().record_exception(error)
        except Exception:  # noqa: BLE001, S110 - the report is a courtesy; the exit status says it failed
            pass
