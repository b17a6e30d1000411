"""Bounds on how deep an expression nests, checked without recursion: before parsing and after.

sqlglot parses by recursive descent and spends about twenty Python frames per level of parentheses (measured:
48 nested ``(`` exhaust Python's default limit of 1,000 frames from an empty stack, 33 from a stack 300 frames
deep, as a request handler's is), so an expression in 50 parentheses used to end in a RecursionError, an
HTTP 500. :func:`nesting_problem` counts, in one pass over the text that skips string literals, quoted names
and comments, the levels the parser will open: brackets of every kind, ``CASE ... END``, and prefix operators
stacked on one another (``NOT NOT x``, ``- - x``); :data:`MAX_NESTING` keeps the parser far from the limit.
Long chains the parser builds in a loop (``a + a + ... + a``, ``x::int::int``) still make deep trees, which
later recursive passes (rendering, copying, type annotation) walk: :func:`depth_problem` bounds the parsed
tree to :data:`MAX_TREE_DEPTH` levels (the deepest expression of the benchmark workloads has 17).
"""

from __future__ import annotations

from sqlglot import exp

MAX_EXPRESSION_CHARS = 10_000  # the longest expression text a config field takes
MAX_NESTING = 20  # brackets, CASE ... END and stacked prefix operators, counted together
MAX_TREE_DEPTH = 100  # levels of the parsed tree

_OPENERS, _CLOSERS = "([{", ")]}"
_PREFIX_OPERATORS = "-+~!"
# Words after which a '-' or '+' is a sign, not a subtraction; NOT is a prefix operator itself.
_OPERATOR_WORDS = {"AND", "OR", "NOT", "CASE", "WHEN", "THEN", "ELSE", "IS", "IN", "LIKE", "ILIKE", "RLIKE", "REGEXP",
                   "BETWEEN", "DIV", "MOD", "AS", "FROM", "INTERVAL", "DISTINCT", "ESCAPE"}


def _skip_quoted(text: str, start: int) -> int:
    """The index after the string literal or quoted name opening at ``start`` (backslash escapes inside)."""
    quote, index = text[start], start + 1
    while index < len(text):
        if text[index] == "\\" and quote != "`":
            index += 2
            continue
        if text[index] == quote:
            return index + 1
        index += 1
    return len(text)


def _skip_comment(text: str, start: int) -> int:
    """The index after the comment opening at ``start``: ``-- ...`` to the line's end, ``/* ... */`` nested."""
    if text.startswith("--", start):
        end = text.find("\n", start)
        return len(text) if end < 0 else end + 1
    depth, index = 0, start
    while index < len(text):
        if text.startswith("/*", index):
            depth, index = depth + 1, index + 2
        elif text.startswith("*/", index):
            depth, index = depth - 1, index + 2
            if depth == 0:
                return index
        else:
            index += 1
    return len(text)


def nesting_problem(text: str) -> str | None:
    """Why ``text`` is too long or nests too deeply to parse safely, or None; one linear pass, no recursion.

    >>> nesting_problem("abs((a + b) * (c - d)) > 1 AND NOT (x IS NULL)") is None
    True
    >>> nesting_problem("(" * 50 + "x" + ")" * 50)
    'nests 21 levels deep at character 21 (brackets, CASE ... END and stacked NOT/-/+ count); at most 20 are allowed'
    >>> nesting_problem("')))((((' = s") is None
    True
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        return f"is {len(text):,} characters long; at most {MAX_EXPRESSION_CHARS:,} are allowed"
    carried: list[int] = []  # per open level: the prefix operators stacked when it opened
    run = 0  # prefix operators stacked since the last operand
    after_operand = False
    index = 0
    while index < len(text):
        char = text[index]
        if char in "'\"`":
            index, run, after_operand = _skip_quoted(text, index), 0, True
            continue
        if text.startswith(("--", "/*"), index):
            index = _skip_comment(text, index)
            continue
        if char.isalnum() or char == "_":
            end = index
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            word = text[index:end].upper()
            if word == "CASE":
                carried.append(run)
                run, after_operand = 0, False
            elif word == "END" and carried:
                carried.pop()
                run, after_operand = 0, True
            elif word == "NOT":
                run, after_operand = run + 1, False
            elif word in _OPERATOR_WORDS:
                after_operand = False
            else:
                run, after_operand = 0, True
            index = end
        elif char in _OPENERS:
            carried.append(run)
            run, after_operand = 0, False
            index += 1
        elif char in _CLOSERS:
            if carried:
                carried.pop()
            run, after_operand = 0, True
            index += 1
        elif char in _PREFIX_OPERATORS and not after_operand:
            run += 1
            index += 1
        else:
            after_operand = after_operand and char.isspace()
            index += 1
        depth = len(carried) + sum(carried) + run
        if depth > MAX_NESTING:
            return (f"nests {depth} levels deep at character {index} (brackets, CASE ... END and stacked NOT/-/+ "
                    f"count); at most {MAX_NESTING} are allowed")
    return None


def depth_problem(tree: exp.Expression) -> str | None:
    """Why the parsed ``tree`` is too deep for the recursive passes over it, or None; measured with a loop.

    >>> import sqlglot
    >>> depth_problem(sqlglot.parse_one("a + b * c", dialect="spark")) is None
    True
    >>> depth_problem(sqlglot.parse_one(" + ".join(["a"] * 150), dialect="spark"))
    'its parsed tree is 151 levels deep (at most 100): a chain of operators (a AND b AND ..., a + b + ..., x::int::int, x[0][0]) nests a level per link; use IN (...) or fewer terms'
    """
    deepest = 0
    pending = [(tree, 1)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_TREE_DEPTH * 10:
            break  # deep enough to refuse; no need to walk the rest
        pending.extend((child, depth + 1) for child in node.iter_expressions())
    if deepest > MAX_TREE_DEPTH:
        depth = f"more than {MAX_TREE_DEPTH * 10:,}" if deepest > MAX_TREE_DEPTH * 10 else str(deepest)
        return (f"its parsed tree is {depth} levels deep (at most {MAX_TREE_DEPTH}): a chain of operators (a AND b "
                "AND ..., a + b + ..., x::int::int, x[0][0]) nests a level per link; use IN (...) or fewer terms")
    return None
