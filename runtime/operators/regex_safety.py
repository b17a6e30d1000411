r"""Regular expressions Java's backtracking engine could spend minutes on, refused before they run.

Spark evaluates ``RLIKE``/``regexp_like``, ``regexp_extract``, ``regexp_replace`` and ``split`` with
``java.util.regex``; ``LIKE``/``ILIKE`` too, unless the pattern is a plain prefix, suffix, substring or
equality test that Spark's optimizer turns into ``startsWith``/``endsWith``/``contains``/``=``. That engine
backtracks: when a match fails, it tries every other way the pattern could have split the text. A pattern
whose parts can split the same text in many ways takes exponential or high-polynomial time on a text that
almost matches -- per row, in a query other tenants' tasks share. This module parses a pattern with Java's
syntax (its own small parser: Java's differs from Python's ``re``) and refuses:

1. nested quantifiers: a group that repeats (``*``, ``+``, ``{2,}``, even a bounded ``{8}``) holding a
   quantifier that can repeat more than :data:`LARGE_COUNT` times: ``(a+)+``, ``(.*a){8}``, ``(\d+\.)+``;
2. choices inside a repeated group that the next character does not settle: a variable count that can end
   where the next repetition (or what follows the part) begins, ``(a?){20}``, ``(x{1,3}){5}``, and
   alternatives that can begin with the same character or match nothing, ``(a|a)*``, ``(a|ab)*``, ``(a|)+``;
3. a repeated group that can match the empty string, ``(a*)*``;
4. overlapping neighbours: an unbounded quantifier that can give characters back, followed -- with nothing
   in between that it could not take itself -- by another unbounded quantifier over some of the same
   characters: ``.*.*``, ``\d+\d*``, ``.*a.*b``, ``\s*-?\s*``. ``\d+-\d+`` and ``\w+\s+\w+`` are fine: each
   part stops at a separator it cannot take. Likewise a chain of small optional parts over common characters
   that can split a text in more than :data:`MAX_SPLITS` ways: ``a?a?a?a?a?a?a?a?a?aaaaaaaaa``;
5. what it cannot decide: backreferences (``\1``, ``\k<n>``), ``\X``, ``\N{...}``, syntax errors, patterns
   too long, groups nested too deep, counts too large (the bounds of ``regex_syntax.py``).

Possessive quantifiers (``*+``, ``++``, ``?+``, ``{n,m}+``) and atomic groups (``(?>...)``) never give back
what they took, so they are no choice for rules 1, 2 and 4 (what they hold is still checked on its own, and an
unbounded one still counts as the second neighbour of rule 4: it scans again after each choice of the first).
The pattern is read by ``runtime/operators/regex_syntax.py``; character sets are compared exactly on ASCII,
Unicode properties (``\p{L}``) count as taking every non-ASCII character, which can only refuse more. Every
pass over the parsed pattern recurses as deep as its groups nest, which the parser bounds.

One unbounded quantifier that gives characters back (``\d+x``) is accepted although, since RLIKE tries
every starting position, a long text of digits costs time quadratic in its length: that is the cost of
``find`` itself, not of an ambiguous pattern.
"""

from __future__ import annotations

from functools import lru_cache

from runtime.operators.regex_syntax import (ANY, EMPTY, Alt, Chars, CharSet, Group, Node, RegexRefused, Repeat, Seq,
                                            parse_pattern)

LARGE_COUNT = 10  # a bounded quantifier allowing more repetitions than this is treated like * and +


