"""Topic namespaces never overlap: a tokens file where one principal's namespace reaches another's is refused.

A namespace is ``<name>.`` or the entry's ``topic_prefix``; a user's own
namespace rules (``may_read``/``may_write`` by prefix) must never cover
another principal's topics, whatever the names, so the file is checked when it
is loaded (sana/auth.py), by the app, ``sana up`` and ``sana serve`` alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.launcher import Launcher, LaunchError
from sana.auth import Principals, token_hash
from sana.exceptions import TokensFileInvalid
from tests.fixtures.dataflows import urban_etl


def _entry(name: str, role: str = "user", **fields) -> dict:
    return {"name": name, "role": role, "token_sha256": token_hash(f"{name}-token"), **fields}


def _parse(*entries: dict) -> Principals:
    return Principals.parse({"principals": list(entries)}, "tokens.json")


def test_a_namespace_inside_another_is_refused_naming_both_entries():
    with pytest.raises(TokensFileInvalid) as refused:
        _parse(_entry("alice"), _entry("bob"), _entry("alice.x"))
    assert refused.value.message == (
        "tokens file tokens.json: principals[2] ('alice.x'): namespace 'alice.x.' overlaps principals[0] ('alice')'s "
        "namespace 'alice.': one is a prefix of the other, so one could read and write the other's topics; give one "
        "of them a topic_prefix that overlaps no other namespace")


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        # a topic_prefix equal to another's
        ([_entry("ann", topic_prefix="team."), _entry("bob", topic_prefix="team.")],
         "principals[1] ('bob'): namespace 'team.' overlaps principals[0] ('ann')'s namespace 'team.'"),
        # a topic_prefix that is a prefix of another's default namespace (listed before it)
        ([_entry("bob"), _entry("mallory", topic_prefix="b")],
         "principals[1] ('mallory'): namespace 'b' overlaps principals[0] ('bob')'s namespace 'bob.'"),
        # a topic_prefix inside another's default namespace
        ([_entry("carol", topic_prefix="ann.sub."), _entry("ann")],
         "principals[1] ('ann'): namespace 'ann.' overlaps principals[0] ('carol')'s namespace 'ann.sub.'"),
        # an admin's namespace counts too: its own topics are no user's
        ([_entry("ops", "admin"), _entry("ops.x")],
         "principals[1] ('ops.x'): namespace 'ops.x.' overlaps principals[0] ('ops')'s namespace 'ops.'"),
        # far apart in the file, and among others
        ([_entry("zed"), _entry("ann"), _entry("yan"), _entry("ann.b.c")],
         "principals[3] ('ann.b.c'): namespace 'ann.b.c.' overlaps principals[1] ('ann')'s namespace 'ann.'"),
    ],
    ids=["equal-prefixes", "short-prefix", "prefix-inside-a-namespace", "admin", "far-apart"],
)
def test_every_kind_of_overlap_is_refused(entries, named):
    with pytest.raises(TokensFileInvalid, match="one is a prefix of the other, so one could read and write") as refused:
        _parse(*entries)
    assert refused.value.message.startswith(f"tokens file tokens.json: {named}: ")


def test_names_kafka_would_take_for_one_are_refused_too():
    """Kafka refuses topic 'ann_b.x' once 'ann.b.x' exists ('.' and '_' collide): 'ann' could squat 'ann_b''s names."""
    with pytest.raises(TokensFileInvalid) as refused:
        _parse(_entry("ann"), _entry("ann_b"))
    assert refused.value.message == (
        "tokens file tokens.json: principals[1] ('ann_b'): namespace 'ann_b.' overlaps principals[0] ('ann')'s "
        "namespace 'ann.': one is a prefix of the other once '.' and '_' count as one character (Kafka refuses a "
        "topic whose name differs from an existing one only there), so one could take the other's topic names; give "
        "one of them a topic_prefix that overlaps no other namespace")


def test_a_topic_prefix_sets_overlapping_namespaces_apart():
    others = (_entry("ann"), _entry("anna"), _entry("bob", topic_prefix="shared-bob."), _entry("ops", "admin"))
    with pytest.raises(TokensFileInvalid, match=r"principals\[5\] \('alice.x'\): namespace 'alice.x.' overlaps"):
        _parse(*others, _entry("alice"), _entry("alice.x"))
    principals = _parse(*others, _entry("alice", topic_prefix="alice.main."), _entry("alice.x"))
    alice, other = principals.authenticate("alice-token"), principals.authenticate("alice.x-token")
    assert not alice.may_write("alice.x.out") and not alice.may_read("alice.x.out")
    assert other.may_write("alice.x.out") and not other.may_write("alice.main.out")


def test_a_topic_prefix_must_be_a_topic_name_start():
    with pytest.raises(TokensFileInvalid, match=r"principals\[0\] \('ann'\): topic_prefix must be 1-200 of Kafka's "
                                                r"topic characters \[A-Za-z0-9._-\], not 'ann/\*'"):
        _parse(_entry("ann", topic_prefix="ann/*"))


@pytest.mark.redis
def test_the_service_and_its_launchers_refuse_overlapping_namespaces(settings_factory, tmp_path: Path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"principals": [_entry("alice"), _entry("alice.x")]}))
    with pytest.raises(TokensFileInvalid, match=r"principals\[1\] \('alice.x'\): namespace 'alice.x.' overlaps"):
        with TestClient(create_app(settings_factory(tokens_file=path))):
            pass
    with pytest.raises(LaunchError, match=r"principals\[1\] \('alice.x'\): namespace 'alice.x.' overlaps"):
        Launcher(settings_factory(api_host="0.0.0.0", tokens_file=path), tmp_path).check_access(demo=False)

    path.write_text(json.dumps({"principals": [_entry("alice", topic_prefix="alice.main.", read_topics=["urban"]),
                                               _entry("alice.x")]}))
    with TestClient(create_app(settings_factory(tokens_file=path))) as client:
        refused = client.post("/dataflows", json=urban_etl("alice.x.out"), headers={"Authorization": "Bearer alice-token"})
        assert refused.status_code == 403 and refused.json()["code"] == "TOPIC_FORBIDDEN"
        assert "outside 'alice''s namespace 'alice.main.'" in refused.json()["detail"]
