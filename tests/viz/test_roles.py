"""Head-role scores on heads built to have one role each."""

import math

import torch

from tinyformer.viz.capture import AttentionMaps
from tinyformer.viz.roles import head_roles, roles_table

T = 6
TOKENS = ["[CLS]", "a", "b", "c", "d", "[SEP]"]


def rigged_maps() -> AttentionMaps:
    eye = torch.eye(T)
    prev = torch.zeros(T, T)
    prev[0, 0] = 1.0
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    cls = torch.zeros(T, T)
    cls[:, 0] = 1.0
    uniform = torch.full((T, T), 1.0 / T)
    layer = torch.stack([eye, prev, cls, uniform])[None]  # (1, 4, T, T)
    return AttentionMaps([layer, layer.flip(1)], [TOKENS], [TOKENS], "self", "rigged", {"cls": "[CLS]", "end": "[SEP]"})


def test_each_rigged_head_gets_its_role():
    r = head_roles(rigged_maps())
    assert r.dominant == [["self", "prev", "cls", "broad"], ["broad", "cls", "prev", "self"]]
    assert float(r.scores["self"][0, 0]) == 1.0 and float(r.scores["prev"][0, 1]) == 1.0
    assert float(r.scores["cls"][0, 2]) == 1.0 and abs(float(r.scores["broad"][0, 3]) - 1.0) < 1e-6
    assert float(r.scores["broad"][0, 0]) < 1e-6  # one-hot rows have zero entropy
    assert abs(float(r.scores["end"][0, 3]) - 1.0 / T) < 1e-6


def test_roles_without_special_tokens_are_nan_and_table_prints_every_head():
    m = rigged_maps()
    m.special = {}
    r = head_roles(m)
    assert math.isnan(float(r.scores["cls"][0, 2])) and r.dominant[0][2] == "mixed"
    table = roles_table(r)
    assert len(table.splitlines()) == 1 + 2 * 4 and "dominant" in table.splitlines()[0]


def test_causal_broadness_uses_only_visible_keys():
    causal = torch.tril(torch.ones(T, T))
    w = (causal / causal.sum(-1, keepdim=True))[None, None]  # uniform over the visible prefix
    m = AttentionMaps([w], [TOKENS], [TOKENS], "causal", "lm")
    assert abs(float(head_roles(m).scores["broad"][0, 0]) - 1.0) < 1e-6
