import itertools
import json
import re

import pytest
import torch

from tinyformer.data.qa import (
    QAExample,
    best_span,
    decode,
    make_windows,
    nearest_header_baseline,
    who_says,
)
from tinyformer.data.squad import exact_match, normalize_answer, read_squad, token_f1
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.errors import UserError

SENTENCES = [
    "Romeo and Juliet meet at the feast in Verona.",
    "The nurse carries a letter to the friar before noon.",
    "Mercutio speaks of Queen Mab and her tiny chariot.",
    "Tybalt draws his sword in the hot street at midday.",
    "Who gave the ring to the young man by the old wall?",
] * 20
CONTEXT = " ".join(SENTENCES[:5] * 2)  # about 100 word pieces


@pytest.fixture(scope="module")
def tok() -> SubwordTokenizer:
    return SubwordTokenizer.train(SENTENCES, vocab_size=200)


# ---------------------------------------------------------------------------- metrics


def test_normalize_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("The Cat") == "cat"
    assert normalize_answer("Romeo!") == "romeo"
    assert normalize_answer("  a   big\t dog \n") == "big dog"
    assert normalize_answer("Another theme, an apple") == "another theme apple"  # articles only as whole words


def test_exact_match_is_the_best_over_golds():
    assert exact_match("The Cat", ["cat"]) == 1.0
    assert exact_match("Romeo!", ["romeo"]) == 1.0
    assert exact_match("Romeo", ["Juliet", "Romeo and Juliet"]) == 0.0
    assert exact_match("Romeo", ["Juliet", "romeo."]) == 1.0


def test_token_f1_by_hand():
    # pred tokens {quick, brown, fox}, gold {quick, red, fox, jumps}: 2 shared, P = 2/3, R = 2/4 -> F1 = 4/7
    assert token_f1("The quick brown fox", ["quick red fox jumps"]) == pytest.approx(4 / 7)
    assert token_f1("Romeo", ["Juliet", "Romeo and Juliet"]) == pytest.approx(0.5)  # P = 1, R = 1/3
    assert token_f1("Romeo", ["Romeo and Juliet", "romeo!"]) == 1.0  # the best gold counts
    assert token_f1("the", ["a"]) == 1.0  # both normalise to nothing
    assert token_f1("Romeo", ["the"]) == 0.0 and token_f1("", ["Romeo"]) == 0.0


# ---------------------------------------------------------------------------- best_span


def brute_force(sl, el, valid, max_len):
    pairs = [
        (float(sl[s] + el[e]), s, e)
        for s, e in itertools.product(range(len(sl)), repeat=2)
        if valid[s] and valid[e] and s <= e < s + max_len
    ]
    return max(pairs, key=lambda p: p[0])


def test_best_span_equals_brute_force_and_respects_every_constraint():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        T, max_len = int(torch.randint(1, 16, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g))
        sl, el = torch.randn(T, generator=g), torch.randn(T, generator=g)
        valid = torch.rand(T, generator=g) < 0.6
        valid[int(torch.randint(0, T, (1,), generator=g))] = True
        score, s, e = best_span(sl, el, valid, max_len)
        assert s <= e < s + max_len and valid[s] and valid[e]
        want = brute_force(sl, el, valid, max_len)
        assert (s, e) == want[1:] and score == pytest.approx(want[0])


def test_best_span_when_the_argmax_start_comes_after_the_argmax_end():
    sl, el = torch.zeros(10), torch.zeros(10)
    sl[8], sl[1] = 10.0, 3.0  # best start alone: 8
    el[2], el[5] = 9.0, 4.0  # best end alone: 2, before it
    valid = torch.ones(10, dtype=torch.bool)
    assert best_span(sl, el, valid, max_len=30) == (12.0, 1, 2)
    assert best_span(sl, el, valid, max_len=1) == (10.0, 8, 8)  # one token only: the start peak alone
    valid[1] = False  # the best pair's start is a question token now
    assert best_span(sl, el, valid, max_len=30) == (10.0, 8, 8)
    with pytest.raises(ValueError):
        best_span(sl, el, torch.zeros(10, dtype=torch.bool), max_len=30)


# ---------------------------------------------------------------------------- windows


def context_positions(w):
    return [i for i, o in enumerate(w.offsets) if o is not None]


