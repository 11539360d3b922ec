"""The command line's parser and entry point."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from beamsearch import __version__
from beamsearch.cli import decode, transcribe, zoo
from beamsearch.cli.common import CliError, Help, Parser
from beamsearch.extras import missing_package


def parser() -> Parser:
    """The ``beamsearch`` parser with every command."""
    fmt = Help
    parser = Parser(prog="beamsearch", formatter_class=fmt,
                     description="Beam search decoding of step-function models, and a dates-to-ISO-8601 "
                                 "translator built on it.",
                     epilog="Exit status: 0 done; 1 some input got no date, or a checkpoint cannot be loaded; "
                            "2 usage error.")
    parser.add_argument("--version", action="version", version=f"beamsearch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    zoo.add_commands(sub, fmt)
    decode.add_command(sub, fmt)
    transcribe.add_command(sub, fmt)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    top = parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        top.print_help()
        return 2
    commands = {"demo": zoo.demo_command, "translate": zoo.translate, "evaluate": zoo.evaluate,
                "train": zoo.train_command, "decode": decode.decode_command,
                "transcribe": transcribe.transcribe_command}
    try:
        args = top.parse_args(argv)
        if args.command is None:
            raise CliError("beamsearch: error: a command is required (one of demo, translate, evaluate, "
                            "train, decode, transcribe; see beamsearch --help)", 2)
        return commands[args.command](args)
    except SystemExit as e:  # --help and --version
        return int(e.code or 0)
    except ImportError as e:  # a missing optional package: the extra that brings it (a message that says so: as it is)
        print(f"beamsearch: error: {missing_package(e.name) if e.name else e}", file=sys.stderr)
        return 2
    except CliError as e:
        print(str(e), file=sys.stderr)
        return e.code
    except (ValueError, TypeError, OSError) as e:
        print(f"beamsearch: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, (ValueError, TypeError)) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
