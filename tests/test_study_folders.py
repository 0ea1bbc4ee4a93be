"""A study refused on its inputs makes nothing: its inputs are checked before its folder is made, and a study
that stops leaves no empty folder behind (issue 72)."""

from __future__ import annotations

import pytest

from tests.cli_helpers import user_error


@pytest.mark.parametrize(
    ("study", "flags", "message"),
    [
        ("merges", ["--data", "{tmp}/missing.txt"], "does not exist"),
        ("tagging", ["--data", "{tmp}/play.csv"], "give a play text (.txt)"),
        ("budgets", ["--quick", "--nanogpt", "{tmp}/no-checkout"], "no nanoGPT checkout there"),
    ],
)
def test_a_refused_study_leaves_no_folder(tmp_path, capsys, study, flags, message):
    (tmp_path / "play.csv").write_text("a,b\n")
    out = tmp_path / "studies" / study
    err = user_error(capsys, "experiment", study, *(f.format(tmp=tmp_path) for f in flags), "--out", str(out))
    assert message in err
    assert not (tmp_path / "studies").exists()  # was: the study's empty folder


def test_a_study_refused_on_its_texts_contents_or_stopped_midway_leaves_no_folder(tmp_path, capsys, monkeypatch):
    from tinyformer.cli import main
    from tinyformer.experiments import merges

    latin1 = tmp_path / "play.txt"
    latin1.write_bytes("Rom\xe9o\n".encode("latin-1"))
    out = tmp_path / "studies" / "merges"
    assert "not UTF-8" in user_error(capsys, "experiment", "merges", "--data", str(latin1), "--out", str(out))
    assert not (tmp_path / "studies").exists()

    def stopped(train, n):
        raise KeyboardInterrupt  # after the folder is made, before anything is in it

    monkeypatch.setattr(merges, "bpe_merges", stopped)
    assert main(["experiment", "merges", "--quick", "--data", str(latin1.with_name("ok.txt")), "--out", str(out)]) == 2
    latin1.with_name("ok.txt").write_text("to be or not to be\n" * 50)
    assert (
        main(["experiment", "merges", "--quick", "--data", str(latin1.with_name("ok.txt")), "--out", str(out)]) == 130
    )
    assert not (tmp_path / "studies").exists()