class _Facts:
    """What each node can match: ``nullable``, ``first`` characters, all ``chars``, and what ``follows`` it."""

    def __init__(self, root: Node) -> None:
        self._nullable: dict[int, bool] = {}
        self._first: dict[int, CharSet] = {}
        self._chars: dict[int, CharSet] = {}
        self.follows: dict[int, CharSet] = {}
        self._visit(root, EMPTY)

    def nullable(self, node: Node) -> bool:
        key = id(node)
        if key not in self._nullable:
            if isinstance(node, Chars):
                value = False
            elif isinstance(node, Seq):
                value = all(self.nullable(item) for item in node.items)
            elif isinstance(node, Alt):
                value = any(self.nullable(branch) for branch in node.branches)
            elif isinstance(node, Repeat):
                value = node.low == 0 or self.nullable(node.body)
            elif isinstance(node, Group) and node.kind != "look":
                value = self.nullable(node.body)
            else:
                value = True
            self._nullable[key] = value
        return self._nullable[key]

    def first(self, node: Node) -> CharSet:
        key = id(node)
        if key not in self._first:
            if isinstance(node, Chars):
                value = node.chars
            elif isinstance(node, Seq):
                value = EMPTY
                for item in node.items:
                    value = value | self.first(item)
                    if not self.nullable(item):
                        break
            elif isinstance(node, Alt):
                value = EMPTY
                for branch in node.branches:
                    value = value | self.first(branch)
            elif isinstance(node, Repeat):
                value = self.first(node.body) if node.high != 0 else EMPTY
            elif isinstance(node, Group) and node.kind != "look":
                value = self.first(node.body)
            else:
                value = EMPTY
            self._first[key] = value
        return self._first[key]

    def chars(self, node: Node) -> CharSet:
        key = id(node)
        if key not in self._chars:
            if isinstance(node, Chars):
                value = node.chars
            elif isinstance(node, (Seq, Alt)):
                value = EMPTY
                for child in node.items if isinstance(node, Seq) else node.branches:
                    value = value | self.chars(child)
            elif isinstance(node, Repeat):
                value = self.chars(node.body) if node.high != 0 else EMPTY
            elif isinstance(node, Group) and node.kind != "look":
                value = self.chars(node.body)
            else:
                value = EMPTY
            self._chars[key] = value
        return self._chars[key]

    def within(self, node: Node, chars: CharSet) -> bool:
        """Whether ``node`` can match some text (maybe empty) made only of ``chars``."""
        if isinstance(node, Chars):
            return node.chars.overlaps(chars)
        if isinstance(node, Seq):
            return all(self.within(item, chars) for item in node.items)
        if isinstance(node, Alt):
            return any(self.within(branch, chars) for branch in node.branches)
        if isinstance(node, Repeat):
            return node.low == 0 or self.within(node.body, chars)
        if isinstance(node, Group) and node.kind != "look":
            return self.within(node.body, chars)
        return True

    def _visit(self, node: Node, follow: CharSet) -> None:
        if isinstance(node, Seq):
            after = follow
            for item in reversed(node.items):
                self._visit(item, after)
                after = self.first(item) | (after if self.nullable(item) else EMPTY)
        elif isinstance(node, Alt):
            self.follows[id(node)] = follow
            for branch in node.branches:
                self._visit(branch, follow)
        elif isinstance(node, Repeat):
            self.follows[id(node)] = follow
            again = node.high is None or node.high > 1
            self._visit(node.body, follow | self.first(node.body) if again else follow)
        elif isinstance(node, Group):
            self._visit(node.body, follow if node.kind == "plain" else EMPTY)


def _source(pattern: str, node: Node) -> str:
    return pattern[node.start:node.end]


def _repeats(node: Repeat) -> bool:
    return node.high is None or node.high > 1


def _large(node: Repeat) -> bool:
    return node.high is None or node.high > LARGE_COUNT


def _children(node: Node) -> list[Node]:
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, Alt):
        return node.branches
    if isinstance(node, (Repeat, Group)):
        return [node.body]
    return []


def _inside(node: Node):
    """``node`` and what it holds that a backtracking repetition can re-split: not atomic, lookaround or possessive parts."""
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, Group) and current.kind != "plain":
            continue
        if isinstance(current, Repeat) and current.possessive:
            continue
        yield current
        pending.extend(_children(current))


def _check_repeat(pattern: str, facts: _Facts, repeat: Repeat) -> None:
    """Rules 1-3 for one repetition that can run more than once."""
    group = _source(pattern, repeat)
    body = repeat.body
    if facts.nullable(body) and not facts.chars(body).empty:
        raise RegexRefused(f"the repeated group {group!r} can match the empty string, so the engine can split a text "
                           "into its repetitions in endless ways; repeat once, e.g. (a*)* as a* and (a|)+ as a*")
    for inner in _inside(body):
        if isinstance(inner, Repeat) and _large(inner):
            quantifier = _source(pattern, inner)
            raise RegexRefused(
                f"nested quantifiers: the repeated group {group!r} holds {quantifier!r}, so a text that almost matches "
                f"can be split between the repetitions in exponentially many ways; repeat only once, let the inner part "
                f"stop at what follows it (e.g. [^a]* instead of .*), or make it possessive ({quantifier}+)")
        if isinstance(inner, Repeat) and (inner.high is None or inner.high > inner.low):
            follow = facts.follows.get(id(inner), EMPTY)
            if facts.first(inner.body).overlaps(follow):
                quantifier = _source(pattern, inner)
                raise RegexRefused(
                    f"inside the repeated group {group!r}, {quantifier!r} can stop before a "
                    f"{facts.first(inner.body).sample(follow)!r} or take it, and the next part can take it too, so the "
                    "repetitions can split a text in exponentially many ways; make the choice possessive "
                    f"({quantifier}+) or separate the repetitions by a character the part cannot take")
        if isinstance(inner, Alt):
            _check_alternation(pattern, facts, group, inner)


