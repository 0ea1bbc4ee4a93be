"""The one safe writer (`tinyformer.files`): temp files and folders at new names made exclusively, a link at a
name never written through, and nothing left under a name, or beside it, when a write is stopped (issue 72)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tinyformer import files
from tinyformer.errors import UserError
from tinyformer.files import atomic_write, write_text


def names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_link_planted_at_the_old_temp_name_is_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / ".demo.html.tmp").symlink_to(victim)  # the name the writer used to open with a plain open
    write_text(tmp_path / "demo.html", "page")
    assert victim.read_text() == "mine" and (tmp_path / "demo.html").read_text() == "page"
    assert names(tmp_path) == [".demo.html.tmp", "demo.html", "victim.txt"]  # the planted link is not ours


def test_a_link_at_the_target_is_replaced_by_the_file_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "out.txt").symlink_to(victim)
    write_text(tmp_path / "out.txt", "new")
    assert victim.read_text() == "mine" and not (tmp_path / "out.txt").is_symlink()
    assert (tmp_path / "out.txt").read_text() == "new"


def test_the_file_written_has_the_mode_a_plain_write_gives(tmp_path):
    (tmp_path / "plain.txt").write_text("x")
    write_text(tmp_path / "atomic.txt", "x")
    assert (tmp_path / "atomic.txt").stat().st_mode == (tmp_path / "plain.txt").stat().st_mode


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError, RuntimeError])
def test_a_write_stopped_midway_leaves_the_old_file_and_no_temp(tmp_path, stop):
    target = tmp_path / "weights.bin"
    target.write_bytes(b"old")

    def write(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise stop("stopped")

    with pytest.raises(UserError if stop is OSError else stop):
        atomic_write(target, write)
    assert names(tmp_path) == ["weights.bin"] and target.read_bytes() == b"old"


def test_a_staged_folder_moves_in_whole_or_not_at_all(tmp_path):
    out = tmp_path / "new" / "deeper" / "export"
    with pytest.raises(KeyboardInterrupt), files.staged_folder(out) as folder:
        (folder / "config.json").write_text("{}")
        raise KeyboardInterrupt
    assert names(tmp_path) == []  # neither the export, nor a temp folder, nor the folders made for it
    with files.staged_folder(out) as folder:
        (folder / "config.json").write_text("{}")
    assert names(out) == ["config.json"] and names(out.parent) == ["export"]


def test_a_staged_folder_replaces_links_in_and_at_the_target_never_follows_them(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.json").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").symlink_to(victim / "config.json")
    (out / "notes.txt").write_text("kept")
    with files.staged_folder(out) as folder:
        (folder / "config.json").write_text("{}")
    assert (out / "config.json").read_text() == "{}" and not (out / "config.json").is_symlink()
    assert (out / "notes.txt").read_text() == "kept" and (victim / "config.json").read_text() == "mine"
    linked = tmp_path / "linked"
    linked.symlink_to(victim)
    with files.staged_folder(linked) as folder:
        (folder / "config.json").write_text("{}")
    assert not linked.is_symlink() and names(linked) == ["config.json"]
    assert names(victim) == ["config.json"] and (victim / "config.json").read_text() == "mine"


def test_new_folders_removes_only_the_empty_folders_it_made(tmp_path):
    with pytest.raises(UserError), files.new_folders(tmp_path / "a" / "b"):
        (tmp_path / "a" / "kept.txt").write_text("x")
        raise UserError("refused")
    assert names(tmp_path) == ["a"] and names(tmp_path / "a") == ["kept.txt"]


SIGNALLED = """
import os, signal, sys
from pathlib import Path
from tinyformer import files, interrupt
from tinyformer.files import atomic_write

out, how = Path(sys.argv[1]), sys.argv[2]
def stop(tmp):
    Path(tmp).write_text("half")
    os.kill(os.getpid(), getattr(signal, sys.argv[3]))
try:
    with interrupt.command():
        interrupt.started()
        if how == "file":
            atomic_write(out, stop)
        else:
            with files.staged_folder(out) as folder:
                stop(folder / "config.json")
except KeyboardInterrupt as e:
    sys.exit(128 + interrupt.signum_of(e))
"""


@pytest.mark.parametrize(("how", "signame"), [("file", "SIGTERM"), ("folder", "SIGINT")])
def test_a_real_signal_midway_leaves_nothing_under_the_name_nor_beside_it(tmp_path, how, signame):
    out = tmp_path / "demo.html" if how == "file" else tmp_path / "there" / "hf"
    script = tmp_path / "stop.py"
    script.write_text(textwrap.dedent(SIGNALLED))
    r = subprocess.run([sys.executable, str(script), str(out), how, signame], capture_output=True, timeout=60)
    assert r.returncode == 128 + getattr(signal, signame), r.stderr
    assert names(tmp_path) == ["stop.py"]


def test_a_signal_while_a_staged_folder_moves_in_is_delivered_after_every_file_is_in(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("config.json", "model.safetensors"):
        (out / name).write_text("old")
    replace = os.replace

    def signalled(src, dst):  # Ctrl-C between the two renames
        os.kill(os.getpid(), signal.SIGINT)
        replace(src, dst)

    monkeypatch.setattr(os, "replace", signalled)
    with pytest.raises(KeyboardInterrupt), files.staged_folder(out) as folder:
        for name in ("config.json", "model.safetensors"):
            (folder / name).write_text("new")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"config.json": "new", "model.safetensors": "new"}
    assert names(tmp_path) == ["out"]


def test_a_json_number_of_thousands_of_digits_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"n_layer": ' + "9" * 5000 + "}", encoding="utf-8")
    with pytest.raises(UserError, match=r"config\.json is corrupt: Exceeds the limit"):
        files.read_json(path)
