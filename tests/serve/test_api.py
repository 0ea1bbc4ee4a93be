"""The playground's JSON API: the same text as `tinyformer sample`, what sampling does to each step's
distribution, attention equal to the capture API's, each task's panels, a 4xx naming the field for every bad
input, no path out of the served folder, and a run being trained served without its lock."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from tests.processes import start
from tinyformer import runfolder
from tinyformer.cli import main
from tinyformer.serve import generation
from tinyformer.serve.app import background, create_app
from tinyformer.serve.limits import Limits

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

TASKS = {"gpt", "nested/reverse", "classify", "tag", "qa", "mlm"}


@pytest.fixture(scope="module")
def client(runs_root) -> TestClient:
    return TestClient(create_app(runs_root))


def sample_cli(run: Path, **options) -> str:
    args = [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["sample", str(run), *args]) == 0
    return out.getvalue().removesuffix("\n")


def events(text: str) -> list[tuple[str, dict]]:
    blocks = [b for b in text.split("\n\n") if b.strip()]
    return [
        (b.split("\n")[0].removeprefix("event: "), json.loads(b.split("\n")[1].removeprefix("data: "))) for b in blocks
    ]


# ---- runs ----------------------------------------------------------------------------------------------
def test_runs_lists_every_run_under_the_folder_with_its_tasks_views(client):
    runs = {r["name"]: r for r in client.get("/api/runs").json()["runs"]}
    assert set(runs) == TASKS
    assert runs["gpt"]["views"] == ["generate", "attention"] and runs["gpt"]["sample"]["prompt"]
    assert all("predict" in runs[n]["views"] for n in TASKS - {"gpt"})
    assert [f["name"] for f in runs["qa"]["inputs"]] == ["question", "context"]
    assert [f["required"] for f in runs["nested/reverse"]["inputs"]] == [True, False]


def test_run_has_info_config_and_the_loss_curves_of_its_metrics(client, runs_root):
    r = client.get("/api/run", params={"run": "gpt"}).json()
    val = [json.loads(x) for x in (runs_root / "gpt/metrics.jsonl").read_text().splitlines() if '"val"' in x]
    assert r["metrics"]["val"] == [[v["step"], v["loss"]] for v in val]
    assert r["info"].startswith(f"run {runs_root / 'gpt'}: task gpt, step 20/20") and "# resolved config" in r["info"]
    assert r["config"]["model"]["n_layer"] == 1 and r["step"] == 20


# ---- generation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "settings",
    [dict(prompt="ROMEO:", tokens=30, temperature=0.8, top_k=5, seed=3), dict(tokens=25, top_p=0.9, seed=7)],
)
def test_generate_gives_exactly_the_text_of_tinyformer_sample(client, runs_root, settings):
    expected = sample_cli(runs_root / "gpt", **settings)
    plain = client.post("/api/generate", json={"run": "gpt", **settings}).json()
    assert plain["text"] == expected
    streamed = events(client.post("/api/generate", json={"run": "gpt", **settings, "stream": True}).text)
    kinds = [k for k, _ in streamed]
    assert kinds == ["start"] + ["token"] * settings["tokens"] + ["done"]
    tokens = "".join(d["text"] for k, d in streamed if k == "token")
    assert "".join(streamed[0][1]["prompt_tokens"]) + tokens == expected == streamed[-1][1]["text"]


@pytest.mark.parametrize("chunk_s", [0.0, 60.0])
def test_steps_are_the_same_one_at_a_time_and_all_in_one_chunk(client, monkeypatch, chunk_s):
    """CHUNK_S 0: one step per call on the model thread (and per server-sent write); 60: the whole generation
    in one. Tokens, texts and distributions do not depend on it."""
    settings = {"run": "gpt", "tokens": 20, "temperature": 0.9, "top_k": 8, "top_p": 0.95, "seed": 4}
    expected = client.post("/api/generate", json=settings).json()["steps"]
    monkeypatch.setattr(generation, "CHUNK_S", chunk_s)
    assert client.post("/api/generate", json=settings).json()["steps"] == expected
    streamed = events(client.post("/api/generate", json=settings | {"stream": True}).text)
    assert [d for k, d in streamed if k == "token"] == expected


def test_each_step_reports_what_temperature_top_k_and_top_p_do(client, runs_root):
    vocab = json.loads((runs_root / "gpt/config.json").read_text())["model"]["vocab_size"]
    out = client.post("/api/generate", json={"run": "gpt", "tokens": 6, "temperature": 1.5, "top_k": 4, "top": 200})
    for step in out.json()["steps"]:
        dist = step["distribution"]  # every token: top=200 is more than the vocabulary; one list per column
        p = dist["p"]
        assert p == sorted(p, reverse=True) and all(len(column) == vocab for column in dist.values())
        assert dist["kept"] == [True] * 4 + [False] * (vocab - 4)  # top-k keeps the 4 most likely
        assert sum(dist["p_final"][:4]) == pytest.approx(1.0, abs=1e-5) and not any(dist["p_final"][4:])
        assert step["id"] in dist["id"][:4]
        assert step["text"] == dist["token"][dist["id"].index(step["id"])]  # each id's label is its text
        flatter = dist["p_temp"]  # temperature 1.5 > 1 flattens: the top token loses mass
        assert flatter[0] < p[0] and flatter[-1] > p[-1]
    greedy = client.post("/api/generate", json={"run": "gpt", "tokens": 3, "temperature": 0}).json()
    assert all(s["id"] == s["distribution"]["id"][0] and s["distribution"]["p_final"][0] == 1 for s in greedy["steps"])
    nucleus = client.post("/api/next-token", json={"run": "gpt", "prompt": "ROMEO:", "top_p": 0.3, "top_k": 0}).json()
    dist = nucleus["distribution"]
    kept = [p for p, k in zip(dist["p"], dist["kept"], strict=True) if k]
    assert dist["kept"] == [True] * len(kept) + [False] * (len(dist["kept"]) - len(kept))  # the most likely ones
    before = sum(kept[:-1])  # the last kept token is the one that crosses 0.3
    assert before < 0.3 <= before + kept[-1]


def test_top_zero_returns_the_same_tokens_without_distributions(client):
    full = client.post("/api/generate", json={"run": "gpt", "tokens": 12, "seed": 5}).json()
    bare = client.post("/api/generate", json={"run": "gpt", "tokens": 12, "seed": 5, "top": 0}).json()
    assert bare["text"] == full["text"] and all(not any(s["distribution"].values()) for s in bare["steps"])


def test_next_token_is_the_first_step_of_generate(client):
    first = client.post("/api/generate", json={"run": "gpt", "prompt": "ROME", "tokens": 1}).json()["steps"][0]
    alone = client.post("/api/next-token", json={"run": "gpt", "prompt": "ROME"}).json()
    assert alone["distribution"] == first["distribution"]


# ---- attention -----------------------------------------------------------------------------------------
def test_attention_is_the_capture_apis_row_and_a_window_ends_at_the_query(client, runs_root):
    from tinyformer.runs import load_run
    from tinyformer.viz.capture import capture_attention

    run = load_run(runs_root / "gpt")
    ids = run.tokenizer.encode("ROMEO: But, soft! what light through yonder window breaks? It is the east")
    assert len(ids) > 32 == run.config.model.block_size
    a = client.post("/api/attention", json={"run": "gpt", "ids": ids, "query": 50}).json()
    assert a["offset"] == 50 + 1 - 32 and a["query"] == 50 and len(a["keys"]) == 32
    window = torch.tensor([ids[19:51]])
    with run.autocast():
        maps = capture_attention(run.model, window, run.tokenizer)
    want = torch.stack([w[0, :, -1] for w in maps.layers])  # (L, H, S): the last token's row
    assert torch.allclose(torch.tensor(a["weights"]), want, atol=1e-6)
    assert a["roles"]["dominant"] and set(a["roles"]["scores"]) >= {"prev", "broad"}
    early = client.post("/api/attention", json={"run": "gpt", "ids": ids[:10], "query": 4}).json()
    row = torch.tensor(early["weights"])  # (L, H, S): causal, nothing after token 4
    assert torch.all(row[..., 5:] == 0) and torch.allclose(row.sum(-1), torch.ones(row.shape[:2]), atol=1e-2)  # bf16


def test_attention_of_the_encoder_decoder_has_each_part(client):
    for part in ("encoder", "decoder", "cross"):
        a = client.post("/api/attention", json={"run": "nested/reverse", "text": "3 1 4", "part": part}).json()
        assert a["parts"] == ["encoder", "decoder", "cross"] and a["part"] == part
        assert torch.allclose(torch.tensor(a["weights"]).sum(-1), torch.tensor(1.0), atol=1e-2)
    cross = client.post("/api/attention", json={"run": "nested/reverse", "text": "3 1 4", "part": "cross"}).json()
    assert cross["keys"][:3] == ["3", "1", "4"]


# ---- each task's panels --------------------------------------------------------------------------------
def predict(client, run: str, **inputs) -> list[dict]:
    r = client.post("/api/predict", json={"run": run, "inputs": inputs})
    assert r.status_code == 200, r.json()
    return r.json()["panels"]


def test_each_task_answers_with_its_own_panels(client, runs_root):
    (bars,) = predict(client, "classify", text="ship sail wave")
    labels = json.loads((runs_root / "classify/config.json").read_text())["model"]["labels"]
    assert bars["kind"] == "bars" and sorted(bars["labels"]) == sorted(labels)
    assert sum(bars["values"]) == pytest.approx(1.0, abs=1e-5) and bars["values"] == sorted(bars["values"])[::-1]
    (tags,) = predict(client, "tag", text="Romeo went to the market")
    assert tags["words"] == ["Romeo", "went", "to", "the", "market"] and len(tags["tags"]) == 5
    context = "In Verona, Romeo loves Juliet at night. The moon is pale."
    (span,) = predict(client, "qa", question="Who loves Juliet?", context=context)
    assert span["text"] == context and 0 <= span["start"] < span["end"] <= len(context)
    assert span["title"] == f"answer: {context[span['start'] : span['end']]}" and "P(start) x P(end)" in span["note"]
    fills = predict(client, "mlm", text="the [MASK] of [MASK]", top=3)
    assert [f["title"] for f in fills] == ["[MASK] #1", "[MASK] #2"] and all(len(f["labels"]) == 3 for f in fills)
    out, matrix = predict(client, "nested/reverse", text="3 1 4 1")
    assert out["kind"] == "text" and matrix["cols"] == ["3", "1", "4", "1", "EOS"]
    w = torch.tensor(matrix["values"])
    assert w.shape == (len(matrix["rows"]), 5) and torch.allclose(w.sum(1), torch.ones(len(w)), atol=1e-2)
    assert "alignment" in matrix["note"]


def test_the_qa_passage_is_text_never_a_file(client, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("Romeo is the secret word.")
    (span,) = predict(client, "qa", question="Who?", context=str(secret))
    assert span["text"] == str(secret)  # the path itself is the passage: the file was not read


# ---- bad input: a 4xx naming the field, and the server keeps serving -------------------------------------
BAD = [
    ("/api/generate", {"run": "gpt", "temperature": -1}, 422, "temperature"),
    ("/api/generate", {"run": "gpt", "temperature": "hot"}, 422, "temperature"),
    ("/api/generate", {"run": "gpt", "top_k": -2}, 422, "top_k"),
    ("/api/generate", {"run": "gpt", "top_p": 0}, 422, "top_p"),
    ("/api/generate", {"run": "gpt", "top_p": 1.5}, 422, "top_p"),
    ("/api/generate", {"run": "gpt", "tokens": -1}, 422, "tokens"),
    ("/api/generate", {"run": "gpt", "temperature": 0.0005}, 422, "temperature"),  # sample refuses it: so do we
    ("/api/generate", {"run": "gpt", "seed": 2**64}, 422, "seed"),
    ("/api/generate", {"run": "gpt", "tokens": 100_000}, 422, "tokens"),
    ("/api/generate", {"run": "gpt", "seed": "one"}, 422, "seed"),
    ("/api/generate", {"run": "gpt", "top": -1}, 422, "top"),
    ("/api/next-token", {"run": "gpt", "top": 0}, 422, "top"),
    ("/api/generate", {"run": "gpt", "stream": "maybe"}, 422, "stream"),
    ("/api/generate", {"run": "gpt", "prompt": "é ☃"}, 400, "prompt"),
    ("/api/generate", {"run": "gpt", "prompt": ""}, 422, "prompt"),
    ("/api/generate", {"run": "gpt", "prompt": "x" * 30_000}, 422, "prompt"),
    ("/api/generate", {"run": "gpt", "colour": "red"}, 422, "colour"),
    ("/api/generate", {"prompt": "hi"}, 422, "run"),
    ("/api/generate", {"run": "no-such-run"}, 404, "run"),
    ("/api/generate", {"run": "classify"}, 400, "run"),
    ("/api/next-token", {"run": "gpt", "top_k": 1.5}, 422, "top_k"),
    ("/api/attention", {"run": "gpt"}, 422, "text"),
    ("/api/attention", {"run": "gpt", "ids": [1, 2], "text": "ab"}, 422, "text"),
    ("/api/attention", {"run": "gpt", "ids": [1, 10_000]}, 422, "ids"),
    ("/api/attention", {"run": "gpt", "ids": []}, 422, "ids"),
    ("/api/attention", {"run": "gpt", "ids": [1, 2], "query": 5}, 400, "query"),
    ("/api/attention", {"run": "gpt", "text": "RO", "query": -1}, 422, "query"),
    ("/api/attention", {"run": "gpt", "text": "é"}, 400, "text"),
    ("/api/attention", {"run": "gpt", "text": "ROMEO " * 20}, 400, "text"),
    ("/api/attention", {"run": "nested/reverse", "text": "3 1", "part": "sideways"}, 400, "part"),
    ("/api/attention", {"run": "nested/reverse", "ids": [1, 2]}, 422, "ids"),
    ("/api/predict", {"run": "classify", "inputs": {}}, 422, "inputs.text"),
    ("/api/predict", {"run": "classify", "inputs": {"text": "  "}}, 400, "inputs"),
    ("/api/predict", {"run": "classify", "inputs": {"text": 3}}, 422, "inputs.text"),
    ("/api/predict", {"run": "classify", "inputs": {"text": "a", "top": 2}}, 422, "inputs.top"),
    ("/api/predict", {"run": "mlm", "inputs": {"text": "[MASK]", "top": "3"}}, 422, "inputs.top"),
    ("/api/predict", {"run": "mlm", "inputs": {"text": "no mask"}}, 400, "inputs"),
    ("/api/predict", {"run": "nested/reverse", "inputs": {"text": "1 2", "beam": 0}}, 400, "inputs"),
    ("/api/predict", {"run": "nested/reverse", "inputs": {"text": "a b"}}, 400, "inputs"),
    ("/api/predict", {"run": "qa", "inputs": {"question": "Who?"}}, 400, "inputs"),
    ("/api/predict", {"run": "gpt", "inputs": {"prompt": "x"}}, 400, "run"),
    ("/api/predict", {"run": "tag", "inputs": "text"}, 422, "inputs"),
]


@pytest.mark.parametrize("path,body,status,field", BAD, ids=[f"{p}-{f}-{i}" for i, (p, _, _, f) in enumerate(BAD)])
def test_bad_input_is_a_4xx_naming_the_field(client, path, body, status, field):
    r = client.post(path, json=body)
    assert (r.status_code, r.json()["field"]) == (status, field), r.json()
    assert "\n" not in r.json()["error"] and "Traceback" not in r.json()["error"]


def test_sampling_ranges_are_the_samplers_own(client):
    """What `tinyformer sample` takes the API takes, and what it refuses the API refuses naming the field."""
    from tinyformer.config import MAX_TEMPERATURE, MIN_TEMPERATURE

    for field, good, bad in (
        ("temperature", [0, MIN_TEMPERATURE, MAX_TEMPERATURE], [MIN_TEMPERATURE / 2, MAX_TEMPERATURE * 2, -1]),
        ("seed", [-(2**63), 0, 2**64 - 1], [-(2**63) - 1, 2**64]),
        ("top_p", [1e-9, 1], [0, 1.01]),
    ):
        for value in good:
            r = client.post("/api/generate", json={"run": "gpt", "tokens": 1, "top": 0, field: value})
            assert r.status_code == 200, (field, value, r.json())
        for value in bad:
            r = client.post("/api/generate", json={"run": "gpt", "tokens": 1, field: value})
            assert (r.status_code, r.json()["field"]) == (422, field), (value, r.json())
            assert r.json()["error"].startswith(f"{field}={value}"), r.json()  # the sampler's own words


JSON = {"content-type": "application/json"}


def test_every_error_has_the_apis_shape_and_names_what_is_wrong(client):
    cases = [
        (client.post("/api/generate", content=b'{"run": "gpt", "tokens": 3,,}', headers=JSON), 422, "body"),
        (client.post("/api/generate", content=b'{"run": "gpt\xff\xfe"}', headers=JSON), 400, "body"),
        (client.post("/api/generate", content=b"\xff\xfe{}", headers=JSON), 422, "body"),
        (client.get("/api/nothing-here"), 404, "path"),
        (client.get("/api/generate"), 405, "method"),
        (client.delete("/api/runs"), 405, "method"),
    ]
    for r, status, field in cases:
        assert r.status_code == status and set(r.json()) == {"error", "field"}, r.text
        assert r.json()["field"] == field and r.json()["error"] and "\n" not in r.json()["error"], r.json()


def test_the_server_keeps_serving_after_bad_input_and_refuses_big_or_broken_bodies(client):
    assert (
        client.post("/api/generate", content=b"{not json", headers={"content-type": "application/json"}).status_code
        == 422
    )
    big = client.post("/api/generate", content=b" " * 70_000, headers={"content-type": "application/json"})
    assert big.status_code == 413 and big.json()["field"] == "body"
    chunked = client.post("/api/generate", content=iter([b" " * 40_000, b" " * 40_000]))  # no Content-Length
    assert chunked.status_code == 413
    assert client.get("/api/run", params={"run": "tag"}).status_code == 200
    assert client.post("/api/generate", json={"run": "gpt", "tokens": 2}).status_code == 200


# ---- only the served folder ------------------------------------------------------------------------------
def test_no_path_leaves_the_served_folder(runs_root, tmp_path):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(runs_root / "tag", root / "mine")
    outside = tmp_path / "outside"
    shutil.copytree(runs_root / "classify", outside)
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "deeper").mkdir()
    (root / "deeper" / "up").symlink_to(tmp_path, target_is_directory=True)
    client = TestClient(create_app(root))
    assert [r["name"] for r in client.get("/api/runs").json()["runs"]] == ["mine"]
    for name in ("link", "../outside", str(outside), "deeper/up/outside", "mine/../../outside", "mine\\..", ".", ""):
        r = client.get("/api/run", params={"run": name})
        assert r.status_code in (404, 422), (name, r.json())
        r = client.post("/api/predict", json={"run": name, "inputs": {"text": "a"}})
        assert r.status_code in (404, 422), name
    assert client.get("/api/run", params={"run": "mine"}).status_code == 200
    assert client.get("/static/../../etc/passwd").status_code == 404
    assert client.get("/static/index.html").status_code == 404  # the page's own assets only


DEEP = "[" * 100_000 + "]" * 100_000  # JSON that Python's decoder cannot parse without a RecursionError


def test_bad_data_on_disk_is_a_4xx_and_the_other_runs_are_still_listed(runs_root, tmp_path):
    import shutil

    root = tmp_path / "root"
    for name in ("good", "deep", "corrupt", "wrong", "deep-metrics"):
        shutil.copytree(runs_root / "gpt", root / name)
    (root / "deep" / "config.json").write_text(DEEP)
    (root / "corrupt" / "config.json").write_text('{"task": "gpt", "model": {')
    (root / "wrong" / "config.json").write_text('{"task": "gpt", "model": 5}')
    (root / "deep-metrics" / "metrics.jsonl").write_text(DEEP + "\n")
    (root / "loop").symlink_to(root / "loop")
    client = TestClient(create_app(root))
    listed = client.get("/api/runs")
    assert listed.status_code == 200
    assert [r["name"] for r in listed.json()["runs"]] == ["deep-metrics", "good"]
    reasons = {r["name"]: r["error"] for r in listed.json()["unreadable"]}
    assert set(reasons) == {"corrupt", "deep", "wrong"}
    assert all("config.json" in why and "\n" not in why for why in reasons.values()), reasons
    assert "nested deeper than" in reasons["deep"]
    for name, status in (("deep", 409), ("corrupt", 409), ("wrong", 409), ("loop", 404), ("x" * 300, 404)):
        r = client.get("/api/run", params={"run": name})
        assert (r.status_code, r.json()["field"]) == (status, "run"), (name, r.json())
        r = client.post("/api/generate", json={"run": name, "tokens": 2})
        assert (r.status_code, r.json()["field"]) == (status, "run"), (name, r.json())
    r = client.get("/api/run", params={"run": "deep-metrics"})  # a bad line of curves: served without it
    assert r.status_code == 200 and r.json()["metrics"] == {"train": [], "val": []}
    assert client.post("/api/generate", json={"run": "good", "tokens": 2}).status_code == 200


def test_a_device_this_machine_lacks_is_refused_at_start(runs_root, capsys):
    assert main(["serve", str(runs_root), "--device", "tpu", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "device='tpu' is not one of" in err and err.count("\n") == 1


def test_a_run_being_trained_is_served_read_only_without_its_lock(runs_root, tmp_path):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(runs_root / "gpt", root / "gpt")
    before = {p.name: p.stat().st_mtime_ns for p in (root / "gpt").iterdir()}
    client = TestClient(create_app(root))
    with runfolder.run_lock(root / "gpt"):  # what a training run holds while it trains
        assert client.post("/api/generate", json={"run": "gpt", "tokens": 3}).status_code == 200
        assert client.get("/api/run", params={"run": "gpt"}).status_code == 200
    after = {p.name: p.stat().st_mtime_ns for p in (root / "gpt").iterdir()}
    assert after == before | ({runfolder.LOCK: after[runfolder.LOCK]} if runfolder.LOCK in after else {})


# ---- a real server on 127.0.0.1 -----------------------------------------------------------------------------
@contextlib.contextmanager
def serving(root: Path, limits: Limits | None = None):
    with background(create_app(root, limits=limits or Limits())) as url:
        yield url


def test_eight_concurrent_clients_of_twenty_requests_all_succeed(runs_root):
    bodies = [
        ("/api/generate", {"run": "gpt", "tokens": 8}),
        ("/api/generate", {"run": "gpt", "tokens": 8, "stream": True}),
        ("/api/attention", {"run": "gpt", "text": "ROMEO:"}),
        ("/api/predict", {"run": "classify", "inputs": {"text": "sword"}}),
        ("/api/next-token", {"run": "gpt", "prompt": "ROME"}),
    ]

    def client_session(url: str, k: int) -> list[int]:
        with httpx.Client(base_url=url, timeout=60) as c:
            return [
                c.post(*bodies[(k + i) % len(bodies)][:1], json=bodies[(k + i) % len(bodies)][1]).status_code
                for i in range(20)
            ]

    with serving(runs_root, Limits(max_generations=2)) as url, ThreadPoolExecutor(8) as pool:
        codes = [c for cs in pool.map(lambda k: client_session(url, k), range(8)) for c in cs]
    assert codes == [200] * 160


def test_generations_at_once_are_bounded_and_a_slot_comes_back_when_a_client_leaves(runs_root, monkeypatch):
    from tinyformer.serve.generation import Generation

    steps = Generation._steps
    monkeypatch.setattr(Generation, "_steps", lambda self, it, n: time.sleep(0.02) or steps(self, it, n))  # slow
    limits = Limits(max_generations=1, wait_s=0.05)
    first_body = {"run": "gpt", "tokens": 1000, "stream": True}  # 20 s at the slowed pace
    with serving(runs_root, limits) as url, httpx.Client(base_url=url, timeout=30) as c:
        with c.stream("POST", "/api/generate", json=first_body) as first:
            lines = first.iter_lines()  # kept: a dropped iterator closes the response, which frees the slot
            line = next(lines)  # the stream holds the one slot
            assert first.status_code == 200 and line == "event: start", (first.status_code, line)
            busy = c.post("/api/generate", json={"run": "gpt", "tokens": 2})
            assert busy.status_code == 503 and busy.json()["field"] == "run"
        deadline = time.time() + 20  # the client left: the stream ends, the slot is given back
        while (
            r := c.post("/api/generate", json={"run": "gpt", "tokens": 2})
        ).status_code == 503 and time.time() < deadline:
            time.sleep(0.1)
        assert r.status_code == 200


def test_requests_waiting_for_a_slot_hold_no_thread(runs_root, monkeypatch):
    """Sixty generations wait for the one slot (more than the 40 worker threads): the run list still answers
    at once, and every waiter gets its turn when the slot comes back."""
    from tinyformer.serve.generation import Generation

    steps = Generation._steps  # one token a step, 50 ms each: the first stream holds its slot for 50 s
    monkeypatch.setattr(Generation, "_steps", lambda self, it, n: time.sleep(0.05) or steps(self, it, 1))
    limits = Limits(max_generations=1, wait_s=120)
    with serving(runs_root, limits) as url, httpx.Client(base_url=url, timeout=60) as c:
        with c.stream("POST", "/api/generate", json={"run": "gpt", "tokens": 1000, "stream": True}) as first:
            lines = first.iter_lines()  # kept: a dropped iterator closes the response, which frees the slot
            assert next(lines) == "event: start"  # the stream holds the one slot

            def wait() -> int:
                with httpx.Client(base_url=url, timeout=120) as w:
                    return w.post("/api/generate", json={"run": "gpt", "tokens": 1, "top": 0}).status_code

            with ThreadPoolExecutor(60) as pool:
                waiting = [pool.submit(wait) for _ in range(60)]
                time.sleep(1.0)  # all sixty sent and waiting
                assert not any(w.done() for w in waiting), [w.result() for w in waiting if w.done()]
                runs = c.get("/api/runs", timeout=10)  # with a thread per waiter: no thread left to answer
                assert runs.status_code == 200 and len(runs.json()["runs"]) == len(TASKS)
                first.close()  # the slot comes back: each waiter in turn
                assert [w.result() for w in waiting] == [200] * 60


def test_serve_prints_its_url_answers_and_stops_cleanly_on_ctrl_c(runs_root):
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    p = start(  # SIGINT at its default: the suite may run from a background job, where it is ignored
        [sys.executable, "-m", "tinyformer", "serve", str(runs_root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = p.stdout.readline()
        assert line.startswith("tinyformer playground: http://127.0.0.1:"), line + p.stderr.read()
        url = line.split()[2]
        assert len(httpx.get(url + "api/runs", timeout=30).json()["runs"]) == len(TASKS)
        page = httpx.get(url, timeout=30)
        assert "/static/app.js" in page.text and "script-src 'self'" in page.headers["content-security-policy"]
        assert "POST /api/generate" in httpx.get(url + "docs", timeout=30).text
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped" in out and "Traceback" not in err, err


def test_serve_warns_off_loopback_and_refuses_bad_limits(capsys, runs_root):
    for args, words in (
        (["--port", "70000"], "--port 70000"),
        (["--max-tokens", "0"], "--max-tokens 0"),
    ):
        assert main(["serve", str(runs_root), *args]) == 2
        assert words in capsys.readouterr().err
    assert main(["serve", str(runs_root / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    from tinyformer.cli.serve import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")


def test_the_page_draws_every_view_and_panel_the_contract_declares_and_calls_every_route_but_one(client):
    """The page's tables of views and panel drawings are the contract's (`tasks.base.VIEWS`, `PANELS`), and it
    calls every /api route but next-token, which the app's docstring lists as API only."""
    import re

    import tinyformer.serve.app as app_module
    from tinyformer.tasks.base import PANELS, VIEWS

    js = (Path(app_module.__file__).parent / "static" / "app.js").read_text(encoding="utf-8")
    views = re.search(r"const VIEWS = \[(.*?)\];", js).group(1)
    assert re.findall(r'"(\w+)"', views) == list(VIEWS)
    drawings = re.search(r"const PANELS = \{\n(.*?)\n\};", js, re.S).group(1)
    assert sorted(re.findall(r"^  (\w+): ", drawings, re.M)) == sorted(PANELS)
    routes = {r.path for r in client.app.routes if r.path.startswith("/api/")}
    called = set(re.findall(r"[\"`](/api/[a-z-]+)", js))
    assert routes - called == {"/api/next-token", "/api/openapi.json"} and called <= routes  # (+ the schema)
    assert "API only" in app_module.__doc__


