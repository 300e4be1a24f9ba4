"""Settings declared once: a config dataclass's fields carry their command-line flag, environment
variable, help and range in their metadata (``setting``); the command's options are derived from
them (``command_parameters``), the parsed options build the config (``build``), and one validator
checks every field's range (``validate``) raising the package's own configuration error.

A field whose type is itself a settings dataclass contributes that dataclass's flags; one that
may be None (an optional part, e.g. the sidecar's health watch) is built when its switch flag is
on, or, without a switch, when one of its own flags is given.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any

_KEY = "c4.setting"

#: A range check: None when the value is fine, else what it must be ("must be at least 1").
Check = Callable[[Any], str | None]


@dataclass(frozen=True)
class Setting:
    """What a field's metadata says about it; ``flag`` "" for a field with no option."""

    flag: str = ""
    env: str = ""
    help: str = ""
    check: Check | None = None
    #: the option's type when it is not the field's (e.g. text for a duration) ...
    cli_type: Any = None
    #: ... how its value becomes the field's ...
    parse: Callable[[Any], Any] | None = None
    #: ... and how the field's default becomes the option's (e.g. 1800.0 -> "30m")
    to_cli: Callable[[Any], Any] | None = None
    hidden: bool = False
    metavar: str | None = None
    #: an optional part (``X | None``) of this settings dataclass, built when ``flag`` (a
    #: switch) is on, or, without a switch, when one of its own flags is given
    part: type | None = None


