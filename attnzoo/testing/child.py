"""One variant's conformance check in a process of its own, for ``attnzoo check``.

    python -m attnzoo.testing.child NAME [--property P ...] [--slow] [--config JSON]

prints ``start <property>`` as each property begins, then one line ``report <json>`` (or ``error <json
string>``: the attnzoo error that stopped the check before any report). The parent reads them: a variant
that ends its process (``os._exit``, a crash in native code) or hangs past every limit is reported as
failing the property it was in, and the variants after it are still checked. attnzoo starts it through
``attnzoo.core.children.run_python`` (nothing imported from the caller's folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnzoo.testing.child")
    parser.add_argument("name")
    parser.add_argument("--property", action="append")
    parser.add_argument("--slow", action="store_true")
    parser.add_argument("--config", type=json.loads, help="the config to check with (default: the card's example)")
    args = parser.parse_args(argv)
    from attnzoo.errors import AttnzooError
    from attnzoo.testing import check_model

    out = sys.stdout

    def started(prop: str) -> None:
        out.write(f"start {prop}\n")
        out.flush()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kit feeds bad inputs on purpose; results say what matters
        try:
            report = check_model(
                args.name, args.config, only=args.property or None, slow=args.slow, on_property=started
            )
        except AttnzooError as e:  # a clear error of ours (a broken folder, a bad config): the parent shows it
            out.write("error " + json.dumps(f"{type(e).__name__}: {e}") + "\n")
            out.flush()
            return 1
    out.write("report " + json.dumps(report.to_dict()) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    import os

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # ended here, not by the interpreter: that would wait for every thread a variant left running (the
    # report already names them), and the check would never end
    os._exit(code)
