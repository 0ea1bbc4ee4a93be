"""The exported page against what a run holds (issue 72): a run's name, prompt or info cannot take the place of
the page's script or style, and the page's byte-level BPE cuts text where the run's tokenizer does, white space
the two regex engines disagree on included. The engine runs in node (no browser needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.cli_helpers import user_error
from tests.export.test_page import CHARS, SAMPLE, random_gpt
from tinyformer.data.bpe import BPETokenizer
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.export.page import PAGE, page_data, render, tokenizer_data

SLOTS = ("CSP", "TITLE", "STYLE", "DATA", "SCRIPT")


@pytest.mark.parametrize("slot", SLOTS)
def test_a_placeholder_in_the_name_prompt_or_info_is_text_not_a_slot(slot):
    planted = "{{" + slot + "}}"
    sample = SAMPLE | {"prompt": f"say {planted}"}
    data = page_data(random_gpt(), CharTokenizer(CHARS), "fp32", f"run-{planted}", sample, f"data.path x/{planted}")
    html = render(data)
    script = (PAGE / "engine.js").read_text(encoding="utf-8") + "\n" + (PAGE / "page.js").read_text(encoding="utf-8")
    assert html.count(script) == 1 and re.findall(r"<script>(.*?)</script>", html, re.S) == [script]
    assert html.count("<style>") == 1 and "{{STYLE}}" not in html.split("<style>")[1].split("</style>")[0]
    got = json.loads(re.search(r'<script type="application/json" id="tf-model">(.*?)</script>', html, re.S)[1])
    assert got["name"] == f"run-{planted}" and got["sample"]["prompt"] == f"say {planted}"
    assert got["info"] == f"data.path x/{planted}"
    assert f"<title>run-{planted} · tinyformer</title>" in html  # the title shows the name as it is


# U+FEFF (JavaScript's \s, not the run's), U+0085 (the run's, not JavaScript's), U+2028, NBSP, a ZWJ emoji
# sequence, NUL, and ordinary text around them
TEXTS = [
    "\ufeffHello, world",
    "to be\ufeff or not",
    "line\x85next \x85\x85 end",
    "a\u2028b \u2028\u2028c",
    "price\u00a0100 \u00a0 x\u00a0\u00a0y",
    "family 👩\u200d👩\u200d👧 here👩\u200d💻!",
    "nul\x00byte \x00\x00 x",
    "ROMEO:\nBut, soft! what light through yonder window breaks?\n\n  It's 42 o'clock.\t\r\n",
    " \ufeff\x85\u2028\u00a0\x00 ",
]


def node_encode(tmp_path, tokenizer: dict, texts: list[str]) -> list[list[int]]:
    """Each text's ids as the page's engine.js encodes them, run in node."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's tokenizer cannot be run outside a browser here")
    driver = (
        "\nconst input = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
        "const t = new ByteBPE(input.tokenizer.vocab, input.tokenizer.merges, input.tokenizer.specials);\n"
        "process.stdout.write(JSON.stringify(input.texts.map((s) => t.encode(s))));\n"
    )
    script = tmp_path / "encode.js"
    script.write_text((PAGE / "engine.js").read_text(encoding="utf-8") + driver, encoding="utf-8")
    stdin = json.dumps({"tokenizer": tokenizer, "texts": texts})
    r = subprocess.run([node, str(script)], input=stdin, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout)


def test_the_page_encodes_text_as_the_run_does_white_space_nul_and_emoji_included(tmp_path):
    tok = BPETokenizer.train(TEXTS * 3, vocab_size=400)
    assert node_encode(tmp_path, tokenizer_data(tok), TEXTS) == [tok.encode(t) for t in TEXTS]


@pytest.mark.parametrize("command", [["info"], ["sample", "--tokens", "3"], ["export", "page"]])
def test_a_run_folder_whose_name_is_not_utf8_is_refused_in_words_that_say_so(command, trained, tmp_path, capsys):
    run = tmp_path / os.fsdecode(b"run-\xff")  # bytes of another encoding, as a Latin-1 system names a folder
    shutil.copytree(trained, run)
    args = [*command, str(run)] + ([str(tmp_path / "p.html")] if command == ["export", "page"] else [])
    err = user_error(capsys, *args)
    assert "the name 'run-\\xff' is not UTF-8" in err and "rename it" in err and "corrupt" not in err, err
    assert not (tmp_path / "p.html").exists()


def test_training_into_a_folder_whose_name_is_not_utf8_is_refused_before_it_trains(text_file, tmp_path, capsys):
    run = tmp_path / os.fsdecode(b"run-\xff")  # matplotlib and safetensors would fail on it after training
    err = user_error(capsys, "train", "gpt", "--data", str(text_file), "--out", str(run), "--set", "train.max_iters=2")
    assert "the name 'run-\\xff' is not UTF-8" in err and "rename it" in err, err
    assert not os.path.lexists(run)