def setting(default: Any = MISSING, *, default_factory: Any = MISSING, flag: str = "",
            env: str = "", help: str = "", check: Check | None = None, cli_type: Any = None,
            parse: Callable[[Any], Any] | None = None,
            to_cli: Callable[[Any], Any] | None = None, hidden: bool = False,
            metavar: str | None = None, part: type | None = None) -> Any:
    """A dataclass field carrying its option (``flag`` "--name", or "--on/--off" for a switch),
    its environment variable, help and range check. A field with a ``default_factory`` has an
    option without a default (its help says what applies) unless ``to_cli`` is given."""
    meta = {_KEY: Setting(flag, env, help, check, cli_type, parse, to_cli, hidden, metavar,
                          part)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


# -- range checks --------------------------------------------------------------------------------
def at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"must be at least {low:g}"


def positive(v: float) -> str | None:
    return None if v > 0 else "must be positive"


def non_negative(v: float) -> str | None:
    return None if v >= 0 else "must not be negative"


def between(low: float, high: float) -> Check:
    return lambda v: None if low < v < high else f"must be between {low:g} and {high:g}"


def from_to(low: float, high: float) -> Check:
    """Within ``low`` and ``high``, both included."""
    return lambda v: None if low <= v <= high else f"must be from {low:g} to {high:g}"


def one_of(names: Sequence[str]) -> Check:
    return lambda v: None if v in names else f"must be one of {', '.join(names)}"


def power_of_two(*, zero: bool = False) -> Check:
    def check(v: int) -> str | None:
        if (v == 0 and zero) or (v > 0 and not v & (v - 1)):
            return None
        return "must be 0 or a power of two" if zero else "must be a power of two"
    return check


def validate(config: Any, error: type[Exception]) -> None:
    """Check every field's range; raise ``error`` naming the flag (or field) and the value."""
    for f in dataclasses.fields(config):
        meta = f.metadata.get(_KEY)
        if meta is None or meta.check is None:
            continue
        value = getattr(config, f.name)
        problem = meta.check(value)
        if problem:
            raise error(f"{describe(f)} {problem}, got {value!r}")


def describe(f: dataclasses.Field) -> str:
    """How a message names a field: its flag and environment variable, else its name."""
    meta = f.metadata.get(_KEY)
    if meta is None or not meta.flag:
        return f.name
    name = meta.flag.split("/")[0]
    return f"{name} ({meta.env})" if meta.env else name


# -- options from fields ---------------------------------------------------------------------------
@dataclass(frozen=True)
class OptionSpec:
    """One derived option: the field it sets, its parameter name, metadata and default."""

    path: tuple[str, ...]          # field names from the top config down
    param: str                     # the command function's parameter
    meta: Setting
    default: Any
    cli_type: Any


def option_specs(cls: type, path: tuple[str, ...] = ()) -> Iterator[OptionSpec]:
    """Every option of ``cls``, its parts' included, in field order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_KEY)
        if meta is None:
            continue
        kind = meta.part or hints[f.name]
        if (meta.part is None and isinstance(kind, type) and dataclasses.is_dataclass(kind)
                and not meta.flag):
            yield from option_specs(kind, (*path, f.name))
            continue
        if meta.flag:
            # a part's flag is its switch
            cli_type = meta.cli_type or (bool if meta.part is not None else hints[f.name])
            yield OptionSpec((*path, f.name), "_".join((*path, f.name)), meta,
                             _cli_default(f), cli_type)
        if meta.part is not None:
            yield from option_specs(meta.part, (*path, f.name))


def _cli_default(f: dataclasses.Field) -> Any:
    """The option's default: the field's, in the option's form; None (not given) for a field
    built by a factory, unless it says how to show it."""
    meta = f.metadata[_KEY]
    if f.default is not MISSING:
        default = f.default
    elif f.default_factory is MISSING:
        return ...   # a field without a default: its option is required
    elif meta.to_cli is not None:
        default = f.default_factory()
    else:
        return None
    return meta.to_cli(default) if meta.to_cli is not None else default


def command_parameters(cls: type) -> list[inspect.Parameter]:
    """One keyword parameter per flag of ``cls`` (and of its parts), for a typer command, with
    the field's default in the option's form (so a default is written only in the dataclass)."""
    import typer  # only where a command is built: the services read their config without it

    params = []
    for opt in option_specs(cls):
        meta = opt.meta
        info = typer.Option(opt.default, *meta.flag.split(" "), envvar=meta.env or None,
                            help=meta.help, hidden=meta.hidden, metavar=meta.metavar)
        kind = opt.cli_type if opt.default is not None else opt.cli_type | None
        params.append(inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY,
                                        default=info, annotation=kind))
    return params


def derive_command(cls: type, run: Callable[..., None],
                   extra: Sequence[inspect.Parameter] = ()) -> Callable[..., None]:
    """``run`` as a typer command taking the flags of ``cls`` (plus ``extra`` parameters);
    it is called with every parameter as a keyword, for ``build``."""
    def command(**values: Any) -> None:
        run(**values)

    params = [*command_parameters(cls), *extra]
    command.__signature__ = inspect.Signature(params)   # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = run.__doc__
    command.__name__ = run.__name__
    return command


def build(cls: type, values: Mapping[str, Any], error: type[Exception],
          fields: Mapping[str, Any] | None = None) -> Any:
    """The config from a command's parsed options (None: not given, the field's default
    applies) and ``fields``, values of fields that have no option (e.g. the command's
    arguments); a value its flag cannot take, or a config its validator refuses, raises
    ``error`` naming the flag."""
    return _build(cls, (), values, error, dict(fields or {}))


def _build(cls: type, path: tuple[str, ...], values: Mapping[str, Any],
           error: type[Exception], fields: dict[str, Any] | None = None) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = fields or {}
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_KEY)
        if meta is None:
            continue
        here = (*path, f.name)
        given = values.get("_".join(here)) if meta.flag else None
        if meta.part is not None:
            own = list(option_specs(meta.part, here))
            if given if meta.flag else any(values.get(o.param) not in (None, o.default)
                                           for o in own):
                kwargs[f.name] = _build(meta.part, here, values, error)
            continue
        if dataclasses.is_dataclass(hints[f.name]) and not meta.flag:
            kwargs[f.name] = _build(hints[f.name], here, values, error)
            continue
        if given is None:
            continue
        try:
            kwargs[f.name] = meta.parse(given) if meta.parse is not None else given
        except (ValueError, TypeError) as exc:
            raise error(f"{describe(f)}: {exc}") from None
    try:
        return cls(**kwargs)
    except error:
        raise
    except (ValueError, TypeError) as exc:
        raise error(str(exc)) from None


# -- common conversions ----------------------------------------------------------------------------
DAY_S = 86400.0
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S}


def _scaled(text: str, raw: str, units: Mapping[str, float], what: str, forms: str) -> float:
    """``raw`` (``text`` lowered, its unit suffix last) as a number times its unit."""
    scale = units.get(raw[-1:])
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not {forms}") from None
    if value < 0:
        raise ValueError(f"{what} {text!r} is negative")
    return value


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``30d`` -> seconds (``0``: off where allowed)."""
    return _scaled(text, str(text).strip().lower(), _DURATION_UNITS, "duration",
                   "a number of seconds or a number with s, m, h or d (e.g. 30d)")


def format_duration(seconds: float) -> str:
    """The shortest of ``30d``, ``12h``, ``15m``, ``90s`` that is exact; ``0`` for zero."""
    if not seconds:
        return "0"
    for unit in ("d", "h", "m"):
        count = seconds / _DURATION_UNITS[unit]
        if count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``1048576``, ``512M``, ``4G`` (``K``/``M``/``G``/``T``, powers of 1024) -> bytes."""
    raw = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    return int(_scaled(text, raw, _SIZE_UNITS, "size",
                       "a number of bytes or a number with K, M, G or T (e.g. 4G)"))


def format_size(nbytes: int) -> str:
    """``4G``, ``512M``, ``64K`` when exact, else the number of bytes."""
    if not nbytes:
        return "0"
    for unit in ("t", "g", "m", "k"):
        if nbytes % _SIZE_UNITS[unit] == 0:
            return f"{nbytes // _SIZE_UNITS[unit]}{unit.upper()}"
    return str(nbytes)


def parse_names(text: str) -> frozenset[str]:
    """``a,b, c`` -> the set of names (blank entries dropped)."""
    return frozenset(n.strip() for n in str(text).split(",") if n.strip())


def format_names(names: frozenset[str]) -> str:
    return ",".join(sorted(names))
