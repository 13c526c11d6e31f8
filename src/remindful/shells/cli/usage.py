"""How the command line explains itself: help without type annotations, usage lines in plain
words, and a usage error as one line.

typer (0.2x) shows a Python type beside every option (``--json <bool>``, ``--path <str>``,
``--type <list[str]>``, ``--limit <float range> [x>=0]``) and writes a required argument as
``{query}`` in the usage line; a missing argument prints a five-line boxed error. :class:`Group` is
the ``cls`` of every Typer app of the CLI: its commands' options show a word for what they take
(``TEXT``, ``N``, ``NUMBER``, ``PATH``; nothing for a flag), arguments are written ``QUERY``, and a
usage error (a missing argument, an unknown option) is one line on stderr naming the command and
what is missing, exit status 2, as every other bad input is.

Only typer's public classes are subclassed; with a typer that has none of these methods the help
is typer's own.
"""

from __future__ import annotations

import sys
from typing import Any, get_args, get_origin

import typer
import typer.core
from typer.core import TyperArgument, TyperGroup, TyperOption


def _usage_error() -> type[Exception]:
    """The usage error of the click typer runs on: its own copy from typer 0.2x on, else click."""
    vendored = getattr(typer.core, "_click", None)
    if vendored is not None:
        import importlib

        return importlib.import_module(vendored.__name__ + ".exceptions").UsageError
    import click

    return click.UsageError


_USAGE_ERRORS = (_usage_error(),)
#: What an option takes, by the Python type typer converts it to.
_WORDS: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT"}


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count or getattr(self, "is_bool_flag", False) or "--help" in self.opts:
            return None
        if self.metavar:
            return self.metavar
        desc: Any = getattr(self, "type_descriptor", None)
        if getattr(desc, "is_choice", False):
            return "|".join(str(c) for c in desc.choices)
        if getattr(desc, "is_path", False):
            return "PATH"
        annotation = getattr(desc, "annotation", None)
        if get_origin(annotation) is list and get_args(annotation):
            annotation = get_args(annotation)[0]
        return _WORDS.get(annotation, "TEXT")

    def _get_number_range_help_str(self) -> str:
        return ""  # the help text says the range in words


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = (self.metavar or self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def _rich_display_name(self) -> str:
        return (self.metavar or self.name or "").upper() + ("..." if self.nargs != 1 else "")


def _plain(command: Any) -> Any:
    """``command`` with its options and arguments shown as the module docstring says (in place)."""
    for param in command.params:
        _plain_param(param)
    if not getattr(command, "_remindful_plain", False):
        # --help is made when help is asked for: shown the same way.
        made = command.get_help_option

        def get_help_option(ctx: Any) -> Any:
            return _plain_param(made(ctx))

        command.get_help_option = get_help_option
        command._remindful_plain = True
    return command


def _plain_param(param: Any) -> Any:
    if type(param) is TyperOption:
        param.__class__ = _Option
    elif type(param) is TyperArgument:
        param.__class__ = _Argument
    return param


class Group(TyperGroup):
    """A Typer app's group with the help and the usage errors of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain(self)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        return _plain(found) if found is not None else None

    def make_context(self, info_name: Any, args: Any, parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except _USAGE_ERRORS as exc:
            _one_line(exc)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _USAGE_ERRORS as exc:
            _one_line(exc)
            raise


def _one_line(exc: Any) -> None:
    """Print a usage error as one line and exit 2; help asked for by giving no arguments
    (``no_args_is_help``) is left to click."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        return
    where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "remindful"
    message = " ".join(exc.format_message().split()).rstrip(".")
    sys.stderr.write(f"error: {where}: {message} (`{where} --help` shows how to use it)\n")
    raise typer.Exit(exc.exit_code)


__all__ = ["Group"]
