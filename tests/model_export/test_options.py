"""ExportOptions states every export parameter once: export_bundle's defaults and the CLI's flags come from it."""

from __future__ import annotations

import argparse
import ast
import inspect
import types
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from model_export import export as export_module
from model_export.__main__ import build_parser, main, option_dest, option_flag
from model_export.export import export_bundle
from model_export.options import DEFAULTS, ExportOptions

OPTIONS = {option.name: option for option in fields(ExportOptions)}
OPTION_TYPES = get_type_hints(ExportOptions)


def parser_actions() -> dict[str, argparse.Action]:
    return {action.dest: action for action in build_parser()._actions}


def test_every_export_bundle_parameter_is_an_option_with_its_default_and_type() -> None:
    parameters = dict(inspect.signature(export_bundle).parameters)
    assert list(parameters)[:2] == ["checkpoint_dir", "out_dir"]
    del parameters["checkpoint_dir"], parameters["out_dir"]
    assert set(parameters) == set(OPTIONS)
    hints = get_type_hints(export_bundle)
    for name, parameter in parameters.items():
        assert parameter.default == getattr(DEFAULTS, name), name
        assert hints[name] == OPTION_TYPES[name], name


def test_export_bundle_states_no_default_of_its_own() -> None:
    """Each default in export_bundle's signature is read from DEFAULTS, never written out a second time."""
    tree = ast.parse(inspect.getsource(export_module))
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "export_bundle"]
    arguments = function.args.args[-len(function.args.defaults) :]
    assert [argument.arg for argument in arguments] == list(inspect.signature(export_bundle).parameters)[2:]
    for argument, default in zip(arguments, function.args.defaults, strict=True):
        assert ast.unparse(default) == f"DEFAULTS.{argument.arg}", f"{argument.arg} states its own default"


def test_every_option_is_one_flag_whose_default_is_the_options_default() -> None:
    actions = parser_actions()
    assert set(actions) == {"help", "checkpoint_dir", "out_dir", "quiet"} | {option_dest(o) for o in OPTIONS.values()}
    for name, option in OPTIONS.items():
        action = actions[option_dest(option)]
        assert option_flag(option) in action.option_strings, name
        assert action.default == option.default, name
        assert action.help == option.metadata["help"], name
        assert action.choices == (list(option.metadata["choices"]) if "choices" in option.metadata else None), name
        if OPTION_TYPES[name] in (bool, bool | None):
            assert "--no-" + option_flag(option)[2:] in action.option_strings, name
    # The flags' defaults parse into the options' defaults.
    assert main_options([]) == DEFAULTS


def test_flag_spellings_callers_use_are_kept() -> None:
    flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    kept = "--task --optimize --no-optimize --quantize --precision --max-length --opset --atol --rtol --pooling"
    kept += " --normalize --no-normalize --eval-data --max-loss --int8-fp32-ffn-layers --int8-fp32-attention"
    kept += " --int8-calibration --token-embeddings --request-default -q --quiet"
    assert set(kept.split()) <= flags
    # the parsed repeatable flag keeps its name and (NAME, VALUE) pairs (tests/service/test_request_defaults.py)
    args = build_parser().parse_args(["ckpt", "out", "--request-default", "stride=16"])
    assert args.request_default == [("stride", 16)]


def flag_for(name: str) -> tuple[list[str], Any]:
    """A command line that sets option ``name`` to something other than its default, and that value."""
    option, kind = OPTIONS[name], OPTION_TYPES[name]
    flag = option_flag(option)
    if kind in (bool, bool | None):
        return ([f"--no-{flag[2:]}"], False) if option.default is True else ([flag], True)
    if "choices" in option.metadata:
        choice = [choice for choice in option.metadata["choices"] if choice != option.default][-1]
        return [flag, choice], choice
    if kind in (int, int | None):
        return [flag, "3"], 3
    if kind in (float, float | None):
        return [flag, "0.25"], 0.25
    if kind == str | Path | None:
        return [flag, "rows.jsonl"], "rows.jsonl"
    if kind is str:
        return [flag, "query,key"], "query,key"
    if kind == dict[str, Any] | None:
        return [flag, "top_k=3", flag, "mode=first"], {"top_k": 3, "mode": "first"}
    raise AssertionError(f"no test value for option {name} of type {kind}")


def main_options(argv: list[str]) -> ExportOptions:
    """Run the CLI with export_bundle replaced by a recorder; the options it was called with."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return types.SimpleNamespace(path=Path(args[1]))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export_module, "export_bundle", record)
        assert main(["ckpt", "out", "-q", *argv]) == 0
    ((positional, keywords),) = calls
    assert positional == ("ckpt", "out")
    return ExportOptions(**keywords)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_a_flag_on_the_command_line_reaches_export_bundle(name: str) -> None:
    argv, value = flag_for(name)
    assert getattr(DEFAULTS, name) != value
    options = main_options(argv)
    assert getattr(options, name) == value
    assert {key: item for key, item in vars(options).items() if key != name} == {
        key: item for key, item in vars(DEFAULTS).items() if key != name
    }


def test_choices_outside_the_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ckpt", "out", "--quantize", "int4"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err
