"""Speed choices measured on the machine at hand: the fastest wins, by a fake clock; the cache is used, kept
whole by concurrent writers, and never stops a run when it is corrupt, foreign or cannot be written."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
import torch

from tinyformer import choices
from tinyformer import device as dev
from tinyformer.errors import UserError

CPU = torch.device("cpu")


class FakeClock:
    """A clock that moves only when a candidate 'runs': each takes the seconds it was given."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def step(self, name: str, seconds: float, tokens: int = 1000):
        def run() -> int:
            self.calls.append(name)
            self.now += seconds
            return tokens

        return run


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(choices.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(choices, "_memo", {})  # what this process measured: each test starts afresh
    choices._warned.clear()
    return tmp_path / "cache" / "choices.json"


@pytest.mark.parametrize("fast", ["sdpa", "manual"])
def test_the_faster_backend_by_the_clock_is_chosen_and_cached(cache, fast):
    clock = FakeClock()
    slow = "manual" if fast == "sdpa" else "sdpa"
    steps = {fast: clock.step(fast, 0.05), slow: clock.step(slow, 0.3)}
    choice = dev.choose_backend({"shape": [2, 3]}, steps, clock=clock)
    assert (choice.name, choice.source) == (fast, "measured")
    assert choice.tokens_per_s == pytest.approx({fast: 20_000, slow: 1000 / 0.3})
    assert choice.seconds == pytest.approx(clock.now)
    assert clock.calls[:4] == [fast, slow, fast, slow]  # warm-ups, then alternating rounds
    assert f"attention: {fast} 20k tokens/s over {slow} 3,333 (forward + backward), measured in 2.1 s" == choice.line()
    # the same key again: from the cache, nothing timed
    again = dev.choose_backend({"shape": [2, 3]}, {fast: _never, slow: _never}, clock=clock)
    assert (again.name, again.source, again.seconds) == (fast, "cache", 0.0)
    assert "from the cache" in again.line()
    # another shape is another key: measured again
    other = FakeClock()
    steps = {fast: other.step(fast, 0.5), slow: other.step(slow, 0.2)}
    assert dev.choose_backend({"shape": [4, 3]}, steps, clock=other).name == slow


def _never() -> int:
    raise AssertionError("a cached choice must time nothing")


def test_measuring_stops_after_the_round_that_spends_the_budget(cache):
    clock = FakeClock()
    steps = {"sdpa": clock.step("sdpa", 0.4), "manual": clock.step("manual", 0.5)}
    rates, seconds = choices.measure(steps, budget_s=2.0, rounds=5, clock=clock)
    # warm-ups 0.9 s, round 1 ends at 1.8 s (< 2), round 2 at 2.7 s: stop
    assert clock.calls == ["sdpa", "manual"] * 3 and seconds == pytest.approx(2.7)
    assert rates == pytest.approx({"sdpa": 2500, "manual": 2000})
    # steps so long that the warm-ups pass the budget: still one timed round, the warm-ups not counted
    clock = FakeClock()
    first = {"sdpa": [9.0, 3.0], "manual": [1.5, 1.5]}  # sdpa's first call pays for the allocations

    def step(name):
        def run():
            clock.calls.append(name)
            clock.now += first[name].pop(0)
            return 1000

        return run

    rates, seconds = choices.measure({n: step(n) for n in first}, budget_s=2.0, clock=clock)
    assert clock.calls == ["sdpa", "manual"] * 2 and seconds == pytest.approx(15.0)
    assert rates == pytest.approx({"sdpa": 1000 / 3.0, "manual": 1000 / 1.5})


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00garbage", b"[]", b'{"format": "someone-else", "entries": {}}', b""],
    ids=["corrupt", "not-utf8", "a-list", "foreign", "empty"],
)
def test_an_unusable_cache_is_ignored_with_one_warning_and_rewritten(cache, capsys, content):
    cache.parent.mkdir(parents=True)
    cache.write_bytes(content)
    clock = FakeClock()
    steps = {"sdpa": clock.step("sdpa", 0.1), "manual": clock.step("manual", 0.2)}
    assert dev.choose_backend({"k": 1}, steps, clock=clock).name == "sdpa"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ignoring the speed-choice cache" in err and "rewritten" in err
    assert json.loads(cache.read_text())["format"] == choices.FORMAT  # rewritten, whole
    assert dev.choose_backend({"k": 1}, {"sdpa": _never, "manual": _never}).source == "cache"


