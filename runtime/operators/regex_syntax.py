r"""Java's regular expression syntax (``java.util.regex.Pattern``), parsed into nodes for analysis.

Spark hands its regular expressions to Java, whose syntax differs from Python's ``re``: ``\p{Alpha}``,
``\Q...\E`` quoting, possessive quantifiers (``*+``), atomic groups (``(?>...)``), class unions and
intersections (``[a-z&&[^e]]``), inline flags (``(?ix)``, where ``x`` ignores blanks and ``#`` comments).
:func:`parse_pattern` reads that syntax into :class:`Chars`, :class:`Seq`, :class:`Alt`, :class:`Repeat`,
:class:`Group` and :class:`Assert` nodes, each with its span in the pattern, for
``runtime/operators/regex_safety.py`` to judge. It is a loop with an explicit stack of open groups, so a
deeply nested pattern cannot exhaust Python's stack (groups nest at most :data:`MAX_GROUP_DEPTH` deep,
character classes :data:`MAX_CLASS_DEPTH`). Anything it does not know -- a backreference, ``\X``,
``\N{...}``, a syntax error -- raises :class:`RegexRefused` saying why and where.

Character sets (:class:`CharSet`) are exact on ASCII; a Unicode property (``\p{L}``), the ``(?U)`` flag or
``(?iu)`` case folding count as possibly taking any non-ASCII character, an over-approximation that keeps
its under-approximation beside it so that complements stay sound.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

MAX_PATTERN_CHARS = 2_000  # a pattern is a literal in an expression of at most 10,000 characters
MAX_GROUP_DEPTH = 20  # groups inside groups; real patterns use a handful
MAX_CLASS_DEPTH = 8  # character classes inside classes: [a-z&&[^[aeiou]]]
MAX_COUNT = 1_000  # the largest count of {n,m}: each count is a loop the engine runs per starting position


class RegexRefused(ValueError):
    """A pattern is refused; the message says why and names the part at fault."""


# ---------------------------------------------------------------------------------------------- character sets

_TOP = 0x10FFFF
Intervals = tuple[tuple[int, int], ...]


def _normal(pairs) -> Intervals:
    merged: list[list[int]] = []
    for low, high in sorted(pairs):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return tuple((low, high) for low, high in merged)


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    result, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if low <= high:
            result.append((low, high))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(result)


def _complement(a: Intervals) -> Intervals:
    result, start = [], 0
    for low, high in a:
        if low > start:
            result.append((start, low - 1))
        start = high + 1
    if start <= _TOP:
        result.append((start, _TOP))
    return tuple(result)


@dataclass(frozen=True)
class CharSet:
    r"""Characters one position may take: ``upper`` holds every one it may match, ``lower`` only sure ones.

    Exact sets have ``upper == lower``; approximate ones (Unicode properties) keep both so that a complement
    (``\P{L}``, ``[^\p{L}]``) is still an over-approximation.
    """

    upper: Intervals
    lower: Intervals

    @staticmethod
    def of(*pairs: tuple[int, int]) -> "CharSet":
        exact = _normal(pairs)
        return CharSet(exact, exact)

    def __or__(self, other: "CharSet") -> "CharSet":
        return CharSet(_normal(self.upper + other.upper), _normal(self.lower + other.lower))

    def __and__(self, other: "CharSet") -> "CharSet":
        return CharSet(_intersect(self.upper, other.upper), _intersect(self.lower, other.lower))

    def __invert__(self) -> "CharSet":
        return CharSet(_complement(self.lower), _complement(self.upper))

    def overlaps(self, other: "CharSet") -> bool:
        return bool(_intersect(self.upper, other.upper))

    @property
    def empty(self) -> bool:
        return not self.upper

    def sample(self, other: "CharSet | None" = None) -> str:
        """A character both sets may take, printable when there is one (for messages)."""
        pairs = _intersect(self.upper, other.upper) if other is not None else self.upper
        for low, high in pairs:
            for code in range(low, min(high, low + 256) + 1):
                if chr(code).isprintable() and not chr(code).isspace():
                    return chr(code)
        return chr(pairs[0][0]) if pairs else ""


EMPTY = CharSet((), ())
ANY = CharSet.of((0, _TOP))
_ASCII = CharSet.of((0, 127))
_NON_ASCII = CharSet.of((128, _TOP))
_LETTERS = CharSet.of((65, 90), (97, 122))
_LINE_ENDS = CharSet.of((10, 10), (13, 13), (0x85, 0x85), (0x2028, 0x2029))
_DIGIT = CharSet.of((48, 57))
_SPACE = CharSet.of((9, 13), (32, 32))
_WORD = CharSet.of((48, 57), (65, 90), (95, 95), (97, 122))
_POSIX = {
    "Lower": CharSet.of((97, 122)), "Upper": CharSet.of((65, 90)), "ASCII": _ASCII, "Alpha": _LETTERS,
    "Digit": _DIGIT, "Alnum": CharSet.of((48, 57), (65, 90), (97, 122)),
    "Punct": CharSet.of((33, 47), (58, 64), (91, 96), (123, 126)), "Graph": CharSet.of((33, 126)),
    "Print": CharSet.of((32, 126)), "Blank": CharSet.of((9, 9), (32, 32)), "Cntrl": CharSet.of((0, 31), (127, 127)),
    "XDigit": CharSet.of((48, 57), (65, 70), (97, 102)), "Space": _SPACE,
}
_HORIZONTAL = CharSet.of((9, 9), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x180E, 0x180E), (0x2000, 0x200A),
                         (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000))
_VERTICAL = CharSet.of((10, 13), (0x85, 0x85), (0x2028, 0x2029))
_CATEGORIES = {"L", "Lu", "Ll", "Lt", "Lm", "Lo", "LC", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc", "Pd",
               "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Co",
               "Cs", "Cn"}


def _unicode_wide(ascii_part: CharSet) -> CharSet:
    """Exact on ASCII, and possibly any non-ASCII character: how a Unicode property is approximated."""
    return CharSet(_normal(ascii_part.upper + _NON_ASCII.upper), ascii_part.lower)


def _category(name: str) -> CharSet:
    codes = [code for code in range(128) if unicodedata.category(chr(code)).startswith(name)
             or (name == "LC" and unicodedata.category(chr(code)) in ("Lu", "Ll", "Lt"))]
    return _unicode_wide(CharSet.of(*((code, code) for code in codes)))


def _property(name: str, unicode_classes: bool) -> CharSet:
    if name in _POSIX:
        return _unicode_wide(_POSIX[name]) if unicode_classes else _POSIX[name]
    bare = name[2:] if name.startswith("Is") else name
    for prefix in ("gc=", "general_category="):
        if bare.startswith(prefix):
            bare = bare[len(prefix):]
    if bare in _CATEGORIES:
        return _category(bare)
    return CharSet(((0, _TOP),), ())  # scripts, blocks, java* and binary properties: anything


def _case_folded(chars: CharSet, flags: frozenset[str]) -> CharSet:
    """``chars`` under (?i): ASCII letters of either case, and any non-ASCII character with (?iu)."""
    if "i" not in flags:
        return chars
    swap = lambda pairs: tuple((low ^ 32, high ^ 32) for low, high in _intersect(pairs, _LETTERS.upper))  # noqa: E731
    upper = _normal(chars.upper + swap(chars.upper))
    if "u" in flags and _intersect(upper, _normal(_LETTERS.upper + _NON_ASCII.upper)):
        upper = _normal(upper + _NON_ASCII.upper)
    return CharSet(upper, _normal(chars.lower + swap(chars.lower)))


# ------------------------------------------------------------------------------------------------ parsed pattern

@dataclass(eq=False)
class Node:
    start: int
    end: int


@dataclass(eq=False)
class Chars(Node):
    chars: CharSet


@dataclass(eq=False)
class Seq(Node):
    items: list


@dataclass(eq=False)
class Alt(Node):
    branches: list


@dataclass(eq=False)
class Repeat(Node):
    body: Node
    low: int
    high: int | None  # None: unbounded
    possessive: bool = False


@dataclass(eq=False)
class Group(Node):
    body: Node
    kind: str  # "plain", "atomic" (also \R) or "look" (lookahead and lookbehind)


@dataclass(eq=False)
class Assert(Node):
    pass


@dataclass(eq=False)
class _Frame:
    kind: str
    start: int  # the group's opening parenthesis
    flags: frozenset[str]  # in force before the group opened
    starts: list[int]  # where each alternative begins
    branches: list = field(default_factory=lambda: [[]])


_FLAG_LETTERS = set("idmsuxU")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "a": "\x07", "e": "\x1b"}
_ASSERT_ESCAPES = set("bBAGZz")


class _Parser:
    """Java's ``Pattern`` syntax into nodes: a loop over the text with an explicit stack of open groups."""

    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.i = 0
        self.flags: frozenset[str] = frozenset()
        self.flags_end = -1  # where the last flags-only group (?i) ended: Java repeats nothing after one

    def fail(self, why: str, at: int | None = None) -> RegexRefused:
        where = self.i if at is None else at
        return RegexRefused(f"it cannot be analysed: {why} at position {where}")

    def parse(self) -> Node:
        text = self.text
        stack = [_Frame("plain", 0, self.flags, [0])]
        while self.i < len(text):
            char = text[self.i]
            branch = stack[-1].branches[-1]
            if "x" in self.flags and char in " \t\n\x0b\f\r":
                self.i += 1
            elif "x" in self.flags and char == "#":
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end + 1
            elif char == "(":
                self._open(stack)
            elif char == ")":
                if len(stack) == 1:
                    raise self.fail("unmatched ')'")
                self._close(stack)
            elif char == "|":
                stack[-1].branches.append([])
                stack[-1].starts.append(self.i + 1)
                self.i += 1
            elif char in "*+?{":
                self._quantify(branch)
            elif char == "[":
                start = self.i
                self.i += 1
                chars = self._class(1)
                branch.append(Chars(start, self.i, chars))
            elif char == "\\":
                start = self.i
                self.i += 1
                branch.extend(self._escape(start))
            elif char == ".":
                dot = ANY if "s" in self.flags else ~CharSet.of((10, 10)) if "d" in self.flags else ~_LINE_ENDS
                branch.append(Chars(self.i, self.i + 1, dot))
                self.i += 1
            elif char in "^$":
                branch.append(Assert(self.i, self.i + 1))
                self.i += 1
            else:
                branch.append(self._literal(self.i, ord(char)))
                self.i += 1
        if len(stack) > 1:
            raise self.fail("unclosed group", stack[-1].start)
        return self._body(stack[0], len(text))

    def _literal(self, at: int, code: int, end: int | None = None) -> Chars:
        return Chars(at, at + 1 if end is None else end, _case_folded(CharSet.of((code, code)), self.flags))

    def _body(self, frame: _Frame, end: int) -> Node:
        ends = [start - 1 for start in frame.starts[1:]] + [end]
        branches = [Seq(start, stop, items) for start, stop, items in zip(frame.starts, ends, frame.branches)]
        return branches[0] if len(branches) == 1 else Alt(frame.starts[0], end, branches)

    def _open(self, stack: list[_Frame]) -> None:
        text, start = self.text, self.i
        kind, flags = "plain", self.flags
        if text.startswith("(?", start):
            rest = text[start + 2:start + 4]
            if rest.startswith(":"):
                self.i = start + 3
            elif rest.startswith(">"):
                kind, self.i = "atomic", start + 3
            elif rest.startswith(("=", "!")):
                kind, self.i = "look", start + 3
            elif rest in ("<=", "<!"):
                kind, self.i = "look", start + 4
            elif rest.startswith("<"):
                close = text.find(">", start + 3)
                name = text[start + 3:close] if close > 0 else ""
                if not (name[:1].isascii() and name[:1].isalpha() and name.isascii() and name.isalnum()):
                    raise self.fail("bad group name")
                self.i = close + 1
            else:
                flags, ended_group = self._inline_flags(start + 2)
                if ended_group:
                    self.flags, self.flags_end = flags, self.i
                    return
        else:
            self.i = start + 1
        if len(stack) >= MAX_GROUP_DEPTH:
            raise RegexRefused(f"it nests groups more than {MAX_GROUP_DEPTH} deep (at position {start})")
        stack.append(_Frame(kind, start, self.flags, [self.i]))
        self.flags = flags

    def _inline_flags(self, at: int) -> tuple[frozenset[str], bool]:
        """``(?idmsux-idmsux)`` (flags for the rest of the group) or ``(?idmsux-idmsux:`` (for a new group)."""
        text, on, turned_off = self.text, set(self.flags), False
        i = at
        while i < len(text) and text[i] not in ":)":
            letter = text[i]
            if letter == "-" and not turned_off:
                turned_off = True
            elif letter in _FLAG_LETTERS:
                (on.discard if turned_off else on.add)(letter)
                if letter == "U" and not turned_off:
                    on.add("u")
            else:
                raise self.fail(f"unknown group construct '(?{letter}'", at)
            i += 1
        if i >= len(text):
            raise self.fail("unclosed group", at - 2)
        self.i = i + 1
        return frozenset(on), text[i] == ")"

    def _close(self, stack: list[_Frame]) -> None:
        frame = stack.pop()
        self.i += 1
        body = self._body(frame, self.i - 1)
        self.flags = frame.flags
        stack[-1].branches[-1].append(Group(frame.start, self.i, body, frame.kind))

    def _quantify(self, branch: list) -> None:
        text, start = self.text, self.i
        char = text[start]
        if char == "{":
            close = text.find("}", start)
            inside = text[start + 1:close] if close > 0 else ""
            low_text, comma, high_text = inside.partition(",")
            if not low_text.isdigit() or not (high_text.isdigit() or not high_text) or not inside.isascii():
                raise self.fail("illegal repetition '{' (write \\{ for a brace)")
            low = int(low_text)
            high = low if not comma else int(high_text) if high_text else None
            if max(low, high or 0) > MAX_COUNT:
                raise RegexRefused(f"it counts a repetition above {MAX_COUNT:,} ({text[start:close + 1]!r})")
            if high is not None and high < low:
                raise self.fail("repetition count out of order")
            self.i = close + 1
        else:
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
            self.i = start + 1
        possessive = False
        if self.i < len(text) and text[self.i] in "?+":
            possessive = text[self.i] == "+"
            self.i += 1
        target = branch[-1] if branch else None
        if target is None or start == self.flags_end:
            raise self.fail(f"nothing to repeat before '{char}'", start)
        if isinstance(target, Assert) or (isinstance(target, Group) and target.kind == "look"):
            raise self.fail("a zero-width assertion cannot repeat", start)
        if isinstance(target, Repeat) and target.end == start:
            raise self.fail("two quantifiers in a row", start)
        branch[-1] = Repeat(target.start, self.i, target, low, high, possessive)

    def _escape(self, start: int) -> list[Node]:
        """The nodes of the escape starting with the backslash at ``start`` (``self.i`` is just after it)."""
        text = self.text
        if self.i >= len(text):
            raise self.fail("trailing backslash", start)
        letter = text[self.i]
        if letter == "Q":
            end = text.find("\\E", self.i + 1)
            stop = len(text) if end < 0 else end
            nodes = [self._literal(at, ord(text[at])) for at in range(self.i + 1, stop)]
            self.i = len(text) if end < 0 else end + 2
            return nodes
        if letter in _ASSERT_ESCAPES:
            self.i += 1
            if letter == "b" and text.startswith("{", self.i):
                close = text.find("}", self.i)
                if close < 0:
                    raise self.fail("unclosed \\b{...}", start)
                self.i = close + 1
            return [Assert(start, self.i)]
        if letter == "R":
            self.i += 1
            end = self.i  # \R is (?>\r\n|[\n\x0B\f\r\x85\u2028\u2029])
            crlf = Seq(start, end, [Chars(start, end, CharSet.of((13, 13))), Chars(start, end, CharSet.of((10, 10)))])
            single = Seq(start, end, [Chars(start, end, _VERTICAL)])
            return [Group(start, end, Alt(start, end, [crlf, single]), "atomic")]
        if letter in "123456789" or letter == "k":
            raise RegexRefused(f"it uses the backreference {text[start:start + 2]!r}...: matching with backreferences "
                               "can take exponential time and is not supported")
        if letter in "XN":
            raise self.fail(f"\\{letter} is not supported", start)
        chars = self._escaped_chars(start)
        return [Chars(start, self.i, chars)]

    def _escaped_chars(self, start: int) -> CharSet:
        """The set of a character escape or predefined class (``self.i`` at the letter after the backslash)."""
        text, letter = self.text, self.text[self.i]
        self.i += 1
        unicode_classes = "U" in self.flags
        predefined = {"d": _DIGIT, "s": _SPACE, "w": _WORD, "h": _HORIZONTAL, "v": _VERTICAL}
        if letter.lower() in predefined:
            chars = predefined[letter.lower()]
            if unicode_classes and letter.lower() in "dsw":
                chars = _unicode_wide(chars)
            return ~chars if letter.isupper() else chars
        if letter in "pP":
            if text.startswith("{", self.i):
                close = text.find("}", self.i)
                if close < 0:
                    raise self.fail("unclosed \\p{...}", start)
                name, self.i = text[self.i + 1:close], close + 1
            elif self.i < len(text):
                name, self.i = text[self.i], self.i + 1
            else:
                raise self.fail("\\p without a name", start)
            chars = _case_folded(_property(name, unicode_classes), self.flags)
            return ~chars if letter == "P" else chars
        return _case_folded(CharSet.of((code := self._code_point(letter, start), code)), self.flags)

    def _code_point(self, letter: str, start: int) -> int:
        text = self.text
        if letter in _SIMPLE_ESCAPES:
            return ord(_SIMPLE_ESCAPES[letter])
        if letter == "0":
            digits = ""
            while self.i < len(text) and text[self.i] in "01234567" and len(digits) < 3:
                if len(digits) == 2 and digits[0] > "3":
                    break
                digits += text[self.i]
                self.i += 1
            if not digits:
                raise self.fail("illegal octal escape", start)
            return int(digits, 8)
        if letter == "x":
            if text.startswith("{", self.i):
                close = text.find("}", self.i)
                digits, self.i = (text[self.i + 1:close], close + 1) if close > 0 else ("", self.i)
            else:
                digits, self.i = text[self.i:self.i + 2], self.i + 2
            return self._hex(digits, start, 8)
        if letter == "u":
            digits, self.i = text[self.i:self.i + 4], self.i + 4
            return self._hex(digits, start, 4)
        if letter == "c":
            if self.i >= len(text):
                raise self.fail("\\c without a letter", start)
            self.i += 1
            return ord(text[self.i - 1]) ^ 64
        if letter.isascii() and letter.isalnum():
            raise self.fail(f"unknown escape \\{letter}", start)
        return ord(letter)

    def _hex(self, digits: str, start: int, most: int) -> int:
        if not digits or len(digits) > most or any(digit not in "0123456789abcdefABCDEF" for digit in digits):
            raise self.fail("illegal hexadecimal escape", start)
        value = int(digits, 16)
        if value > _TOP:
            raise self.fail("code point out of range", start)
        return value

    def _class(self, depth: int) -> CharSet:
        """A character class after its ``[``: unions, ranges, nested classes and ``&&`` intersections."""
        if depth > MAX_CLASS_DEPTH:
            raise RegexRefused(f"it nests character classes more than {MAX_CLASS_DEPTH} deep (at position {self.i})")
        text, start = self.text, self.i - 1
        negated = text.startswith("^", self.i)
        self.i += negated
        operands: list[CharSet] = []
        current, first = EMPTY, True
        while True:
            if self.i >= len(text):
                raise self.fail("unclosed character class", start)
            char = text[self.i]
            if char == "]":
                if first:
                    raise self.fail("']' right after '[' (write \\] for a bracket)")
                self.i += 1
                break
            first = False
            if char == "[":
                self.i += 1
                current |= self._class(depth + 1)
            elif text.startswith("&&", self.i):
                operands.append(current)
                current = EMPTY
                self.i += 2
            elif char == "\\" and text.startswith("Q", self.i + 1):
                end = text.find("\\E", self.i + 2)
                stop = len(text) if end < 0 else end
                for at in range(self.i + 2, stop):
                    current |= _case_folded(CharSet.of((ord(text[at]), ord(text[at]))), self.flags)
                self.i = len(text) if end < 0 else end + 2
            else:
                current |= self._class_item()
        operands.append(current)
        if len(operands) > 1 and any(operand.empty for operand in operands):
            raise self.fail("an empty side of '&&'", start)
        result = operands[0]
        for operand in operands[1:]:
            result = result & operand
        return ~result if negated else result

    def _class_item(self) -> CharSet:
        """One character, range or predefined class inside ``[...]``."""
        text, start = self.text, self.i
        low = self._class_char()
        if isinstance(low, CharSet):
            return low
        if text.startswith("-", self.i) and self.i + 1 < len(text) and text[self.i + 1] not in "]":
            if text[self.i + 1] == "[":
                raise self.fail("a range cannot end with a class", self.i)
            self.i += 1
            high = self._class_char()
            if isinstance(high, CharSet):
                raise self.fail("a range cannot end with a class", start)
            if high < low:
                raise self.fail("illegal character range", start)
            return _case_folded(CharSet.of((low, high)), self.flags)
        return _case_folded(CharSet.of((low, low)), self.flags)

    def _class_char(self) -> int | CharSet:
        text = self.text
        char = text[self.i]
        if char != "\\":
            self.i += 1
            return ord(char)
        start = self.i
        self.i += 1
        if self.i >= len(text):
            raise self.fail("trailing backslash", start)
        letter = text[self.i]
        if letter in "dDsSwWhHvVpP":
            return self._escaped_chars(start)
        if letter in "123456789kbBAGZzRXNQE":
            raise self.fail(f"\\{letter} inside a character class", start)
        self.i += 1
        return self._code_point(letter, start) if letter.isascii() and letter.isalnum() else ord(letter)


def parse_pattern(pattern: str) -> Node:
    r"""The nodes of a Java regular expression; raises :class:`RegexRefused` for what it cannot read.

    >>> node = parse_pattern(r"\d++(?>a|b)")
    >>> [type(item).__name__ for item in node.items], node.items[0].possessive
    (['Repeat', 'Group'], True)
    >>> parse_pattern(r"(a)\1")
    Traceback (most recent call last):
    ...
    runtime.operators.regex_syntax.RegexRefused: it uses the backreference '\\1'...: matching with backreferences can take exponential time and is not supported
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise RegexRefused(f"it is {len(pattern):,} characters long; at most {MAX_PATTERN_CHARS:,} can be checked")
    return _Parser(pattern).parse()