@pytest.mark.parametrize(("seq_len", "stride"), [(32, 7), (20, 1), (20, 3), (24, 4), (24, 5), (27, 6), (30, 21)])
def test_windows_cover_the_context_with_the_stated_overlap(tok, seq_len, stride):
    q = "Who draws his sword?"
    n_q = len(tok.hf.encode(q, add_special_tokens=False).ids)
    all_offsets = [tuple(o) for o in tok.hf.encode(CONTEXT, add_special_tokens=False).offsets]
    n = seq_len - n_q - 3
    windows = make_windows(tok, q, CONTEXT, seq_len, stride)
    assert len(windows) > 3 and windows[-2].offsets[-2] != all_offsets[-1]  # only the last window reaches the end
    seen = set()
    for w in windows:
        assert len(w.input_ids) == len(w.token_type_ids) == len(w.offsets) <= seq_len
        assert w.token_type_ids == [0] * (n_q + 2) + [1] * (len(w.input_ids) - n_q - 2)
        assert w.input_ids[0] == tok.cls_id and w.input_ids[n_q + 1] == tok.sep_id and w.input_ids[-1] == tok.sep_id
        assert context_positions(w) == list(range(n_q + 2, len(w.input_ids) - 1))
        assert (w.start, w.end) == (0, 0)  # no answer given
        seen |= {w.offsets[i] for i in context_positions(w)}
    assert seen == set(all_offsets)
    for a, b in zip(windows, windows[1:]):
        shared = {a.offsets[i] for i in context_positions(a)} & {b.offsets[i] for i in context_positions(b)}
        assert len(shared) == n - stride


def test_question_is_cut_to_max_question(tok):
    w = make_windows(tok, "Romeo and Juliet meet at the feast", CONTEXT, 40, 5, max_question=3)[0]
    assert w.token_type_ids.count(0) == 3 + 2


def test_gold_span_in_an_overlap_is_marked_in_both_windows_and_decodes_back(tok):
    q = "Who is at the feast?"
    offsets = [tuple(o) for o in tok.hf.encode(CONTEXT, add_special_tokens=False).offsets]
    plain = make_windows(tok, q, CONTEXT, 32, 8)
    n_q = plain[0].token_type_ids.count(0) - 2
    first_of_second = plain[1].offsets[n_q + 2]
    k = offsets.index(first_of_second) + 1  # tokens k, k+1 lie in windows 0 and 1
    a, b = offsets[k][0], offsets[k + 1][1]
    answer = CONTEXT[a:b]
    windows = make_windows(tok, q, CONTEXT, 32, 8, answer=(a, b))
    holding = [i for i, w in enumerate(windows) if w.start]
    assert holding == [0, 1]
    for i in holding:
        w = windows[i]
        assert 0 < w.start <= w.end and CONTEXT[w.offsets[w.start][0] : w.offsets[w.end][1]] == answer
        sl, el = torch.zeros(40), torch.zeros(40)  # longer than the window: padding is ignored
        sl[w.start], el[w.end] = 5.0, 5.0
        got = decode([w], [sl], [el], CONTEXT)
        assert (got.text, got.start, got.end, got.window) == (answer, a, b, 0)


def test_a_whole_word_answer_maps_back_exactly(tok):
    a = CONTEXT.index("Queen Mab")
    for w in make_windows(tok, "Who?", CONTEXT, 24, 4, answer=(a, a + len("Queen Mab"))):
        if w.start:
            assert CONTEXT[w.offsets[w.start][0] : w.offsets[w.end][1]] == "Queen Mab"


@pytest.mark.parametrize(
    ("context", "seq_len", "stride", "answer", "says"),
    [
        ("   ", 32, 4, None, "no tokens"),
        (CONTEXT, 32, 0, None, "stride=0"),
        (CONTEXT, 32, 40, None, "stride=40"),
        (CONTEXT, 4, 1, None, "seq_len=4"),
        (CONTEXT, 32, 4, (5, 6), "covers no token"),  # the space between "Romeo" and "and"
    ],
)
def test_make_windows_refuses_bad_settings(tok, context, seq_len, stride, answer, says):
    with pytest.raises(UserError, match=re.escape(says)):
        make_windows(tok, "Who?", context, seq_len, stride, answer=answer)


# ---------------------------------------------------------------------------- read_squad

PARA = "Romeo loves Juliet. Tybalt fights Mercutio."


def nested(qas, context=PARA):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


