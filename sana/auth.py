"""Principals and bearer tokens: who calls the API, and what they may do.

A tokens file (``SANA_TOKENS_FILE``, JSON) lists the principals::

    {"principals": [
        {"name": "alice", "role": "user",  "token_sha256": "9f86d0...",
         "read_topics": ["riot-*"], "write_topics": []},
        {"name": "ops",   "role": "admin", "token_sha256": "60303a..."}
    ]}

Topics: a user's sinks write only topics in their namespace (``<name>.``, or
``topic_prefix``) or matching one of ``write_topics`` (patterns an admin
grants, ``fnmatch`` style); their sources read only their namespace and
``read_topics``. An admin reads and writes any topic. No namespace may
overlap another principal's (one a prefix of the other, counting ``.`` and
``_`` as one character as Kafka does when topic names collide): a tokens file
where two do is refused, so a principal's own namespace never reaches
another's; only a pattern an admin grants does.

Only the SHA-256 of each token is stored: tokens are random 256-bit strings
(``sana token new`` makes one), so a plain hash cannot be reversed and needs
no salt or slow hash. A request carries ``Authorization: Bearer <token>``.

Without a tokens file the service runs in single-user mode: every caller is
the admin ``local``, and ``sana up`` refuses to listen beyond loopback.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sana.exceptions import TokensFileInvalid, TopicForbidden, Unauthenticated

Role = Literal["user", "admin"]
NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
SINGLE_USER = "local"


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    topic_prefix: str = ""
    read_topics: tuple[str, ...] = ()
    write_topics: tuple[str, ...] = ()

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def namespace(self) -> str:
        return self.topic_prefix or f"{self.name}."

    def may_read(self, topic: str) -> bool:
        """
        >>> ann = Principal("ann", "user", read_topics=("riot-*",))
        >>> ann.may_read("ann.alerts"), ann.may_read("riot-grid"), ann.may_read("bob.alerts")
        (True, True, False)
        """
        return self.admin or topic.startswith(self.namespace) or any(fnmatch.fnmatchcase(topic, p) for p in self.read_topics)

    def may_write(self, topic: str) -> bool:
        """
        >>> ann = Principal("ann", "user", write_topics=("shared.alerts",))
        >>> ann.may_write("ann.out"), ann.may_write("shared.alerts"), ann.may_write("riot-grid")
        (True, True, False)
        """
        return self.admin or topic.startswith(self.namespace) or any(fnmatch.fnmatchcase(topic, p) for p in self.write_topics)


def token_hash(token: str) -> str:
    """The stored form of a token.

    >>> token_hash("test")
    '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'
    """
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return "sana_" + secrets.token_urlsafe(32)


class Principals:
    """The principals of a tokens file, or single-user mode (``Principals.single_user()``)."""

    def __init__(self, by_hash: dict[str, Principal], source: str | None) -> None:
        self._by_hash = by_hash
        self.source = source

    @classmethod
    def single_user(cls) -> "Principals":
        return cls({}, None)

    @property
    def enabled(self) -> bool:
        return self.source is not None

    def __len__(self) -> int:
        return len(self._by_hash)

    @classmethod
    def load(cls, path: Path | None) -> "Principals":
        """Read a tokens file; raises :class:`TokensFileInvalid` naming the file and the entry at fault."""
        if path is None:
            return cls.single_user()
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise TokensFileInvalid(f"tokens file {path}: {error}") from None
        return cls.parse(raw, str(path))

    @classmethod
    def parse(cls, raw: object, source: str) -> "Principals":
        """Principals from a tokens document.

        >>> p = Principals.parse({"principals": [{"name": "ann", "role": "user", "token_sha256": token_hash("t")}]}, "x")
        >>> p.authenticate("t").name, p.authenticate("t").namespace
        ('ann', 'ann.')
        >>> Principals.parse({"principals": [{"name": "ann", "role": "root", "token_sha256": "ab"}]}, "x")
        Traceback (most recent call last):
        ...
        sana.exceptions.TokensFileInvalid: tokens file x: principals[0] ('ann'): role must be 'user' or 'admin', not 'root'
        """
        entries = raw.get("principals") if isinstance(raw, dict) else None
        if not isinstance(entries, list) or not entries:
            raise TokensFileInvalid(f"tokens file {source}: expected {{\"principals\": [...]}} with at least one entry")
        by_hash: dict[str, Principal] = {}
        names: set[str] = set()
        for index, entry in enumerate(entries):
            where = f"tokens file {source}: principals[{index}]"
            if not isinstance(entry, dict):
                raise TokensFileInvalid(f"{where}: expected an object")
            name, role, digest = entry.get("name"), entry.get("role", "user"), entry.get("token_sha256")
            if not isinstance(name, str) or not NAME.match(name):
                raise TokensFileInvalid(f"{where}: name must be 1-64 of [A-Za-z0-9_.@-], not {name!r}")
            where += f" ({name!r})"
            if role not in ("user", "admin"):
                raise TokensFileInvalid(f"{where}: role must be 'user' or 'admin', not {role!r}")
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest.lower()):
                raise TokensFileInvalid(f"{where}: token_sha256 must be 64 hex digits (sana token new {name})")
            if name in names:
                raise TokensFileInvalid(f"{where}: name listed twice")
            if digest.lower() in by_hash:
                raise TokensFileInvalid(f"{where}: same token as {by_hash[digest.lower()].name!r}")
            topics = {}
            for field in ("read_topics", "write_topics"):
                patterns = entry.get(field, [])
                if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
                    raise TokensFileInvalid(f"{where}: {field} must be a list of topic patterns")
                topics[field] = tuple(patterns)
            prefix = entry.get("topic_prefix", "")
            if not isinstance(prefix, str) or (prefix and not TOPIC_PREFIX.match(prefix)):
                raise TokensFileInvalid(f"{where}: topic_prefix must be 1-200 of Kafka's topic characters "
                                        f"[A-Za-z0-9._-], not {prefix!r}")
            names.add(name)
            by_hash[digest.lower()] = Principal(name, role, prefix, topics["read_topics"], topics["write_topics"])
        _refuse_overlapping_namespaces(list(by_hash.values()), source)
        return cls(by_hash, source)

    def authenticate(self, token: str | None) -> Principal:
        """The principal of ``token``; in single-user mode, the admin ``local`` whatever the token."""
        if not self.enabled:
            return Principal(SINGLE_USER, "admin")
        if not token:
            raise Unauthenticated("this service needs a bearer token (Authorization: Bearer <token>; sana --token)")
        principal = self._by_hash.get(token_hash(token))
        if principal is None:
            raise Unauthenticated("unknown or revoked token")
        return principal


def collision_form(topic: str) -> str:
    """The form Kafka compares topic names in: it refuses a topic equal to an existing one with ``.`` and ``_`` swapped.

    >>> collision_form("ann.b.x") == collision_form("ann_b.x")
    True
    """
    return topic.replace(".", "_")


def _refuse_overlapping_namespaces(principals: list[Principal], source: str) -> None:
    """Raise :class:`TokensFileInvalid` naming two principals whose namespaces overlap.

    Two namespaces overlap when one is a prefix of the other (or both are equal) in
    :func:`collision_form`: then one principal may use, or squat, topic names in the
    other's namespace. Sorted, a namespace that is a prefix of another comes right
    before one that starts with it, so comparing neighbours finds every overlap.

    >>> ann, annx = Principal("ann", "user"), Principal("ann.x", "user")
    >>> _refuse_overlapping_namespaces([ann, annx], "t.json")
    Traceback (most recent call last):
    ...
    sana.exceptions.TokensFileInvalid: tokens file t.json: principals[1] ('ann.x'): namespace 'ann.x.' overlaps principals[0] ('ann')'s namespace 'ann.': one is a prefix of the other, so one could read and write the other's topics; give one of them a topic_prefix that overlaps no other namespace
    """
    order = sorted(range(len(principals)), key=lambda index: (collision_form(principals[index].namespace), index))
    for before, after in zip(order, order[1:]):
        shorter, longer = principals[before], principals[after]
        if not collision_form(longer.namespace).startswith(collision_form(shorter.namespace)):
            continue
        first, second = sorted((before, after))
        one, other = principals[first], principals[second]
        if longer.namespace.startswith(shorter.namespace):
            how = "one is a prefix of the other, so one could read and write the other's topics"
        else:
            how = ("one is a prefix of the other once '.' and '_' count as one character (Kafka refuses a topic "
                   "whose name differs from an existing one only there), so one could take the other's topic names")
        raise TokensFileInvalid(
            f"tokens file {source}: principals[{second}] ({other.name!r}): namespace {other.namespace!r} overlaps "
            f"principals[{first}] ({one.name!r})'s namespace {one.namespace!r}: {how}; give one of them a "
            "topic_prefix that overlaps no other namespace")


def check_topics(principal: Principal, tasks: Mapping[str, Any]) -> None:
    """Raise :class:`TopicForbidden` naming the first source or sink whose topic ``principal`` may not use."""
    for task_id, task in tasks.items():
        topic = task.config.get("topic") if task.type in ("source", "sink") else None
        if topic is None:
            continue
        if task.type == "source" and not principal.may_read(topic):
            raise TopicForbidden(f"task {task_id!r} (source) reads topic {topic!r}, which {principal.name!r} may not "
                                 f"read (their namespace: {principal.namespace!r}; an admin grants read_topics)",
                                 culprit={"task": task_id, "field": "config.topic"})
        if task.type == "sink" and not principal.may_write(topic):
            raise TopicForbidden(f"task {task_id!r} (sink) writes topic {topic!r}, outside {principal.name!r}'s "
                                 f"namespace {principal.namespace!r} (an admin grants write_topics)",
                                 culprit={"task": task_id, "field": "config.topic"})
