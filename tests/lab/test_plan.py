"""Making the lab's sources: the plan's estimate, the schedule (side by side, timed ones alone, dependencies,
failures), the stamps and the stale check, and the report card."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tinyformer.lab.placeholders import made_text
from tinyformer.lab.sources import SOURCES, needs
from tools.lab import plan
from tools.lab.plan import Job, makespan, run_jobs
from tools.lab.stamps import changed_since, code_of, read_stamp, stamp

ROOT = Path(__file__).resolve().parents[2]


def test_an_estimate_is_the_stamped_wall_time_scaled_by_the_two_calibrations():
    same = {"speed": 80.0, "calibration": plan.CALIBRATION}
    assert plan.estimate({"wall_s": 600, **same}, 40.0) == 1200  # a machine half as fast: twice the time
    assert plan.estimate({"wall_s": 600, **same}, 160.0) == 300
    assert plan.estimate({}, 40.0) is None  # never stamped: no estimate, and the plan says so
    assert plan.estimate({"wall_s": 600}, 40.0) is None
    assert plan.estimate({"wall_s": 0.0, **same}, 40.0) == 0  # made in no time: known, not "?"
    # steps per second of another calibration's workload are another unit: the wall time, unscaled
    assert plan.estimate({"wall_s": 600, "speed": 80.0, "calibration": "older"}, 40.0) == 600
    assert plan.estimate({"wall_s": 600, "speed": 80.0}, 40.0) == 600


def test_makespan_runs_the_longest_ready_job_first_and_waits_for_what_each_needs():
    jobs = [Job("a", (), 30.0), Job("b", (), 20.0), Job("c", (), 10.0), Job("d", ("a",), 5.0)]
    assert makespan(jobs, 1) == 65
    assert makespan(jobs, 2) == 35  # a | b, c ... then d after a: a=30, d 30..35; b 0..20, c 20..30
    assert makespan([Job("x", (), 10.0), Job("y", ("x",), 10.0)], 2) == 20  # a chain gains nothing
    timed = [Job("t", (), 7.0, alone=True), Job("u", (), 4.0, alone=True), Job("v", ("t",), 1.0)]
    assert makespan([*jobs[:3], *timed], 2) == 30 + 11 + 1  # side by side, then alone, then what reads them
    assert makespan([Job("z", (), 10.0)], 2, busy={"a": 3.0}) == 10  # running jobs' time left counts


def write_after(seconds: float | dict, folder: Path, fail: str = ""):
    def work(name: str) -> None:
        (folder / f"{name}.start").write_text(repr(time.monotonic()))
        time.sleep(seconds.get(name, 0.1) if isinstance(seconds, dict) else seconds)
        if name == fail:
            raise RuntimeError(f"{name} broke")
        (folder / f"{name}.end").write_text(repr(time.monotonic()))

    return work


def span(folder: Path, name: str) -> tuple[float, float]:
    return float((folder / f"{name}.start").read_text()), float((folder / f"{name}.end").read_text())


def test_jobs_run_side_by_side_a_timed_one_alone_and_after_what_it_needs(tmp_path):
    jobs = [Job("a", (), 1.0), Job("b", (), 1.0), Job("t", (), 1.0, alone=True), Job("c", ("t",), 1.0)]
    lines: list[str] = []
    work = write_after({"a": 0.9, "b": 0.3, "t": 0.3, "c": 0.1}, tmp_path)  # t is ready when b ends, a runs on
    out = run_jobs(jobs, work, 2, lambda n: tmp_path / "logs" / f"{n}.log", 10.0, lines.append)
    assert [m.name for m in out.failed] == [] and len(out.made) == 4
    a, b, t, c = (span(tmp_path, n) for n in "abtc")
    assert a[0] < b[1] and b[0] < a[1]  # a and b overlapped
    assert t[0] >= max(a[1], b[1]) and c[0] >= t[1]  # t alone, c after the t it needs
    assert any("left" in line and "4/4 made" in line for line in lines)
    assert (tmp_path / "logs" / "a.log").is_file()  # each worker's output, kept


def test_a_failed_job_is_reported_and_what_needs_it_never_starts(tmp_path):
    jobs = [Job("a", (), 1.0), Job("b", ("a",), 1.0), Job("c", (), 1.0)]
    out = run_jobs(jobs, write_after(0.05, tmp_path, fail="a"), 2, lambda n: tmp_path / f"{n}.log", 10.0, print)
    assert [m.name for m in out.failed] == ["a"] and out.failed[0].code == 1
    assert "RuntimeError: a broke" in (tmp_path / "a.log").read_text()
    assert out.skipped == ["b"] and [m.name for m in out.made] == ["c"]
    card = plan.card(out, {"c": "best val loss 1.5"}, tmp_path)
    text = card.read_text()
    assert "| c | best val loss 1.5 |" in text and "1 failed, 1 not started" in text
    assert (tmp_path / "lab-card.png").stat().st_size > 1000
    assert json.loads((tmp_path / "lab-card.json").read_text())["failed"] == ["a"]


def test_a_source_needs_the_source_that_makes_what_it_reads_and_waits_for_what_it_reuses():
    assert needs(SOURCES["lab/reverse-cross"]) == ("experiments/reverse-ablation/baseline",)  # not the whole study
    cells = {n for n in SOURCES if n.startswith("experiments/reverse-ablation/")}
    assert set(needs(SOURCES["experiments/reverse-ablation"])) == cells  # the study reuses every cell
    for study in ("qa", "tagging", "classifiers"):  # one masked LM for the three, made first
        assert needs(SOURCES[f"experiments/{study}"]) == ("experiments/classifiers/mlm",)
    assert "experiments/ablation" in needs(SOURCES["experiments/scale"])  # the shared baseline
    assert needs(SOURCES["lab/gpt-info"]) == ("lab/gpt",)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_source_is_stale_once_a_file_of_its_code_changes_after_its_stamp(tmp_path):
    repo, run = tmp_path / "repo", tmp_path / "run"
    (repo / "src/tinyformer/train").mkdir(parents=True)
    (repo / "docs").mkdir()
    run.mkdir()
    (repo / "src/tinyformer/train/trainer.py").write_text("x = 1\n")
    (repo / "docs/guide.md").write_text("a\n")
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "init", "--allow-empty")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    record = stamp(run / "lab.json", repo, 12.5, 80.0, "a CPU")
    assert read_stamp(run / "lab.json") == record and record["wall_s"] == 12.5 and not record["dirty"]
    paths = code_of([["train", "gpt"]])
    assert changed_since(repo, record, paths) == []
    assert made_text(record, []) == f"{record['commit'][:7]}, {record['date'][:10]}"
    (repo / "docs/guide.md").write_text("b\n")  # not its code
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "docs")
    assert changed_since(repo, record, paths) == []
    (repo / "src/tinyformer/train/trainer.py").write_text("x = 2\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "loop")
    assert changed_since(repo, record, paths) == ["src/tinyformer/train/trainer.py"]
    assert made_text(record, ["src/tinyformer/train/trainer.py"]).endswith("stale: 1 file of its code changed since")
    assert changed_since(None, record, paths) is None and changed_since(repo, {}, paths) is None
    assert made_text({}, None).startswith("not stamped")


def test_a_preset_added_after_a_stamp_leaves_it_fresh_and_a_changed_one_makes_it_stale(tmp_path):
    repo, run = tmp_path / "repo", tmp_path / "run"
    presets = repo / "src/tinyformer/presets"
    presets.mkdir(parents=True)
    run.mkdir()
    (presets / "gpt_cpu_quick.toml").write_text("lr = 3e-3\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    record = stamp(run / "lab.json", repo, 1.0, 80.0, "a CPU")
    paths = code_of([["train", "gpt", "--config", "gpt_cpu_quick"]])
    (presets / "gpt_speedrun.toml").write_text("lr = 1e-2\n")  # new: nothing stamped before it read it
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a new preset")
    assert changed_since(repo, record, paths) == []
    table = code_of([["lab", "recipes", "gpt"]])  # reads every preset: the new one is in its table now
    assert changed_since(repo, record, table) == ["src/tinyformer/presets/gpt_speedrun.toml"]
    (presets / "gpt_cpu_quick.toml").write_text("lr = 1e-3\n")  # changed: what the source read is not it
    (presets / "gpt_speedrun.toml").write_text("lr = 2e-2\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "both changed")
    assert changed_since(repo, record, paths) == ["src/tinyformer/presets/gpt_cpu_quick.toml"]


def test_a_changed_preset_makes_stale_only_the_sources_that_read_it(tmp_path):
    """A command reads a preset by its name: in its arguments, or in its code (the speedrun study names its own
    preset, and takes the CPU preset from gpt_studies, which it imports); `lab recipes` reads them all."""
    repo, run = tmp_path / "repo", tmp_path / "run"
    presets = repo / "src/tinyformer/presets"
    presets.mkdir(parents=True)
    run.mkdir()
    for name in ("gpt_cpu_quick", "gpt_speedrun", "mlm_fast"):
        (presets / f"{name}.toml").write_text("lr = 3e-3\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    record = stamp(run / "lab.json", repo, 1.0, 80.0, "a CPU")
    (presets / "gpt_speedrun.toml").write_text("lr = 2e-2\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "the speedrun preset changed")
    speedrun = code_of([["experiment", "speedrun", "--out", "x"]])
    assert "src/tinyformer/experiments/gpt_studies.py" in speedrun  # imported by speedrun.py
    assert "src/tinyformer/presets/gpt_cpu_quick.toml" in speedrun  # its base preset, named in gpt_studies.py
    assert changed_since(repo, record, speedrun) == ["src/tinyformer/presets/gpt_speedrun.toml"]
    assert changed_since(repo, record, code_of([["lab", "recipes", "gpt"]])) == [
        "src/tinyformer/presets/gpt_speedrun.toml"
    ]
    for argv in (["experiment", "ablation"], ["train", "gpt", "--config", "gpt_cpu_quick"], ["train", "mlm"]):
        assert changed_since(repo, record, code_of([argv])) == [], argv
    (presets / "mlm_fast.toml").write_text("lr = 1e-3\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "the masked-LM preset changed")
    assert changed_since(repo, record, code_of([["train", "mlm", "--config", "configs/mlm_fast.toml"]])) == [
        "src/tinyformer/presets/mlm_fast.toml"
    ]


def test_every_source_has_a_stamp_of_its_own():
    """Two sources that write into one folder (the bake-off and its MiniLM rows) keep two stamps: with one
    file, the second overwrote the first's wall time and the next plan read 3.6 min for a 25-minute source."""
    stamps = [s.stamp for s in SOURCES.values()]
    assert len(set(stamps)) == len(stamps)
    assert SOURCES["experiments/classifiers"].stamp == "experiments/classifiers/lab.json"
    assert SOURCES["experiments/classifiers-minilm"].stamp == "experiments/classifiers/lab-classifiers-minilm.json"