def _check_alternation(pattern: str, facts: _Facts, group: str, alternation: Alt) -> None:
    what = _source(pattern, alternation)
    nullable = [branch for branch in alternation.branches if facts.nullable(branch)]
    follow = facts.follows.get(id(alternation), EMPTY)
    clash = len(nullable) > 1 or any(facts.first(branch).overlaps(follow) for branch in alternation.branches
                                     if nullable and branch not in nullable)
    seen = EMPTY
    for branch in alternation.branches:
        clash = clash or facts.first(branch).overlaps(seen)
        seen = seen | facts.first(branch)
    if clash:
        raise RegexRefused(
            f"the alternatives of {what!r} inside the repeated group {group!r} can match the same text (or nothing), so "
            "the repetitions can split a text in exponentially many ways; make the alternatives start with different "
            "characters, e.g. (a|ab)* as (ab?)*")


# id -> (a repetition that can give back, the ways the chain of overlapping ones ending there can split a text,
# the first repetition of that chain)
Active = dict[int, tuple[Repeat, int, Repeat]]


def _scan(pattern: str, facts: _Facts, node: Node, active: Active) -> Active:
    """Rule 4: the repetitions that could still give back what lies between them and ``node``.

    ``active`` holds the backtracking repetitions of variable count seen so far that could also have taken every
    character since, each with the number of ways the chain of overlapping ones before it can split a text. An
    unbounded one meeting a later unbounded one over common characters is refused, and so is a chain of small
    ones (``a?a?a?...``) with more than :data:`MAX_SPLITS` ways.
    """
    if isinstance(node, Chars):
        return {key: entry for key, entry in active.items() if node.chars.overlaps(facts.chars(entry[0]))}
    if isinstance(node, Seq):
        for item in node.items:
            active = _scan(pattern, facts, item, active)
        return active
    if isinstance(node, Alt):
        after: Active = {}
        for branch in node.branches:
            for key, entry in _scan(pattern, facts, branch, dict(active)).items():
                if key not in after or entry[1] > after[key][1]:
                    after[key] = entry
        return after
    if isinstance(node, Group) and node.kind != "plain" or isinstance(node, Repeat) and node.possessive:
        # never gives back (an atomic or possessive part) or matches nothing (a lookaround): no choice of its
        # own, but what it holds scans again after each choice of an active repetition
        for inner in (node, *_descendants(node)):
            if isinstance(inner, Repeat) and _large(inner):
                _meet(pattern, facts, active, inner)
        if isinstance(node, Group) and node.kind == "look" or isinstance(node, Repeat) and node.low == 0:
            return active
        body = node.body
        return {key: entry for key, entry in active.items() if facts.within(body, facts.chars(entry[0]))}
    if isinstance(node, Group):
        return _scan(pattern, facts, node.body, active)
    if isinstance(node, Repeat):
        ways, chain = _meet(pattern, facts, active, node)
        inside = _scan(pattern, facts, node.body, dict(active))
        after = dict(active) if node.low == 0 else {}
        after.update(inside)
        if node.high is None or node.high > node.low:
            after[id(node)] = (node, ways, chain)
        return after
    return active


MAX_SPLITS = 256  # ways a chain of small optional parts may split a text, per starting position


def _descendants(node: Node):
    pending = list(_children(node))
    while pending:
        current = pending.pop()
        yield current
        pending.extend(_children(current))


def _meet(pattern: str, facts: _Facts, active: Active, later: Repeat) -> tuple[int, Repeat]:
    """Refuse ``later`` after the active repetitions it overlaps if it makes the split too ambiguous; else its
    chain's ways to split a text and the chain's first repetition."""
    choices = 1 if later.high is None or _large(later) else later.high - later.low + 1
    ways, chain = choices, later
    for first, first_ways, first_chain in active.values():
        if first is later or not facts.chars(first).overlaps(facts.chars(later)):
            continue
        one, two = _source(pattern, first), _source(pattern, later)
        shared = facts.chars(first).sample(facts.chars(later))
        if _large(first) and _large(later):
            raise RegexRefused(
                f"{one!r} and {two!r} can both take the same characters (such as {shared!r}) with nothing in between "
                "that only one of them can take, so a text that does not match is tried at every split between them; "
                "let the first stop at a separator it cannot take (e.g. [^,]* instead of .*), drop a leading or trailing "
                f".* (RLIKE finds a match anywhere), or make the first possessive ({one}+) if it keeps all it can take")
        if first_ways * choices > ways:
            ways, chain = first_ways * choices, first_chain
        if ways > MAX_SPLITS:
            one = _source(pattern, chain)
            raise RegexRefused(
                f"the optional or variable parts from {one!r} at {chain.start} to {two!r} at {later.start} can all take "
                "the same characters (such as "
                f"{shared!r}), so a text can be split among them in more than {MAX_SPLITS} ways, each tried when it does "
                "not match; make them fewer, or separate them by characters they cannot take")
    return ways, chain


