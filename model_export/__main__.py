"""bertserve-export: checkpoint folder -> validated ONNX bundle. Errors are one line on stderr, exit status 1.

The flags are generated from ``ExportOptions`` (model_export/options.py: one per field, with its help, default,
type and choices), the object ``export_bundle``'s defaults come from, so the two cannot drift.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import types
from collections.abc import Sequence
from dataclasses import Field, fields
from typing import Any, Union, get_args, get_origin, get_type_hints

from model_export.options import ExportOptions
from model_export.options import request_default as request_default  # NAME=VALUE parser, kept importable here

OPTION_TYPES = get_type_hints(ExportOptions)


def option_flag(option: Field[Any]) -> str:
    """The option's flag: its metadata's, else ``--`` and the field's name with dashes."""
    return str(option.metadata.get("flag", "--" + option.name.replace("_", "-")))


def option_dest(option: Field[Any]) -> str:
    """Where argparse keeps the option's value (the flag's name: ``--request-default`` -> ``request_default``)."""
    return option_flag(option)[2:].replace("-", "_")


def _flag_type(name: str, annotation: Any) -> Any:
    """The field's type without ``| None`` and ``| Path`` (a path flag is a string); only types flags parse."""
    if get_origin(annotation) in (Union, types.UnionType):
        kinds = [kind for kind in get_args(annotation) if kind is not type(None)]
        annotation = str if str in kinds else kinds[0] if len(kinds) == 1 else None
    if annotation in (bool, int, float, str) or get_origin(annotation) is dict:
        return annotation
    raise TypeError(f"export option {name} has type {annotation}, which no flag parses")


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per ``ExportOptions`` field; its default is the field's (``%(default)s`` in a help shows it)."""
    for option in fields(ExportOptions):
        kind = _flag_type(option.name, OPTION_TYPES[option.name])
        facts = option.metadata
        settings: dict[str, Any] = {"default": option.default, "help": facts["help"]}
        if "metavar" in facts:
            settings["metavar"] = facts["metavar"]
        if kind is bool:
            settings["action"] = argparse.BooleanOptionalAction
        elif get_origin(kind) is dict:
            settings.update(action="append", type=facts["item"])  # NAME=VALUE pairs, made a dict by options_from
        elif "choices" in facts:
            settings["choices"] = list(facts["choices"])
        elif kind is not str:
            settings["type"] = kind
        parser.add_argument(option_flag(option), **settings)


def options_from(args: argparse.Namespace) -> ExportOptions:
    """The parsed flags as ``ExportOptions`` (a repeated NAME=VALUE flag's pairs as a dict)."""
    values: dict[str, Any] = {}
    for option in fields(ExportOptions):
        value = getattr(args, option_dest(option))
        if value is not None and get_origin(_flag_type(option.name, OPTION_TYPES[option.name])) is dict:
            value = dict(value)  # the repeated flag's (NAME, VALUE) pairs
        values[option.name] = value
    return ExportOptions(**values)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertserve-export", description="Export a BERT checkpoint folder to a validated ONNX bundle folder."
    )
    parser.add_argument("checkpoint_dir", help="Hugging Face checkpoint folder (config.json, weights, tokenizer)")
    parser.add_argument("out_dir", help="bundle folder to write (replaced only when the new bundle is complete)")
    add_option_flags(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = options_from(args)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("model_export").setLevel(logging.WARNING if args.quiet else logging.INFO)
    # onnxruntime's optimizer and quantiser warn about things that do not apply to BERT graphs (tiny vocabularies,
    # shape-inference pre-processing); keep the progress readable.
    logging.getLogger("fusion_embedlayer").setLevel(logging.ERROR)
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not record.getMessage().startswith("Please consider to run pre-processing"))

    from model_export.export import ExportError, export_bundle

    try:
        bundle = export_bundle(args.checkpoint_dir, args.out_dir, **vars(options))
    except ExportError as error:
        print(f"bertserve-export: error: {error}", file=sys.stderr)
        return 1
    print(bundle.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
