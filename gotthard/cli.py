"""The ``gotthard`` command: one subcommand per area."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from gotthard import __version__, extras, spiffe
from gotthard import config as configuration

#: Subcommand -> (module, function registering it). Modules are imported only for the
#: subcommand being run, so ``gotthard exporter`` never loads the control plane's
#: libraries (kubernetes, APScheduler, SQLAlchemy, regopy, grafanalib).
COMMANDS: dict[str, tuple[str, str]] = {
    "exporter": ("gotthard.exporters.main", "add_cli"),
    "dashboards": ("gotthard.monitoring.cli", "add_cli"),
    "rules": ("gotthard.monitoring.rules_cli", "add_cli"),
    "alertmanager": ("gotthard.monitoring.rules_cli", "add_alertmanager_cli"),
    "policy": ("gotthard.policies.cli", "add_cli"),
    "audit": ("gotthard.policies.cli", "add_audit_cli"),
    "dr": ("gotthard.dr.cli", "add_cli"),
    "runbooks": ("gotthard.runbooks.cli", "add_cli"),
    "sandbox": ("gotthard.sandbox", "add_cli"),
    "deploy": ("gotthard.deploy.cli", "add_cli"),
    "job": ("gotthard.job.cli", "add_cli"),
}


#: What exit status 1 means, by leaf command; a leaf not listed never exits 1. Every
#: leaf's ``--help`` states its exit statuses from here (:func:`exit_statuses`), and
#: README.md's table is generated from it (scripts/generate.py).
FINDINGS: dict[str, str] = {
    "dashboards lint": "a lint problem",
    "dashboards check": "a panel without data, or a lint problem",
    "policy eval": "the input is denied",
    "policy test": "a failed case or a coverage problem",
    "policy kube-bench": "a failed CIS check that no valid waiver covers",
    "audit kube-bench": "a failed CIS check that no valid waiver covers",
    "audit cluster": "a policy violation in the cluster",
    "dr drill": "the restore was not verified",
    "dr status": "a recovery tier's objective is breached",
    "job report": "the job has a finding (idle GPUs, unused tensor cores, ...)",
    "job digest": "an account has a job with a finding",
    "rules migrate-names": "with --check: old metric names are left (listed)",
    "sandbox up": "the sandbox could not be started (what was started is stopped again)",
    "sandbox down": "the sandbox could not be stopped",
    "sandbox status": "a process of the sandbox is not running",
}
#: Exit status 2, the same for every command.
USAGE_ERROR = (
    "a usage, input or environment error, or an optional dependency this install lacks "
    "(one line on stderr naming the file, key, site or extra)"
)


def exit_statuses(command: str) -> list[tuple[int, str]]:
    """The exit statuses of leaf *command* (``"dr status"``) and what each means."""
    statuses = [(0, "success")]
    if command in FINDINGS:
        statuses.append((1, FINDINGS[command]))
    return [*statuses, (2, USAGE_ERROR)]


def _epilog(command: str) -> str:
    text = "exit status: " + "; ".join(f"{code} {what}" for code, what in exit_statuses(command))
    missing = extras.unmet(command)
    if missing is not None:
        text = f"not installed: {extras.install_hint(missing.extra)}. {text}"
    return text + "."


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every leaf command below *parser*: its words (``("dr", "status")``) and parser."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
    for action in actions:
        for name, child in action.choices.items():
            yield from leaves(child, (*path, name))


def _mark_missing(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Append ``(not installed: pip install ...)`` to the listed help of every command
    and subcommand below *parser* that this install cannot run."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for listed in action._choices_actions:
            words = " ".join((*path, listed.dest))
            found = extras.needs_of(words)
            missing = extras.unmet(words) if found and found[0] == words else None
            if missing is not None and "not installed" not in (listed.help or ""):
                hint = f"(not installed: {extras.install_hint(missing.extra)})"
                listed.help = f"{listed.help} {hint}" if listed.help else hint
        for name, child in action.choices.items():
            _mark_missing(child, (*path, name))


def _guarded(command: str, handler: Any) -> Any:
    """*handler*, refused (exit 2 naming the extra) when this install lacks what
    *command* needs: before it starts, not at the first import it happens to make."""

    def run(args: argparse.Namespace, cfg: Any) -> Any:
        missing = extras.unmet(command)
        if missing is not None:
            raise missing
        return handler(args, cfg)

    return run


def _finish(parser: argparse.ArgumentParser) -> None:
    """Every leaf states its exit statuses (and a missing extra) in its ``--help`` and is
    guarded by :func:`_guarded`; the listings mark what is not installed."""
    for path, leaf in leaves(parser):
        command = " ".join(path)
        leaf.epilog = _epilog(command)
        handler = leaf.get_default("handler")
        if handler is not None and extras.needs_of(command) is not None:
            leaf.set_defaults(handler=_guarded(command, handler))
    _mark_missing(parser)


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (after ``--config FILE``), if known."""
    args = iter(argv)
    for arg in args:
        if arg == "--config":
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with *argv* naming a subcommand, only that one is registered."""
    parser = argparse.ArgumentParser(
        prog="gotthard",
        description="Observability and SRE control plane for hybrid Slurm/Kubernetes sites.",
        epilog="Every command exits 0 on success, 1 on a finding (see its --help) and 2 on "
        "a usage, input or environment error.",
    )
    parser.add_argument("--version", action="version", version=f"gotthard {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"site configuration (TOML); default ${configuration.ENV_VAR}, else built-in defaults",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    only = _command_in(argv) if argv is not None else None
    for name, (module, function) in COMMANDS.items():
        if only is None or name == only:
            _register(subparsers, name, module, function, listing=only is None)
    _finish(parser)
    return parser


def _register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    module: str,
    function: str,
    *,
    listing: bool,
) -> None:
    """Register subcommand *name* from *module*.

    A subcommand whose optional dependencies are not installed raises
    :class:`ModuleNotFoundError` when it is the one being run; when every subcommand is
    listed (``gotthard --help``) it stays listed, with the extra that installs it."""
    try:
        add_cli = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as err:
        missing = extras.missing_extra(err, name)
        if missing is None or not listing:
            raise
        hint = extras.install_hint(missing.extra)
        stub = subparsers.add_parser(name, help=f"(not installed: {hint})")
        stub.set_defaults(handler=functools.partial(_not_installed, missing))
        return
    add_cli(subparsers)


def _not_installed(missing: extras.MissingExtra, *_: object) -> int:
    raise missing


class OutputError(Exception):
    """Standard output or standard error cannot be written (not: its reader went away)."""


class _Guarded:
    """``sys.stdout`` or ``sys.stderr`` while a command runs.

    A reader that goes away early (``gotthard ... | head -1``: EPIPE) silences the rest
    of the output: the file descriptor is pointed at ``/dev/null`` (as the Python docs
    advise for SIGPIPE, which is left alone: a server must not die of it), and the command
    runs on to its own exit status, so a finding is still exit 1. Any other error
    writing (a full disk) is an :class:`OutputError` naming the stream."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            self._failed(err)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            self._failed(err)

    def _failed(self, err: OSError) -> None:
        # what is still buffered, and the interpreter's last flush, go nowhere
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        if not isinstance(err, BrokenPipeError):
            raise OutputError(f"cannot write {self._name}: {err.strerror or err}") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _guarded_output() -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout = _Guarded(sys.stdout, "standard output")  # type: ignore[assignment]
    sys.stderr = _Guarded(sys.stderr, "standard error")  # type: ignore[assignment]
    try:
        yield
    finally:
        try:
            sys.stdout.flush()  # also on SystemExit (--help, a usage error)
        finally:
            try:
                sys.stderr.flush()
            finally:
                sys.stdout, sys.stderr = saved


