from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.__main__ import main
from service.flags import build_parser, settings_from_args
from service.settings import Settings, discover_bundles
from tests.service.tiny_models import TinyModel


def test_settings_read_the_environment_when_built_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    bad_env = {**os.environ, "BERTSERVE_MAX_BATCH_TOKENS": "not a number", "BERTSERVE_PORT": "-1"}
    imported = subprocess.run(
        [sys.executable, "-c", "import service.app, service.__main__, service.settings"], env=bad_env, check=False
    )
    assert imported.returncode == 0
    monkeypatch.setenv("BERTSERVE_MAX_BATCH_TOKENS", "not a number")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.setenv("BERTSERVE_MAX_BATCH_TOKENS", "1234")
    monkeypatch.setenv("BERTSERVE_MODELS", "a=/x/a, b=/y/b")
    monkeypatch.setenv("BERTSERVE_LOG_LEVEL", "debug")
    settings = Settings()
    assert settings.max_batch_tokens == 1234 and settings.log_level == "debug"
    assert settings.model_sources() == {"a": Path("/x/a"), "b": Path("/y/b")}


def test_models_must_be_name_equals_path() -> None:
    with pytest.raises(ValidationError, match="NAME=PATH"):
        Settings(models=["just-a-path"])
    with pytest.raises(ValidationError):
        Settings(max_batch_size=0)


def test_models_dir_serves_bundle_folders_by_name_and_flags_add_more(
    tiny_models: dict[str, TinyModel], tmp_path: Path
) -> None:
    for task in ("fill-mask", "text-classification"):
        shutil.copytree(tiny_models[task].bundle, tmp_path / f"my-{task}")
    (tmp_path / "notes").mkdir()
    assert set(discover_bundles(tmp_path)) == {"my-fill-mask", "my-text-classification"}
    extra = tiny_models["question-answering"].bundle
    settings = settings_from_args(["--models", str(tmp_path), "--model", f"qa={extra}", "--max-wait-ms", "3"])
    assert settings.model_sources() == {
        "my-fill-mask": tmp_path / "my-fill-mask",
        "my-text-classification": tmp_path / "my-text-classification",
        "qa": extra,
    }
    assert settings.max_wait_ms == 3.0


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTSERVE_PORT", "9000")
    monkeypatch.setenv("BERTSERVE_MAX_QUEUE", "7")
    settings = settings_from_args(["--port", "9100"])
    assert (settings.port, settings.max_queue) == (9100, 7)


