"""The seq2seq-decoding study at --quick size: a row per source length, every time positive, the forced output
length, the same tokens cached and uncached, speed-ups and encode shares computed from the medians shown."""

import json

import pytest

from tinyformer.errors import UserError
from tinyformer.experiments import EXPERIMENTS, seq2seq_decoding


def test_quick_study_writes_a_row_per_length_from_its_own_medians(quick_study):
    import matplotlib.image

    study = quick_study("seq2seq-decoding")
    tmp_path, path = study.folder, study.report
    figures = json.loads((tmp_path / "figures.json").read_text())
    rows = figures["rows"]
    assert [r["length"] for r in rows] == list(seq2seq_decoding.QUICK_LENGTHS)
    for r in rows:
        assert r["generated"] == r["length"] + 1  # EOS could not shorten the work
        assert set(r["ms"]) == set(seq2seq_decoding.WAYS) and all(t > 0 for t in r["ms"].values())
        assert r["same_tokens"] == {"greedy": True, "beam 4": True}
        for k in ("greedy", "beam 4"):
            assert r["speedup"][k] == pytest.approx(r["ms"][f"{k} uncached"] / r["ms"][f"{k} cached"])
            assert r["encode_share"][k] == pytest.approx(r["ms"]["encode"] / r["ms"][f"{k} cached"])
            assert 0 < r["encode_share"][k] < 1  # a decoding call includes its own encode
    text = path.read_text()
    for r in rows:
        line = next(x for x in text.splitlines() if x.startswith(f"| {r['length']} |"))
        assert f"{r['ms']['beam 4 cached']:.1f}" in line and f"{r['speedup']['greedy']:.2f}x" in line
    assert "same tokens in every measured call: yes" in text
    assert f"{figures['machine']['torch_threads']} torch thread" in text
    assert "| source length |" in study.stdout  # the table is printed too
    img = matplotlib.image.imread(tmp_path / "time_vs_length.png")
    assert img.shape[0] > 200 and float(img[..., :3].std()) > 0.05
    assert EXPERIMENTS["seq2seq-decoding"].function is seq2seq_decoding.run


def test_takes_no_data():
    with pytest.raises(UserError, match="takes no --data"):
        seq2seq_decoding.run(None, quick=True, data="x.txt")
