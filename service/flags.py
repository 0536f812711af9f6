"""The command line of ``python -m service`` (and its ``batch`` command), derived from ``Settings``: one flag per
field, with its description and default, so the flags are the ``BERTSERVE_*`` environment variables' twins and
cannot drift from them; flags win."""

from __future__ import annotations

import argparse
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo

from service.settings import Settings

# Flags whose spelling is not the field's name with dashes (the first is the documented one).
FLAG_NAMES: dict[str, tuple[str, ...]] = {
    "models_dir": ("--models", "--models-dir"),
    "models": ("--model",),
    "api_keys": ("--api-key",),
    "cors_allow_origins": ("--cors-allow-origin",),
}
METAVARS: dict[str, str] = {
    "models_dir": "DIR", "models": "NAME=PATH", "api_keys": "KEY", "cors_allow_origins": "ORIGIN",
}  # fmt: skip
TYPE_METAVARS: dict[Any, str] = {int: "N", float: "NUM", Path: "PATH"}


def build_parser() -> argparse.ArgumentParser:
    """One flag per ``Settings`` field (name, help, default and type come from the field), so they cannot drift.

    Every flag defaults to None: only flags given override the environment and the field defaults.
    """
    parser = argparse.ArgumentParser(
        prog="python -m service",
        description="Serve fine-tuned BERT bundles over HTTP. "
        "`python -m service batch INPUT --out OUTPUT ...` runs an OpenAI batch file through them without HTTP.",
    )
    for name, field in Settings.model_fields.items():
        flags = FLAG_NAMES.get(name, ("--" + name.replace("_", "-"),))
        kind = _flag_type(name, field.annotation)
        options: dict[str, Any] = {"dest": name, "default": None, "help": _flag_help(name, field)}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif get_origin(kind) is list:
            (item,) = get_args(kind)
            options.update(action="append", type=item, metavar=METAVARS.get(name, "VALUE"))
        elif get_origin(kind) is Literal:
            options["choices"] = list(get_args(kind))
        else:
            options.update(type=kind, metavar=METAVARS.get(name, TYPE_METAVARS.get(kind)))
        parser.add_argument(*flags, **options)
    return parser


def _flag_type(name: str, annotation: Any) -> Any:
    """The field's type without ``| None``; only types the flags know how to parse."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(options) == 1:
            annotation = options[0]
    if annotation in (bool, int, float, str, Path) or get_origin(annotation) is Literal or annotation == list[str]:
        return annotation
    raise TypeError(f"setting {name} has type {annotation}, which no flag parses")


def _flag_help(name: str, field: FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    shown = "none" if default is None or default == [] else str(default)
    env = f"{Settings.model_config.get('env_prefix', '')}{name}".upper()
    repeat = " Repeat the flag for more." if get_origin(field.annotation) is list else ""
    text = f"{field.description or ''}{repeat} (default: {shown}; env {env})".strip()
    return text.replace("%", "%%")  # argparse %-formats help strings


def settings_from_args(argv: list[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    overrides: dict[str, Any] = {key: value for key, value in vars(args).items() if value is not None}
    return Settings(**overrides)