def test_bad_bundle_stops_start_up_with_one_line_naming_it(
    tiny_models: dict[str, TinyModel], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(tiny_models["fill-mask"].bundle, tmp_path / "good")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_models["fill-mask"].bundle, broken)
    (broken / "tokenizer.json").write_text("{}")
    assert main(["--models", str(tmp_path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "broken" in lines[0] and "tokenizer.json" in lines[0]
    assert main(["--models", str(tmp_path / "missing")]) != 0
    assert main([]) != 0
    assert "no models" in capsys.readouterr().err


def test_sigterm_turns_readiness_off_before_uvicorn_drains() -> None:
    import signal

    import uvicorn

    from service.app import create_app
    from service.serving import GracefulServer

    app = create_app(Settings())
    server = GracefulServer(uvicorn.Config(app), app)
    assert not app.state.registry.shutting_down
    server.handle_exit(signal.SIGTERM, None)
    assert app.state.registry.shutting_down and server.should_exit
    # the access line is on unless --no-access-log (issue 45: one line per request on the console)
    assert settings_from_args([]).access_log and not settings_from_args(["--no-access-log"]).access_log


def test_every_setting_has_a_flag_whose_help_shows_its_default_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps help at the terminal width
    parser = build_parser()
    flags = {action.dest: action.option_strings for action in parser._actions}
    text = " ".join(parser.format_help().split())
    for name, field in Settings.model_fields.items():
        assert name in flags, f"setting {name} has no flag"
        assert field.description, f"setting {name} has no description (the flag's help)"
        default = field.get_default(call_default_factory=True)
        shown = "none" if default in (None, []) else str(default)
        assert f"(default: {shown}; env BERTSERVE_{name.upper()})" in text, name
    assert flags["models_dir"] == ["--models", "--models-dir"] and flags["models"] == ["--model"]
    assert flags["prepare_inline_chars"] == ["--prepare-inline-chars"]
    assert set(flags) - {"help"} == set(Settings.model_fields)


def test_only_given_flags_override_and_each_reaches_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTSERVE_PREPARE_INLINE_CHARS", "7")
    monkeypatch.setenv("BERTSERVE_ACCESS_LOG", "true")
    assert settings_from_args([]).prepare_inline_chars == 7
    assert settings_from_args(["--prepare-inline-chars", "5"]).prepare_inline_chars == 5
    settings = settings_from_args(
        ["--models-dir", "/m", "--model", "a=/a", "--model", "b=/b", "--log-level", "debug", "--no-access-log"]
    )
    assert (settings.models_dir, settings.models, settings.log_level) == (Path("/m"), ["a=/a", "b=/b"], "debug")
    assert settings.access_log is False
    assert main(["--max-batch-size", "0"]) == 2


def test_the_readme_table_of_request_limits_states_each_limits_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("BERTSERVE_"):
            monkeypatch.delenv(name)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("| setting (flag, env `BERTSERVE_...`) | default | over it |")
    stated = {}
    for line in readme[start:].splitlines()[2:]:  # after the header and its rule, to the table's end
        if not line.strip().startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        stated[cells[0].strip("`")] = cells[1]
    defaults = Settings()
    assert len(stated) >= 12
    for name, default in stated.items():
        assert name in Settings.model_fields, name
        assert default == str(getattr(defaults, name)), name


def fake_cgroup(tmp_path: Path, proc_lines: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(proc_lines)
    return root, proc


def test_available_cpus_take_the_tightest_cgroup_quota_rounded_up(tmp_path: Path) -> None:
    from service.settings import available_cpus

    scheduled = len(os.sched_getaffinity(0))
    # cgroup v2, in a container: its own tree at the root, a 1.5-CPU limit -> 2
    root, proc = fake_cgroup(tmp_path / "a", "0::/\n", {"cpu.max": "150000 100000\n"})
    assert available_cpus(root, proc) == min(scheduled, 2)
    # v2 on a host: the pod's slice above the process's own folder holds the tighter limit
    root, proc = fake_cgroup(
        tmp_path / "b",
        "0::/kubepods/pod1/ctr\n",
        {"kubepods/pod1/cpu.max": "100000 100000\n", "kubepods/pod1/ctr/cpu.max": "max 100000\n"},
    )
    assert available_cpus(root, proc) == 1
    # cgroup v1: the cpu controller's quota and period, -1 meaning none
    v1 = "4:memory:/x\n3:cpu,cpuacct:/ctr\n0::/\n"
    root, proc = fake_cgroup(
        tmp_path / "c",
        v1,
        {"cpu,cpuacct/ctr/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/ctr/cpu.cfs_period_us": "100000\n"},
    )
    assert available_cpus(root, proc) == 1
    root, proc = fake_cgroup(
        tmp_path / "d",
        v1,
        {"cpu,cpuacct/ctr/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/ctr/cpu.cfs_period_us": "100000\n"},
    )
    assert available_cpus(root, proc) == scheduled
    # v1 without a cgroup namespace: the host's path is not under the container's mount, whose root is its limit
    root, proc = fake_cgroup(
        tmp_path / "f",
        "garbage line\n3:cpu,cpuacct:/machine.slice/libpod-1.scope\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "100000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert available_cpus(root, proc) == 1
    # no cgroup files at all (another OS, a masked /sys): the CPUs the process may be scheduled on
    assert available_cpus(tmp_path / "none", tmp_path / "none-proc") == scheduled
    # a quota above the CPUs the process may run on does not raise it
    root, proc = fake_cgroup(tmp_path / "e", "0::/\n", {"cpu.max": f"{100000 * (scheduled + 8)} 100000\n"})
    assert available_cpus(root, proc) == scheduled


def test_a_cpu_limit_sets_the_thread_defaults_and_the_tuning_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    from service import settings as settings_module
    from service.tuning import candidate_sets

    monkeypatch.setattr(settings_module, "available_cpus", lambda: 1)
    monkeypatch.setattr("service.tuning.available_cpus", lambda: 1)
    settings = Settings()
    assert settings.intra_op_threads == 1 and settings.model_workers == 1
    assert candidate_sets(settings, 128)["intra_op_threads"] == [1]
    monkeypatch.setattr(settings_module, "available_cpus", lambda: 6)
    monkeypatch.setattr("service.tuning.available_cpus", lambda: 6)
    settings = Settings()
    assert settings.intra_op_threads == 6 and settings.model_workers == 2
    assert candidate_sets(settings, 128)["intra_op_threads"] == [1, 2, 4, 6]