def write(path, obj):
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def write_lines(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_read_nested_squad(tmp_path):
    qas = [
        {"id": "q1", "question": "Who loves?", "answers": [{"text": "Romeo", "answer_start": 0}]},
        {"id": "q2", "question": "Who fights? ", "answers": [{"text": "Tybalt", "answer_start": 20}] * 2},
    ]
    got = read_squad(write(tmp_path / "s.json", nested(qas)))
    assert got == [
        QAExample("q1", "Who loves?", PARA, [("Romeo", 0)], 1),
        QAExample("q2", "Who fights?", PARA, [("Tybalt", 20), ("Tybalt", 20)], 2),
    ]


def test_read_jsonl_in_both_answer_forms(tmp_path):
    p = write_lines(
        tmp_path / "s.jsonl",
        [
            {"id": 7, "context": PARA, "question": "Who?", "answers": [{"text": "Juliet", "answer_start": 12}]},
            {
                "context": PARA,
                "question": "Whom?",
                "answers": {"text": ["Mercutio", "Mercutio."], "answer_start": [34, 34]},
            },
        ],
    )
    got = read_squad(p)
    assert [e.id for e in got] == ["7", "line 2"] and [e.where for e in got] == [1, 2]
    assert got[0].answers == [("Juliet", 12)] and got[1].answers == [("Mercutio", 34), ("Mercutio.", 34)]


GOOD = {"id": "q9", "question": "Who loves?", "answers": [{"text": "Romeo", "answer_start": 0}]}


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: nested([{**GOOD, "answers": [{"text": "Romeo", "answer_start": 3}]}]), ["'Romeo'", "'eo lo'"]),
        (lambda: nested([GOOD], context=""), ["empty or missing context"]),
        (lambda: nested([{k: v for k, v in GOOD.items() if k != "answers"}]), ["no answers"]),
        (lambda: nested([{**GOOD, "answers": [], "is_impossible": True}]), ["SQuAD 2.0", "not supported"]),
        (lambda: nested([{**GOOD, "question": " "}]), ["empty or missing question"]),
        (lambda: nested([{**GOOD, "answers": [{"text": "Romeo", "answer_start": -1}]}]), ["answer_start=-1"]),
    ],
)
def test_bad_nested_records_name_the_file_and_the_record(tmp_path, make, says):
    p = write(tmp_path / "bad.json", make())
    with pytest.raises(UserError) as e:
        read_squad(p)
    assert str(p) in str(e.value) and "record 1" in str(e.value) and "'q9'" in str(e.value)
    for part in says:
        assert part in str(e.value)


def test_bad_jsonl_lines_are_named(tmp_path):
    good = {"context": PARA, **GOOD}
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(good) + "\n\n{not json}\n", encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(f"{p} line 3 is not valid JSON")):
        read_squad(p)
    bad = {**good, "id": None, "answers": {"text": ["Juliet"], "answer_start": [0]}}
    write_lines(p, [good, bad])
    with pytest.raises(UserError, match=re.escape(f"{p} line 2: answer 'Juliet'")):
        read_squad(p)


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [("e.json", "{", "not valid JSON"), ("e.json", '{"data": []}', "no questions"), ("e.json", "[1]", "SQuAD layout")],
)
def test_unreadable_files(tmp_path, name, text, says):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=says) as e:
        read_squad(p)
    assert str(p) in str(e.value)
    with pytest.raises(UserError, match="does not exist"):
        read_squad(tmp_path / "missing.json")


# ---------------------------------------------------------------------------- who says?

PLAY = "\n\n".join(
    f"{name}:\n" + "\n".join(f"{name.lower()} line {i} of speech {s} is here" for i in range(4))
    for s, name in enumerate(["ROMEO", "JULIET", "NURSE", "ROMEO", "FRIAR LAURENCE", "JULIET", "ROMEO", "TYBALT"] * 2)
)


def headers(context):
    return [(m.start(1), m.group(1)) for m in re.finditer(r"(?:^|\n\n)([^\n]+):\n", context)]


def test_who_says_answers_are_headers_and_lines_are_unambiguous():
    examples = who_says(PLAY + "\n\nROMEO:\nShort.\nThe cut-off last window.\n", speeches=3, max_lines=2, per_window=2)
    assert {e.where for e in examples} == set(range(16 // 3))  # 5 full windows; the partial 6th is dropped
    assert len(examples) == 10 and len({e.id for e in examples}) == 10
    for e in examples:
        (name, at), line = e.answers[0], e.question[len("Who says '") : -len("'?")]
        assert e.context[at : at + len(name)] == name and (at, name) in headers(e.context)
        assert e.context.count(line) == 1 and len(line.split()) >= 3
        block = next(b for b in e.context.split("\n\n") if line in b.split("\n")[1:])
        assert block.startswith(f"{name}:\n")  # the speaker of that very line
        assert nearest_header_baseline(e) in [n for _, n in headers(e.context)]
    contexts = {e.where: e.context for e in examples}
    blocks = [b for c in contexts.values() for b in c.split("\n\n")]
    assert len(blocks) == len(set(blocks)) == 5 * 3  # no speech in two windows
    assert all(len(b.split("\n")) == 3 for b in blocks)  # header + max_lines


def test_who_says_skips_repeated_and_short_lines_and_is_seeded():
    play = "A:\nthe same long line\nok\n\nB:\nthe same long line\nnot the same line\n\nC:\ntoo short\n"
    examples = who_says(play, speeches=3, per_window=5)
    assert [(e.question, e.answers[0][0]) for e in examples] == [("Who says 'not the same line'?", "B")]
    assert who_says(PLAY, seed=1) == who_says(PLAY, seed=1) != who_says(PLAY, seed=2)


def test_nearest_header_baseline_looks_before_the_middle():
    context = "A:\nxxxxxxxxxx\n\nB:\nyy\n\nC:\n" + "z" * 10  # headers at 0, 15, 22; middle 17
    assert nearest_header_baseline(QAExample("x", "q", context, [("A", 0)])) == "B"