def _analyse(pattern: str, root: Node) -> None:
    facts = _Facts(root)
    _scan(pattern, facts, root, {})
    for node in (root, *_descendants(root)):
        if isinstance(node, Repeat) and _repeats(node):
            _check_repeat(pattern, facts, node)
        if isinstance(node, Group) and node.kind != "plain":
            _scan(pattern, facts, node.body, {})


@lru_cache(maxsize=4096)
def regex_problem(pattern: str) -> str | None:
    r"""Why Java's engine could backtrack catastrophically on ``pattern``, or None if it cannot.

    Pure; the reason names the part of the pattern at fault (see the module's rules).

    >>> regex_problem(r"^a[0-9]+$") is None and regex_problem(r"\d+-\d+") is None
    True
    >>> regex_problem("(.*a){8}b")
    "nested quantifiers: the repeated group '(.*a){8}' holds '.*', so a text that almost matches can be split between the repetitions in exponentially many ways; repeat only once, let the inner part stop at what follows it (e.g. [^a]* instead of .*), or make it possessive (.*+)"
    >>> regex_problem(r"(\d++\.)+") is None
    True
    """
    try:
        _analyse(pattern, parse_pattern(pattern))
    except RegexRefused as refused:
        return str(refused)
    except RecursionError:
        return "it nests too deeply to be checked"
    return None


def _like_is_plain(pattern: str) -> bool:
    """Whether Spark turns ``LIKE pattern`` into startsWith/endsWith/contains/equality (no regular expression)."""
    if "\\" in pattern or "_" in pattern:
        return False
    parts = pattern.split("%")
    fixed = [part for part in parts if part]
    if "%" not in pattern:
        return True
    if len(fixed) == 1:
        return True  # 'abc%', '%abc', '%abc%' (runs of % count as one)
    return len(fixed) == 2 and bool(parts[0]) and bool(parts[-1])  # 'ab%cd'


@lru_cache(maxsize=4096)
def like_problem(pattern: str, *, case_insensitive: bool = False) -> str | None:
    """Why Spark's regular expression for ``LIKE pattern`` could backtrack catastrophically, or None.

    Spark runs ``abc%``, ``%abc``, ``%abc%``, ``ab%cd`` and ``abc`` as plain string tests, anything else (a
    ``_``, an escape, ``%`` between more fixed parts) as a regular expression where ``%`` is ``.*`` and ``_``
    is ``.``, with the rules of :func:`regex_problem`. ILIKE lower-cases both sides first.

    >>> like_problem("%abc%") is None and like_problem("a_c%") is None
    True
    >>> like_problem("%a%b%")
    "LIKE pattern '%a%b%' has '%' wildcards that can take the same characters, so Spark's regular expression for it tries every way to split a text that does not match; use startswith/endswith/contains or a pattern Spark runs as a plain string test ('abc%', '%abc', '%abc%', 'ab%cd')"
    """
    if case_insensitive:
        pattern = pattern.lower()
    if _like_is_plain(pattern):
        return None
    items: list[Node] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            following = pattern[index + 1:index + 2]
            if following not in ("_", "%", "\\"):
                return f"LIKE pattern {pattern!r}: the escape character must be followed by _, % or \\ (at position {index})"
            items.append(Chars(index, index + 2, CharSet.of((ord(following), ord(following)))))
            index += 2
            continue
        if char == "%":
            items.append(Repeat(index, index + 1, Chars(index, index + 1, ANY), 0, None))
        else:
            items.append(Chars(index, index + 1, ANY if char == "_" else CharSet.of((ord(char), ord(char)))))
        index += 1
    try:
        _analyse(pattern, Seq(0, len(pattern), items))
    except RegexRefused:
        return (f"LIKE pattern {pattern!r} has '%' wildcards that can take the same characters, so Spark's regular "
                "expression for it tries every way to split a text that does not match; use startswith/endswith/contains "
                "or a pattern Spark runs as a plain string test ('abc%', '%abc', '%abc%', 'ab%cd')")
    return None