def test_a_cache_folder_that_cannot_be_written_is_one_warning_and_no_cache(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(choices.CACHE_ENV, str(blocker / "cache"))  # a folder under a file: never creatable
    monkeypatch.setattr(choices, "_memo", {})
    choices._warned.clear()
    for expected in ("measured", "cache"):  # the second time from this process's memory, not from a file
        clock = FakeClock()
        steps = {"sdpa": clock.step("sdpa", 0.2), "manual": clock.step("manual", 0.1)}
        choice = dev.choose_backend({"k": 1}, steps, clock=clock)
        assert (choice.name, choice.source) == ("manual", expected)
    assert not (blocker / "cache").exists()
    monkeypatch.setattr(choices, "_memo", {})  # a new process: measured again
    assert dev.choose_backend({"k": 1}, {"sdpa": lambda: 1, "manual": lambda: 1}).source == "measured"
    err = capsys.readouterr().err
    assert err.count("cannot write the speed-choice cache") == 1 and err.count("\n") == 1


def _writer(folder: str, worker: int, n: int) -> None:
    os.environ[choices.CACHE_ENV] = folder
    for i in range(n):
        choices.remember(f"w{worker}-{i}", {"choice": "sdpa", "tokens_per_s": {"sdpa": float(i)}})


def test_runs_writing_at_once_keep_the_file_whole_and_lose_no_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = json.loads((tmp_path / "choices.json").read_text())["entries"]
    assert set(entries) == {f"w{w}-{i}" for w in range(4) for i in range(15)}
    assert not list(tmp_path.glob(".choices.*.tmp"))  # no temp file left behind


def test_the_bf16_override_replaces_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(dev, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setenv(dev.CPU_BF16_ENV, "1")
    assert dev.native_bf16(CPU) and dev.resolve_precision(CPU, "auto") == "bf16"
    monkeypatch.setattr(dev, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    monkeypatch.setenv(dev.CPU_BF16_ENV, "0")
    assert not dev.native_bf16(CPU) and dev.resolve_precision(CPU, "auto") == "fp32"
    monkeypatch.setenv(dev.CPU_BF16_ENV, "")  # empty: as if unset, the flags decide
    assert dev.resolve_precision(CPU, "auto") == "bf16"
    monkeypatch.setenv(dev.CPU_BF16_ENV, "yes")
    with pytest.raises(UserError, match="TINYFORMER_CPU_BF16='yes' must be 1"):
        dev.native_bf16(CPU)
    assert dev.resolve_precision(CPU, "fp16") == "fp16"  # only an explicit fp16 ever gives fp16 on a CPU


def test_no_home_folder_means_no_cache_and_one_warning(monkeypatch, capsys):
    monkeypatch.delenv(choices.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(choices.Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    choices._warned.clear()
    for _ in range(2):
        monkeypatch.setattr(choices, "_memo", {})  # two processes
        clock = FakeClock()
        steps = {"sdpa": clock.step("sdpa", 0.2), "manual": clock.step("manual", 0.1)}
        assert dev.choose_backend({"k": 2}, steps, clock=clock).source == "measured"
    err = capsys.readouterr().err
    assert err.count("no home folder") == 1 and err.count("\n") == 1


@pytest.mark.parametrize(
    "entry",
    [{"choice": "sdpa", "rates": 5}, {"choice": "flash", "rates": {"sdpa": 1.0, "manual": 2.0}}, {"sdpa": "x"}, []],
)
def test_a_malformed_entry_is_a_miss_with_one_warning(cache, capsys, entry):
    key = choices.key_of({"k": 5})
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"format": choices.FORMAT, "entries": {key: entry}}))
    assert choices.lookup(key, ("sdpa", "manual")) is None
    assert capsys.readouterr().err.count("malformed entry") == 1


def test_what_this_process_measured_is_remembered_without_the_file(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(choices.CACHE_ENV, str(blocker / "cache"))  # nothing can be written
    monkeypatch.setattr(choices, "_memo", {})
    clock = FakeClock()
    steps = {"sdpa": clock.step("sdpa", 0.2), "manual": clock.step("manual", 0.1)}
    assert dev.choose_backend({"k": 6}, steps, clock=clock).source == "measured"
    assert dev.choose_backend({"k": 6}, {"sdpa": _never, "manual": _never}).source == "cache"  # a chat's 2nd line