def test_a_run_whose_files_change_after_it_was_loaded_gets_one_answer_from_every_route(runs_root, tmp_path):
    """Corrupted after the playground loaded it, a run is refused (409) by every route, as `/api/runs` lists it
    unreadable, instead of generating from the model still cached; mended, it is served again, reloaded."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(runs_root / "gpt", root / "run")
    client = TestClient(create_app(root))
    body = {"run": "run", "prompt": "ROMEO:", "tokens": 4, "seed": 3, "top": 0}
    first = client.post("/api/generate", json=body)
    assert first.status_code == 200  # loaded and cached
    good = (root / "run" / "config.json").read_text()
    (root / "run" / "config.json").write_text('{"task": "gpt", "model": {')
    assert [r["name"] for r in client.get("/api/runs").json()["unreadable"]] == ["run"]
    views = {"text": "ROMEO:", "query": 1, "ids": None, "part": None}
    for method, route, payload in (
        ("post", "/api/generate", body),
        ("post", "/api/next-token", {"run": "run", "prompt": "ROMEO:"}),
        ("post", "/api/attention", {"run": "run", **{k: v for k, v in views.items() if v is not None}}),
        ("get", "/api/run", None),
    ):
        r = client.get(route, params={"run": "run"}) if method == "get" else client.post(route, json=payload)
        assert (r.status_code, r.json()["field"]) == (409, "run"), (route, r.json())
        assert "config.json" in r.json()["error"]
    (root / "run" / "config.json").write_text(good)
    assert client.get("/api/runs").json()["unreadable"] == []
    again = client.post("/api/generate", json=body)
    assert again.status_code == 200 and again.json()["text"] == first.json()["text"]


def test_the_page_route_downloads_the_runs_export_page(client, runs_root, tmp_path):
    """`GET /api/page` is `tinyformer export page`'s file (the same weights and tokenizer), as a download; a run with
    no generate view is refused naming the field, and `/api/run` says whether the link is offered."""
    import re

    from tinyformer.cli import main

    r = client.get("/api/page", params={"run": "gpt"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["content-disposition"] == 'attachment; filename="gpt.html"'
    assert main(["export", "page", str(runs_root / "gpt"), str(tmp_path / "gpt.html")]) == 0

    def data(html: str) -> dict:
        found = re.search(r'<script type="application/json" id="tf-model">(.*?)</script>', html, re.S)
        return {k: v for k, v in json.loads(found[1]).items() if k in ("blob", "tensors", "tokenizer", "spec")}

    assert data(r.text) == data((tmp_path / "gpt.html").read_text(encoding="utf-8"))
    assert client.get("/api/run", params={"run": "gpt"}).json()["page"] is None
    refused = client.get("/api/page", params={"run": "nested/reverse"})
    assert (
        refused.status_code == 400
        and refused.json()["field"] == "run"
        and "no 'generate' view" in refused.json()["error"]
    )
