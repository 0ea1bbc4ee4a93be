"""Exports write only where they are told (issue 72): never into or over the run they export, never through a
link planted at a name they write, and an export that is refused or stopped midway leaves nothing under its
name (nor an empty folder), while an earlier export at that name stays whole until a new one replaces it."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.cli_helpers import user_error
from tinyformer.cli import main
from tinyformer.interrupt import Stopped

RUN_FILES = ("config.json", "model.safetensors", "tokenizer.json")  # an hf export and a run share these names


@pytest.fixture
def gpt_run(trained, tmp_path, monkeypatch) -> Path:
    """A private copy of the session's trained MiniGPT run; the page's cost is not measured (400 greedy tokens:
    seconds, and not what these tests are about)."""
    from tinyformer.export import page

    monkeypatch.setattr(page, "cost", lambda run, precision: (0.0, page.PROBE_TOKENS))
    return Path(shutil.copytree(trained, tmp_path / "run"))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def victims(tmp_path: Path, names) -> dict[str, Path]:
    """A user's file per name, outside the export, holding "mine"."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for name in names:
        (home / name.strip(".")).write_text("mine")
    return {name: home / name.strip(".") for name in names}


def untouched(files: dict[str, Path]) -> bool:
    return all(p.read_text() == "mine" for p in files.values())


def fake_language_model(model, run, out: Path, attention: bool):
    """The onnx export without tracing: the graph written as torch's exporter writes it (a plain open), then
    the check (onnxruntime's session) started."""
    from tinyformer.export import onnx

    with open(out / "model.onnx", "wb") as f:
        f.write(b"graph")
    onnx._session(out / "model.onnx")
    return onnx.OnnxExport(out, ["model.onnx"], 0.0, "faked")


# ---- the run it exports -------------------------------------------------------------------------------------
def test_export_page_over_or_into_the_run_it_exports_is_refused_naming_the_path(gpt_run, tmp_path, capsys):
    before = snapshot(gpt_run)
    (tmp_path / "alias").symlink_to(gpt_run)
    for out, force in (
        (gpt_run / "model.safetensors", ["--force"]),  # was: the run's weights overwritten with HTML
        (gpt_run / "demo.html", []),  # was: written into the run's folder
        (tmp_path / "alias" / "config.json", ["--force"]),  # the same through a link to the folder
    ):
        err = user_error(capsys, "export", "page", str(gpt_run), str(out), *force)
        assert f"{str(out)!r} is in the run folder" in err
    assert snapshot(gpt_run) == before


@pytest.mark.parametrize("fmt", ["hf", "onnx"])
def test_export_hf_and_onnx_into_the_run_folder_are_refused(gpt_run, capsys, fmt):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnxscript")
    before = snapshot(gpt_run)
    err = user_error(capsys, "export", fmt, str(gpt_run), str(gpt_run / "exported"))
    assert "is in the run folder" in err and str(gpt_run / "exported") in err
    assert snapshot(gpt_run) == before