def test_a_sources_code_is_what_its_commands_can_run_found_from_the_imports():
    """Not a list: the modules the command's verb, its study, its tasks and the runs it reads import, at any
    depth and inside functions; a view that never trains does not hold the trainer."""
    ablation = code_of([["experiment", "ablation", "--out", "x"]])
    for module in ("train/trainer.py", "tasks/gpt.py", "experiments/gpt_studies.py", "plots.py", "fonts.py"):
        assert f"src/tinyformer/{module}" in ablation, module  # fonts: imported by plots only
    assert "src/tinyformer/tasks/mlm.py" not in ablation and "src/tinyformer/viz/html.py" not in ablation
    cross = code_of([["viz", "cross-attention", "{runs}/experiments/reverse-ablation/baseline", "7", "3"]])
    assert "src/tinyformer/tasks/reverse.py" in cross  # the task of the run it reads, which another source trains
    variants = code_of([["experiment", "attention-variants"]])  # its cases, measured as the benchmarks measure
    assert "src/tinyformer/experiments/context.py" in variants and "src/tinyformer/measure.py" in variants
    bert = code_of([["viz", "bert", "--sentence", "a b"]])
    assert "src/tinyformer/viz/hf.py" in bert and "src/tinyformer/train/trainer.py" not in bert


