"""Settings on the command line: one option per config leaf, named by its TOML key
(``--chunking.size 150``), generated from the config model so help text and defaults live in one
place, and a short ``--help`` that groups them by section (``--help-all`` lists every one).

Precedence: command-line option > ``--config`` TOML file > the index's stored settings (commands
that read an index) > built-in default.
"""

from __future__ import annotations

import sys
import typing
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import click

from hopgraph.config import HopgraphConfig, apply_overrides, dotted_keys, leaf_fields, read_toml, validate_config
from hopgraph.config.base import llm_address
from hopgraph.errors import HopgraphError, storage_message

EXAMPLE = "examples/hopgraph.toml"
HELP_ALL = "hopgraph.help_all"

ENGINE = click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default=None,
    help="local: build in this process (default); ray: model work on a Ray cluster (the 'cluster' extra; "
    "--cluster.address joins one, none starts one here). The setting cluster.engine in a --config file.",
)


def config_file_option(help_text: str = "TOML file with settings (`hopgraph init` writes a commented one).") -> Any:
    return click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help=help_text)


def _click_type(annotation: Any) -> tuple[Any, bool]:
    """(click type, is_flag-like bool) for a pydantic field annotation."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(a) for a in typing.get_args(annotation)]), False
    if args and typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return _click_type(args[0])
    return {int: click.INT, float: click.FLOAT, bool: click.BOOL}.get(annotation, click.STRING), annotation is bool


class SettingOption(click.Option):
    """A config setting as an option: listed by ``--help-all``; ``--help`` counts it under its section."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        return super().get_help_record(ctx) if ctx.meta.get(HELP_ALL) else None


def _show_all(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        ctx.meta[HELP_ALL] = True
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


def config_options(prefixes: tuple[str, ...], exclude: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Decorator adding one option per config leaf whose dotted name starts with a prefix, and --help-all."""

    def decorate(func: Callable) -> Callable:
        for dotted, info in reversed(leaf_fields()):
            if not dotted.startswith(prefixes) or dotted in exclude:
                continue
            kind, _ = _click_type(info.annotation)
            default = info.default
            help_text = f"{info.description or ''} [default: {default if default is not None else 'auto'}]"
            func = click.option(
                f"--{dotted}",
                dotted.replace(".", "__"),
                cls=SettingOption,
                type=kind,
                default=None,
                help=help_text,
                show_default=False,
            )(func)
        return click.option(
            "--help-all",
            is_flag=True,
            expose_value=False,
            is_eager=True,
            callback=_show_all,
            help="Show every setting with its description and default, and exit.",
        )(func)

    return decorate


class Command(click.Command):
    """A command whose help lists its settings by section (with counts) instead of one by one."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_options(ctx, formatter)
        settings = [p for p in self.get_params(ctx) if isinstance(p, SettingOption)]
        if not settings or ctx.meta.get(HELP_ALL):
            return
        sections: dict[str, list[str]] = {}
        for param in settings:
            sections.setdefault(param.opts[0][2:].split(".")[0], []).append(param.opts[0])
        with formatter.section(f"Settings ({len(settings)}, as --SECTION.KEY VALUE)"):
            formatter.write_dl(
                [(name, f"{len(opts)}: {_names(name, opts)}") for name, opts in sections.items()]
                + [("", f"All with defaults: --help-all, or {EXAMPLE} (`hopgraph init` writes it).")]
            )


def fail(message: str) -> NoReturn:
    """The one-line ``error:`` a command ends with (exit code 2)."""
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(2)


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> str:
    return f"warning: {message}\n"


# What an interrupted command kept, and how to go on (a query or a listing keeps nothing). A command
# whose answer depends on how far it got says so in ``ctx.meta[INTERRUPTED_META]`` as it goes.
_RESUME = "; finished stages are kept, run the same command again to resume"
INTERRUPTED = {"index": _RESUME, "eval": _RESUME}
INTERRUPTED_META = "hopgraph.interrupted"


class Group(click.Group):
    """Turns user-facing errors into one clear line instead of a traceback."""

    command_class = Command  # short help: settings grouped by section

    def invoke(self, ctx: click.Context) -> Any:
        # hopgraph's own warnings (a tokens file others may write) read as one line, not as Python's
        # "file:line: UserWarning" with the source line under it.
        warnings.formatwarning = _warning_line
        try:
            return super().invoke(ctx)
        except HopgraphError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail(f"interrupted{_kept(ctx)}")
        except OSError as exc:
            said = storage_message(exc)
            if said is None:
                raise
            # A full disk is the machine's state, not a bug: one line naming the file, not a traceback.
            fail(f"{said}{_kept(ctx)}")


def _kept(ctx: click.Context) -> str:
    """What the stopped command kept, and how to go on."""
    return str(ctx.meta.get(INTERRUPTED_META, INTERRUPTED.get(ctx.invoked_subcommand or "", "")))


def _names(section: str, opts: list[str], shown: int = 4) -> str:
    names = [opt.removeprefix(f"--{section}.") for opt in opts]
    return ", ".join(names[:shown]) + (", …" if len(names) > shown else "")


def cli_overrides(options: dict[str, Any]) -> dict[str, Any]:
    """The settings given as options, by dotted key (options left unset are not settings given)."""
    return {name.replace("__", "."): v for name, v in options.items() if "__" in name and v is not None}


def settings(config_file: str | None, options: dict[str, Any], only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Dotted settings of this run: the --config file's, then the options' over them. ``only``
    keeps the keys that start with one of those prefixes (a file may hold sections a command ignores)."""
    given = {**(dotted_keys(read_toml(config_file)) if config_file else {}), **cli_overrides(options)}
    if only is not None:
        given = {k: v for k, v in given.items() if k.startswith(only)}
    if isinstance(given.get("llm.base_url"), str):  # an address given now is checked now, not at its first call
        llm_address(given["llm.base_url"], f"{config_file or 'settings'}: ")
    return given


def build_config(
    config_file: str | None, options: dict[str, Any], stored: dict[str, Any] | None = None, source: str = "settings"
) -> HopgraphConfig:
    """The config of this run: defaults (or an index's ``stored`` settings) < --config file < options."""
    return validate_config(apply_overrides(dict(stored or {}), settings(config_file, options)), config_file or source)


ROOT = click.option(
    "--root",
    type=click.Path(file_okay=False),
    help="Folder that document ids are relative to (default: each folder given; for a file given alone, its "
    "folder). `update --add copy/people/x.md --root copy` replaces the document `people/x.md`.",
)
VERBOSE = click.option("--verbose", "-v", is_flag=True, help="List every document id read (default: the first 10).")
SUMMARY_JSON = click.option(
    "--json", "as_json", is_flag=True, help="Print the summary as JSON: ids read, skipped inputs with reasons, counts."
)