# ---- links ----------------------------------------------------------------------------------------------------
def test_a_link_at_the_pages_old_temp_name_is_not_written_through(gpt_run, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    mine = victims(tmp_path, [".demo.html.tmp"])
    (out / ".demo.html.tmp").symlink_to(mine[".demo.html.tmp"])  # was: the page written into the user's file
    assert main(["export", "page", str(gpt_run), str(out / "demo.html")]) == 0
    assert untouched(mine) and (out / "demo.html").read_bytes().startswith(b"<!")


def test_force_replaces_a_link_at_the_page_and_without_force_a_link_is_refused(gpt_run, tmp_path, capsys):
    mine = victims(tmp_path, ["page.html"])
    page = tmp_path / "demo.html"
    page.symlink_to(mine["page.html"])
    assert "exists" in user_error(capsys, "export", "page", str(gpt_run), str(page))
    assert main(["export", "page", str(gpt_run), str(page), "--force"]) == 0
    assert untouched(mine) and not page.is_symlink() and page.stat().st_size > 1000


def test_export_hf_force_replaces_links_planted_in_the_folder_never_follows_them(gpt_run, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    planted = [*RUN_FILES, *(f".{n}.tmp" for n in RUN_FILES)]  # the names and the old temp names beside them
    mine = victims(tmp_path, planted)
    for name in planted:
        (out / name).symlink_to(mine[name])
    assert main(["export", "hf", str(gpt_run), str(out), "--force"]) == 0
    assert untouched(mine)
    assert all((out / n).is_file() and not (out / n).is_symlink() for n in RUN_FILES)


def test_export_hf_force_replaces_a_link_as_the_folder_never_writes_into_its_target(gpt_run, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "hf").symlink_to(elsewhere)
    assert "is a symbolic link" in user_error(capsys, "export", "hf", str(gpt_run), str(tmp_path / "hf"))
    assert main(["export", "hf", str(gpt_run), str(tmp_path / "hf"), "--force"]) == 0
    assert os.listdir(elsewhere) == [] and not (tmp_path / "hf").is_symlink()
    assert (tmp_path / "hf" / "model.safetensors").is_file()


def test_export_onnx_force_replaces_links_planted_in_the_folder(gpt_run, tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from tinyformer.export import onnx

    monkeypatch.setattr(onnx, "_language_model", fake_language_model)
    monkeypatch.setattr(onnx, "_session", lambda path: None)
    out = tmp_path / "onnx"
    out.mkdir()
    mine = victims(tmp_path, ["model.onnx", "tokenizer.json"])
    for name, victim in mine.items():
        (out / name).symlink_to(victim)  # was: the graph and the tokenizer written into the user's files
    assert main(["export", "onnx", str(gpt_run), str(out), "--force"]) == 0
    assert untouched(mine) and (out / "model.onnx").read_bytes() == b"graph"
    assert (out / "tokenizer.json").read_bytes() == (gpt_run / "tokenizer.json").read_bytes()


# ---- stopped midway -------------------------------------------------------------------------------------------
def interrupted_save(tensors, path, metadata=None):
    Path(path).write_bytes(b"half")
    raise KeyboardInterrupt


def test_an_interrupted_hf_export_leaves_nothing_and_the_rerun_is_not_refused(gpt_run, tmp_path, monkeypatch):
    import safetensors.torch

    out = tmp_path / "exports" / "hf"
    with monkeypatch.context() as m:
        m.setattr(safetensors.torch, "save_file", interrupted_save)  # after config.json, in model.safetensors
        assert main(["export", "hf", str(gpt_run), str(out)]) == 130
    assert not (tmp_path / "exports").exists()  # was: config.json and .model.safetensors.tmp left
    assert main(["export", "hf", str(gpt_run), str(out)]) == 0  # was: refused, "not empty"
    earlier = snapshot(out)
    with monkeypatch.context() as m:
        m.setattr(safetensors.torch, "save_file", interrupted_save)
        assert main(["export", "hf", str(gpt_run), str(out), "--force"]) == 130
    assert snapshot(out) == earlier and os.listdir(out.parent) == ["hf"]  # whole, and no temp beside it


def test_an_interrupted_onnx_export_leaves_no_unchecked_graph(gpt_run, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from tinyformer.export import onnx

    def interrupted_check(path):
        raise KeyboardInterrupt  # after model.onnx is written, before onnxruntime has checked it

    monkeypatch.setattr(onnx, "_language_model", fake_language_model)
    monkeypatch.setattr(onnx, "_session", interrupted_check)
    out = tmp_path / "onnx"
    assert main(["export", "onnx", str(gpt_run), str(out)]) == 130
    assert os.listdir(tmp_path) == ["run"]  # was: out/model.onnx, never checked
    out.mkdir()
    (out / "model.onnx").write_bytes(b"earlier")
    assert main(["export", "onnx", str(gpt_run), str(out), "--force"]) == 130
    assert os.listdir(out) == ["model.onnx"] and (out / "model.onnx").read_bytes() == b"earlier"


def test_a_page_export_terminated_before_its_rename_leaves_no_temp_and_no_folder(gpt_run, tmp_path, monkeypatch):
    def terminated(src, dst):
        raise Stopped(signal.SIGTERM)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", terminated)
        assert main(["export", "page", str(gpt_run), str(tmp_path / "pages" / "demo.html")]) == 143
    assert os.listdir(tmp_path) == ["run"]  # was: pages/.demo.html.tmp


# ---- refusals make nothing ------------------------------------------------------------------------------------
def test_a_refused_onnx_export_leaves_no_folder(reversal_run, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "new" / "onnx"
    err = user_error(capsys, "export", "onnx", str(reversal_run), str(out), "--attention")
    assert "--attention is for a language model" in err
    assert os.listdir(tmp_path) == []  # was: the empty folders new/onnx