def test_a_committed_change_stales_exactly_the_sources_that_import_it_even_indirectly(tmp_path):
    """The issue's case: a module no source's commands name, reached through others (the tag and qa tasks'
    data, which the tagging and QA studies reach only through the task their cells name), makes those two
    sources stale and no other; a module no command imports (the notebooks' helper) makes none stale."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "src", repo / "src", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    record = stamp(tmp_path / "lab.json", repo, 1.0, 80.0, "a CPU")
    codes = {name: code_of(source.argv(False)) for name, source in SOURCES.items()}

    def stale_after(module: str) -> set[str]:
        with (repo / "src/tinyformer" / module).open("a") as f:
            f.write("\n# changed\n")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", f"change {module}")
        return {name for name, code in codes.items() if changed_since(repo, record, code)}

    assert stale_after("notebook.py") == set()
    assert stale_after("data/tagging.py") == {"experiments/tagging", "experiments/qa"}
    assert "experiments/kv-cache" in stale_after("plots.py")  # the contributor's try: plots was in no source


def test_no_committed_fact_is_stale_without_saying_so():
    """Each source's `made` fact (the README's last column, the guide's index) names its stamp and says
    `stale` when its code changed after it: a commit that changes that code without `make lab` fails here."""
    from tools.lab.build import stale_of
    from tools.lab.stamps import repository

    root = repository(ROOT)
    if root is None:
        pytest.skip("not a git checkout: staleness cannot be told")
    facts = json.loads((ROOT / "docs/lab/facts.json").read_text(encoding="utf-8"))
    for name, record in facts["stamps"].items():
        changed = stale_of(root, name, record)  # its code changed since it was made or checked, or what moved
        if changed is None and record.get("commit"):
            pytest.skip(f"this clone lacks commit {record['commit']}")
        assert facts["stale"].get(name) == (changed or None), f"run `make lab`: {name} is stale since {changed}"
        for key, value in facts["values"].items():
            if key == f"{name}: made":
                assert value == made_text(record, changed), key


def test_ctrl_c_in_a_worker_stops_the_build_after_every_worker_has_ended(tmp_path):
    """A worker whose training was interrupted exits 130 (its state saved): the build passes the signal on, once,
    to the other workers (each in a process group of its own, so a Ctrl-C at the terminal reaches the build
    alone), waits for them, and raises KeyboardInterrupt; running it again resumes."""

    def work(name: str) -> None:
        if name == "a":
            time.sleep(0.5)
            raise KeyboardInterrupt
        try:
            time.sleep(30)
            (tmp_path / f"{name}.end").write_text("ended")
        except KeyboardInterrupt:
            (tmp_path / f"{name}.end").write_text(f"interrupted in group {os.getpgid(0)} (pid {os.getpid()})")
            raise

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_jobs([Job("a", (), 1.0), Job("b", (), 2.0)], work, 2, lambda n: tmp_path / f"{n}.log", 10.0, print)
    said = (tmp_path / "b.end").read_text()  # b was told and waited for, not orphaned nor left to finish
    assert said.startswith("interrupted") and time.monotonic() - began < 20
    group, pid = said.split("group ")[1].split(" (pid ")
    assert group == pid.rstrip(")") != str(os.getpgid(0))  # its own process group


def test_the_lab_tells_deterministic_facts_from_measured_ones_and_names_those_a_rebuild_moved():
    from tools.lab.build import deterministic, unreproduced

    for key in (
        "experiments/ablation: baseline / best val loss",
        "experiments/tagging: random init / steps x batch",
        "experiments/ablation: no-mask / its sample's loss under baseline",
        "experiments/reverse-ablation: one-head / alignment",
        "lab/gpt: config.model.n_embd",
    ):
        assert deterministic(key), key
    for key in (
        "experiments/kv-cache: table 1: 128 / cache ms/token",
        "experiments/scale: base / train s | ,.0f",
        "experiments/classifiers: textcnn / inference ex/s",
        "lab/bench-rnn: bench.rnn.rows.0.scratch_tokens_per_s | ,.0f",
        "lab/bench-attention: bench.attention.4.manual_ms | .1f",
        "lab/gpt: made",
        "experiments/seq2seq-decoding: 200 / encode share, greedy cached",
        "fig lab/gpt: loss.png",
        "text lab/gpt-info: stdout.txt",
        "experiments/practice: baseline / saved activations MiB",
        "experiments/classifiers/mlm: final train train_seconds",
        "experiments/classifiers: lab-classifiers-minilm.date",
        "lab/bench-attention: bench.attention.0.sdpa_peak_mb",
        "lab/bench-rnn: bench.rnn.rows.0.measurements.scratch.0",
        "experiments/seq2seq-decoding: figures.rows.0.encode_share.greedy",
        "experiments/attention-variants: figures.crossover.train.manual",
    ):
        assert not deterministic(key), key
    before = {"a: val loss": "1.5", "a: train s": "10", "b: val loss": "2.0"}
    now = {"a: val loss": "1.6", "a: train s": "12", "b: val loss": "2.1"}
    assert unreproduced(before, now, ["a"]) == {"a: val loss": ["1.5", "1.6"]}  # b's code changed: not compared


# ---- the hour (issue 71): what `lab build --train` plans from the committed stamps -----------------------------------
HOUR_S = 3600.0
# Work a commit took out of a source after its last stamp: (that stamp's commit, seconds cut, the calibrated speed of
# the machine they were timed on). While that stamp is the source's newest, the plan's estimate for it is the stamp's
# less the cut, both scaled to the machine planned for; made again, the source is planned from its own stamp. Each
# cut is timed, not guessed: the passes it removed (CPU seconds of one thread, fp32, on an Intel Xeon without AMX,
# 15.6 steps/s when idle) times how often the study ran them. The stamps' machine trained these studies in bf16 (it
# has AMX) and ran these passes, inference and data preparation, in fp32 as here.
CUTS = {
    "experiments/classifiers": ("81128db", 13.0, 15.6),  # 4469cea: 8 inference timings, not 13 (0.63 s a pass)
    "experiments/classifiers-minilm": ("81128db", 55.0, 15.6),  # 4469cea: 2, not 12 (MiniLM 2.1 s, small 0.63 s)
    "experiments/tagging": ("81128db", 15.0, 15.6),  # 23ed2fe: 38 evaluations 0.27 s, 13 preparations 0.37 s shorter
    "experiments/qa": ("81128db", 26.0, 15.6),  # ea5577d: 13 preparations 2.0 s shorter
}


def planned(name: str, record: dict, speed: float) -> float | None:
    """The plan's estimate for source `name` from its stamp `record` on a machine of calibrated `speed`, less the
    work a later commit cut (`CUTS`) while the stamp predates it."""
    seconds = plan.estimate(record, speed)
    commit, cut, timed_at = CUTS.get(name, ("-", 0.0, speed))
    if seconds is not None and str(record.get("commit", "")).startswith(commit):
        seconds = max(0.0, seconds - cut * timed_at / speed)
    return seconds


def hour() -> tuple[list[Job], dict]:
    """The jobs of `lab build --train` (every source the guide uses but the extras) with their estimates for the
    machine of the last whole build (facts.json's `build`: its calibration and workers), and that build."""
    from tools.lab.build import guide_texts, used_sources

    facts = json.loads((ROOT / "docs" / "lab" / "facts.json").read_text(encoding="utf-8"))
    build, stamps = facts["build"], facts["stamps"]
    names = used_sources(guide_texts(ROOT / "docs" / "lab" / "templates", ROOT / "README.md"))
    jobs = [
        Job(n, needs(SOURCES[n]), planned(n, stamps.get(n, {}), build["speed"]), SOURCES[n].alone)
        for n in names
        if not SOURCES[n].extra
    ]
    return jobs, build


def test_a_cut_counts_only_against_the_stamp_it_was_timed_against():
    jobs, build = hour()
    by_name = {j.name: j for j in jobs}
    stamps = json.loads((ROOT / "docs" / "lab" / "facts.json").read_text(encoding="utf-8"))["stamps"]
    for name, (commit, cut, timed_at) in CUTS.items():
        assert name in by_name, f"{name} is not made by the hour's build"
        whole = plan.estimate(stamps[name], build["speed"])
        if stamps[name]["commit"].startswith(commit):
            assert by_name[name].seconds == pytest.approx(whole - cut * timed_at / build["speed"])
            assert 0 < by_name[name].seconds < whole
        remade = {**stamps[name], "commit": "f" * 10}  # made again after the cut: its own wall time says it
        assert planned(name, remade, build["speed"]) == whole
    assert all(j.seconds is not None for j in jobs), "a source of the hour has never been stamped"


@pytest.mark.xfail(
    strict=True,
    reason="issue 71: 81.9 min for the Intel Xeon with AMX the stamps of 81128db were made on (81.0 after the cuts "
    "in CUTS); the side-by-side work must fall by about 2,500 s more, of which the encoder studies offer little "
    "without changing their figures (see CUTS): the reverse-ablation cells (about 2,580 s there), the GPT studies "
    "(about 2,300 s) and the padding of the classifier's batches are where it is",
)
def test_the_hours_plan_fits_in_an_hour_on_the_machine_its_stamps_were_measured_on():
    jobs, build = hour()
    total = makespan(jobs, build["workers"])
    biggest = ", ".join(f"{j.name} {j.seconds / 60:.1f}" for j in sorted(jobs, key=lambda j: -j.seconds)[:8])
    assert total <= HOUR_S, (
        f"the hour's {len(jobs)} sources plan {total / 60:.1f} min, {build['workers']} at a time, at "
        f"{build['speed']} steps/s; the largest (min): {biggest}"
    )
