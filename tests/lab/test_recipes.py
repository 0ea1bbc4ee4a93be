"""The recipe table: read from the presets against the course's recipe, never typed, and the manual's copy is it."""

from __future__ import annotations

from pathlib import Path

from tinyformer import config as cfg
from tinyformer import course
from tinyformer.lab.recipes import SAME, differences, markdown, presets_of

ROOT = Path(__file__).resolve().parents[2]


def test_each_row_is_a_key_a_preset_sets_to_something_else_than_the_course():
    for task in course.RECIPES:
        names, rows = differences(task)
        listed = {key for key, _, _ in rows}
        for name, layer in presets_of(task).items():
            set_keys = {f"{s}.{k}" for s, values in layer.items() if isinstance(values, dict) for k in values}
            column = {key for key, _, cells in rows if cells[names.index(name)] != SAME}
            assert column <= set_keys, (name, column - set_keys)  # only what the preset itself sets
            resolved = cfg.resolve(cfg.resolve(*_defaults(task)), [layer], [])
            for key in set_keys - column:  # a key it sets but that is not listed: the course's own value
                section, field = key.split(".")
                assert getattr(getattr(resolved, section), field) == course.RECIPES[task].get(key, _default(task, key))
        assert listed == {key for key, _, cells in rows if any(c != SAME for c in cells)}


def _defaults(task: str):
    from tinyformer.tasks import get_task

    return get_task(task).default_config(), [], []


def _default(task: str, key: str):
    section, field = key.split(".")
    return getattr(getattr(_defaults(task)[0], section), field)


def test_a_preset_that_changes_a_key_shows_in_the_table(tmp_path, monkeypatch):
    """Written to the presets folder, a new preset is a new column, its change a row."""
    folder = tmp_path / "presets"
    folder.mkdir()
    for p in cfg.PRESETS.glob("*.toml"):
        (folder / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "mine.toml").write_text('task = "reverse"\n[model]\nn_head = 8\n', encoding="utf-8")
    monkeypatch.setattr(cfg, "PRESETS", folder)
    names, rows = differences("reverse")
    assert "mine" in names and ("model.n_head", 4, ["·" if n != "mine" else 8 for n in names]) in rows


def test_the_manual_shows_the_table_as_the_command_prints_it():
    manual = (ROOT / "docs" / "manual.md").read_text(encoding="utf-8")
    start = manual.index("<!-- recipes:")
    block = manual[manual.index("\n", start) + 1 : manual.index("<!-- /recipes -->")]
    assert block == markdown(), "the manual's recipe table is stale: paste the output of `tinyformer lab recipes`"
