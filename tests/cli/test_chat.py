"""`tinyformer chat`: piped lines are continued one by one, as `tinyformer sample` would continue them;
/commands change the settings; mistakes and Ctrl-C end a line or a turn, never the session or in a traceback."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import user_error
from tinyformer import runfolder
from tinyformer.cli import main
from tinyformer.generate import sampling
from tinyformer.runs import load_run
from tinyformer.train import checkpoint as ckpt

pytestmark = pytest.mark.slow  # a trained run (shared)


@pytest.fixture(scope="module")
def lm_run(trained, tmp_path_factory) -> Path:
    """A copy of the shared gpt run with random weights of std 0.5: next-token distributions that depend on the
    context, so a test can tell two contexts apart (30 training steps leave them nearly uniform)."""
    run = tmp_path_factory.mktemp("chat") / "run"
    shutil.copytree(trained, run)
    model = load_run(run).model
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:  # embeddings and projections; layer norms stay as they are
                p.normal_(0.0, 0.5)
    for name in (runfolder.BEST, runfolder.WEIGHTS):
        ckpt.save_weights(model, run / name)
    return run


def chat(monkeypatch, capsys, run, lines: str, *flags: str) -> tuple[int, str, str]:
    """`tinyformer chat RUN FLAGS` in-process with `lines` as its (piped) stdin -> (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    code = main(["chat", str(run), "--device", "cpu", *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def sample(capsys, run, prompt: str, tokens: int, *flags: str) -> str:
    """What `tinyformer sample` prints after the prompt (its newline at the end left out)."""
    assert main(["sample", str(run), "--prompt", prompt, "--tokens", str(tokens), "--device", "cpu", *flags]) == 0
    out = capsys.readouterr().out
    assert out.startswith(prompt) and out.endswith("\n")
    return out[len(prompt) : -1]


def test_each_line_is_continued_after_the_text_so_far_and_greedy_equals_sample(lm_run, monkeypatch, capsys):
    first = sample(capsys, lm_run, "ROMEO:", 30, "--temperature", "0")
    second = sample(capsys, lm_run, "ROMEO:" + first + "\nMORE ROME:", 30, "--temperature", "0")
    lines = "/temperature 0\nROMEO:\nMORE ROME:\n/reset\nROMEO:\n"
    code, out, err = chat(monkeypatch, capsys, lm_run, lines, "--tokens", "30")
    assert (code, err) == (0, "")  # end of input: exit 0
    assert out == f"{first}\n{second}\n{first}\n"  # the second line followed the first turn; /reset forgot it


def test_a_sampled_turn_equals_sample_with_the_same_seed(lm_run, monkeypatch, capsys):
    expected = sample(capsys, lm_run, "ROMEO:", 30, "--seed", "3", "--top-p", "0.9")
    lines = "ROMEO:\n/reset\nROMEO:\n/reset\n/seed 3\nROMEO:\n"
    code, out, err = chat(monkeypatch, capsys, lm_run, lines, "--tokens", "30", "--seed", "3", "--top-p", "0.9")
    assert (code, err) == (0, "")
    turns = [out[i * 31 : i * 31 + 30] for i in range(3)]  # a character run: 30 characters and "\n" per turn
    assert len(out) == 93 and out[30::31] == "\n\n\n"
    assert turns[0] == turns[2] == expected
    assert turns[1] != expected  # the sampler goes on between turns: the same prompt gets a new continuation


def test_mistakes_are_one_line_each_and_the_loop_goes_on(lm_run, monkeypatch, capsys):
    lines = "/top_p 7\n/top_k x\n/temperature\n/frobnicate\nROMEO§\n/top_k 20\n/settings\nROMEO:\n"
    code, out, err = chat(monkeypatch, capsys, lm_run, lines, "--tokens", "25")
    assert code == 0 and "Traceback" not in err
    errors = err.splitlines()
    assert len(errors) == 5 and all(e.startswith("error: ") for e in errors), err
    assert "top_p=7.0" in errors[0] and "(0, 1]" in errors[0]  # SampleConfig's rule, as `sample --top-p 7` has it
    assert "/top_k needs a whole number, got 'x'" in errors[1]
    assert "/temperature takes one value" in errors[2]
    assert "unknown command /frobnicate" in errors[3]
    assert "'§'" in errors[4] and "outside the vocabulary" in errors[4]
    settings, continuation = out.split("\n", 1)
    assert "top_k=20" in settings and "sees 0 of its 32 tokens" in settings  # the bad line left no text behind
    assert len(continuation) == 25 + 1  # 25 characters and the newline


def test_ctrl_c_while_the_model_writes_ends_that_turn_only(lm_run, monkeypatch, capsys):
    greedy = sample(capsys, lm_run, "ROMEO:", 25, "--temperature", "0")
    real, calls = sampling.next_token, []

    def interrupted_at_the_sixth_token(*args, **kw):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(sampling, "next_token", interrupted_at_the_sixth_token)
    code, out, err = chat(monkeypatch, capsys, lm_run, "/temperature 0\nROMEO:\n\n", "--tokens", "20")
    assert (code, err) == (0, "")
    # five characters, then the empty line continued the text so far, the interrupted turn's text included
    assert out == f"{greedy[:5]}\n{greedy[5:25]}\n"


class Interrupted(io.StringIO):
    """A stdin that gives its lines, then Ctrl-C while the next one is awaited."""

    def readline(self, *args) -> str:
        line = super().readline(*args)
        if not line:
            raise KeyboardInterrupt
        return line


def test_ctrl_c_at_the_prompt_ends_the_session_with_130_and_eof_or_quit_with_0(lm_run, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", Interrupted("ROMEO:\n"))
    assert main(["chat", str(lm_run), "--device", "cpu", "--tokens", "10"]) == 130
    out = capsys.readouterr()
    assert out.err == "" and len(out.out) == 11  # the line was answered; then no traceback, no message
    code, out, err = chat(monkeypatch, capsys, lm_run, "/quit\nROMEO:\n")
    assert (code, out, err) == (0, "", "")  # nothing after /quit is read
    assert chat(monkeypatch, capsys, lm_run, "") == (0, "", "")  # end of input at once


def test_chat_takes_only_language_model_runs_and_checks_its_flags(trained, reversal_run, capsys):
    err = user_error(capsys, "chat", str(reversal_run))
    assert "is a 'reverse' run; chat needs a language-model (`train gpt`) run" in err
    assert "its command is `tinyformer translate`" in err
    assert "top_p=7.0" in user_error(capsys, "chat", str(trained), "--top-p", "7")


def test_piped_chat_prints_only_the_continuations(lm_run, capsys):
    expected = sample(capsys, lm_run, "ROMEO:", 20, "--temperature", "0")
    args = ["chat", str(lm_run), "--tokens", "20", "--temperature", "0", "--device", "cpu"]
    r = subprocess.run([sys.executable, "-m", "tinyformer", *args], input="ROMEO:\n", capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == expected + "\n"  # no "> " prompt, no banner: stdin is not a terminal