def _fail(message: str) -> int:
    with contextlib.suppress(OSError):  # standard error itself may be what failed
        print(f"gotthard: {message}", file=sys.stderr)
    return 2


def _os_error(err: OSError) -> str:
    """*err* naming its file(s), without the ``[Errno N]`` prefix."""
    if err.filename is None:
        return str(err.strerror or err)
    files = " -> ".join(str(f) for f in (err.filename, err.filename2) if f is not None)
    return f"{files}: {err.strerror or err}"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, load the one configuration, run the subcommand; the one error path.

    Exit status: 0 success, 1 a finding, 2 usage, input or environment error. A
    configuration or cluster-access problem, an optional dependency this install lacks,
    a file that cannot be read or written, output that cannot be written, even a bug: one
    line on stderr, never a traceback (``python -X dev -m gotthard`` adds it for a bug).
    A reader that stops early (``| head``) ends the output quietly, not the command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with _guarded_output():
            return _run(argv)
    except OutputError as err:
        return _fail(str(err))


def _run(argv: list[str]) -> int:
    from gotthard.kube import KubeError

    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        # a subcommand may read only its own tables (``config_sections``, see
        # :func:`gotthard.config.model`); every other one checks the whole file
        sections = getattr(args, "config_sections", None)
        cfg = configuration.load(configuration.path_of(args), sections)
        if "spiffe" in type(cfg).model_fields:
            spiffe.use(cfg.spiffe)  # the SVID this process's clients present, if any
        status = int(args.handler(args, cfg) or 0)
        sys.stdout.flush()  # a full disk is an error of this command, not of the exit
        return status
    except (
        configuration.ConfigError,
        KubeError,
        extras.MissingExtra,
        OutputError,
        spiffe.SvidError,
    ) as err:
        return _fail(str(err))
    except ModuleNotFoundError as err:
        # an optional library the subcommand imports (at registration or when it runs)
        # that this install lacks: name the extra
        missing = extras.missing_extra(err, _command_in(argv))
        return _fail(str(missing) if missing is not None else _internal(err))
    except OSError as err:
        # a file or socket the command reads or writes, named
        return _fail(_os_error(err))
    except KeyboardInterrupt:
        return _fail("interrupted")
    except Exception as err:
        return _fail(_internal(err))


def _internal(err: BaseException) -> str:
    """One line about an error no part of Gotthard expected (a bug)."""
    if sys.flags.dev_mode:
        traceback.print_exc()
    return (
        f"internal error: {type(err).__name__}: {err}"
        " (a bug; `python -X dev -m gotthard ...` shows where)"
    )
