"""Expression tree of the new-ClassAd language (the language gLite JDL is written in).

Every node carries the 1-based line and column of its first character. Nodes are immutable
after parsing; `_fn` caches the compiled evaluator (see jdl.evaluator.compile_expr).
unparse(node) / node.text() is the canonical text of a tree (re-exported by jdl.printer).
Source: HTCondor ClassAd language reference ("The ClassAd language", HTCondor manual, ch. 4.1)
and Solomon, "The ClassAd Language Reference Manual" v2.4 (the new-ClassAd grammar).
"""
from __future__ import annotations

import math
import re

from .values import ERROR, UNDEFINED


class Node:
    __slots__ = ("line", "column", "_fn")

    def __init__(self, line: int = 0, column: int = 0):
        self.line = line
        self.column = column
        self._fn = None

    def children(self) -> tuple["Node", ...]:
        return ()

    def __eq__(self, other):
        """Structural equality, positions ignored; iterative, so deep trees are fine."""
        stack = [(self, other)]
        while stack:
            a, b = stack.pop()
            if a is b:
                continue
            if type(a) is not type(b) or a._key() != b._key():
                return False
            ka, kb = a._operands(), b._operands()
            if len(ka) != len(kb):
                return False
            stack.extend(zip(ka, kb))
        return True

    def __hash__(self):
        h, stack = 0, [self]
        while stack:
            x = stack.pop()
            h = hash((h, type(x).__name__, x._key()))
            stack.extend(x._operands())
        return h

    def _key(self):
        """What this node adds to equality besides its operands."""
        return ()

    def _operands(self) -> tuple:
        return self.children()

    def text(self) -> str:
        """Canonical one-line text of this expression (unparse)."""
        return _un(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {_un(self)}>"


class Literal(Node):
    """int, float, str, bool, UNDEFINED or ERROR."""
    __slots__ = ("value",)

    def __init__(self, value, line=0, column=0):
        super().__init__(line, column)
        self.value = value

    def _key(self):
        return (type(self.value).__name__, self.value)


class AttrRef(Node):
    """An attribute reference `name`; absolute (`.name`) looks in the outermost ad."""
    __slots__ = ("name", "lname", "absolute")

    def __init__(self, name: str, absolute: bool = False, line=0, column=0):
        super().__init__(line, column)
        self.name = name
        self.lname = name.lower()
        self.absolute = absolute

    def _key(self):
        return (self.lname, self.absolute)


class Select(Node):
    """`base.name` (also `other.name`, `my.name`, `parent.name`, ...)."""
    __slots__ = ("base", "name", "lname")

    def __init__(self, base: Node, name: str, line=0, column=0):
        super().__init__(line, column)
        self.base = base
        self.name = name
        self.lname = name.lower()

    def children(self):
        return (self.base,)

    def _key(self):
        return self.lname


class Subscript(Node):
    """`base[index]` on a list (integer index) or a record (string attribute name)."""
    __slots__ = ("base", "index")

    def __init__(self, base: Node, index: Node, line=0, column=0):
        super().__init__(line, column)
        self.base = base
        self.index = index

    def children(self):
        return (self.base, self.index)



class Unary(Node):
    """`op operand` with op one of - + ! ~."""
    __slots__ = ("op", "operand")

    def __init__(self, op: str, operand: Node, line=0, column=0):
        super().__init__(line, column)
        self.op = op
        self.operand = operand

    def children(self):
        return (self.operand,)

    def _key(self):
        return self.op


class Binary(Node):
    """`left op right`; op is the canonical spelling (`is`/`isnt` lower case)."""
    __slots__ = ("op", "left", "right")

    def __init__(self, op: str, left: Node, right: Node, line=0, column=0):
        super().__init__(line, column)
        self.op = op
        self.left = left
        self.right = right

    def children(self):
        return (self.left, self.right)

    def _key(self):
        return self.op


class Conditional(Node):
    """`cond ? then : otherwise`; `then` None means the elvis form `cond ?: otherwise`."""
    __slots__ = ("cond", "then", "otherwise")

    def __init__(self, cond: Node, then: Node | None, otherwise: Node, line=0, column=0):
        super().__init__(line, column)
        self.cond = cond
        self.then = then
        self.otherwise = otherwise

    def children(self):
        return tuple(n for n in (self.cond, self.then, self.otherwise) if n is not None)

    def _key(self):
        return self.then is None


class Call(Node):
    """A built-in function call `name(args...)`; names are case-insensitive."""
    __slots__ = ("name", "lname", "args")

    def __init__(self, name: str, args: tuple[Node, ...], line=0, column=0):
        super().__init__(line, column)
        self.name = name
        self.lname = name.lower()
        self.args = tuple(args)

    def children(self):
        return self.args

    def _key(self):
        return (self.lname, len(self.args))


class ListExpr(Node):
    """`{e1, e2, ...}`."""
    __slots__ = ("items",)

    def __init__(self, items: tuple[Node, ...], line=0, column=0):
        super().__init__(line, column)
        self.items = tuple(items)

    def children(self):
        return self.items

    def _key(self):
        return len(self.items)


class AttrDef:
    """One `Name = expr` inside a record, with the position of the name."""
    __slots__ = ("name", "lname", "expr", "line", "column")

    def __init__(self, name: str, expr: Node, line: int = 0, column: int = 0):
        self.name = name
        self.lname = name.lower()
        self.expr = expr
        self.line = line
        self.column = column

    def __eq__(self, other):
        return isinstance(other, AttrDef) and (self.lname, self.expr) == (other.lname, other.expr)

    def __hash__(self):
        return hash((self.lname, self.expr))

    def __repr__(self):
        return f"AttrDef({self.name!r}, {self.expr!r})"


class RecordExpr(Node):
    """`[ a = 1; b = 2 ]`: definitions in source order; `attrs` maps lower-case name to the
    last definition (ClassAd semantics: a later definition replaces an earlier one)."""
    __slots__ = ("defs", "attrs")

    def __init__(self, defs: tuple[AttrDef, ...], line=0, column=0):
        super().__init__(line, column)
        self.defs = tuple(defs)
        self.attrs = {d.lname: d for d in self.defs}

    def children(self):
        return tuple(d.expr for d in self.defs)

    def _key(self):
        return tuple(sorted(self.attrs))

    def _operands(self):
        return tuple(self.attrs[k].expr for k in sorted(self.attrs))


# ---- canonical text (parse(unparse(x)) == x; jdl.printer prints values) --------------

# binding strength, higher binds tighter (jdl.grammar lists the same order)
_PREC = {"||": 2, "&&": 3, "|": 4, "^": 5, "&": 6,
         "==": 7, "!=": 7, "=?=": 7, "=!=": 7, "is": 7, "isnt": 7,
         "<": 8, "<=": 8, ">": 8, ">=": 8, "<<": 9, ">>": 9, ">>>": 9,
         "+": 10, "-": 10, "*": 11, "/": 11, "%": 11}
_COND, _UNARY, _ELVIS, _POSTFIX = 1, 12, 13, 14
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"true", "false", "undefined", "error", "is", "isnt"}
_STR_ESC = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b",
            "\f": "\\f"}


def quote(s: str) -> str:
    """A ClassAd string literal for s."""
    out = []
    for ch in s:
        e = _STR_ESC.get(ch)
        if e is not None:
            out.append(e)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("\\%03o" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def name_text(name: str) -> str:
    """An attribute name, quoted with '...' when it is not a plain identifier."""
    if _NAME_RE.match(name) and name.lower() not in _RESERVED:
        return name
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def real_text(x: float, exact: bool = True) -> str:
    """Text of a real: shortest exact form (exact=True, the canonical printer) or HTCondor's
    %.15E (exact=False, what string() and strcat() produce)."""
    if math.isnan(x):
        return "real(\"NaN\")"
    if math.isinf(x):
        return "real(\"INF\")" if x > 0 else "real(\"-INF\")"
    if x == 0 and math.copysign(1, x) < 0:
        return "-0.0"
    if x == 0:
        return "0.0"
    if exact:
        r = repr(x)
        return r if ("." in r or "e" in r) else r + ".0"
    return "%.15E" % x


def literal_text(v, exact: bool = True) -> str:
    if v is UNDEFINED:
        return "undefined"
    if v is ERROR:
        return "error"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return real_text(v, exact)
    if t is str:
        return quote(v)
    raise TypeError(f"not a literal: {v!r}")


def unparse(node: Node) -> str:
    """Canonical one-line text of an expression node."""
    return _un(node)


def _un(x: Node) -> str:
    t = type(x)
    if t is Literal:
        v = x.value
        if type(v) is int and v < 0:
            return str(v)
        return literal_text(v)
    if t is AttrRef:
        return ("." if x.absolute else "") + name_text(x.name)
    if t is Select:
        return _base(x.base) + "." + name_text(x.name)
    if t is Subscript:
        return _base(x.base) + "[" + _un(x.index) + "]"
    if t is Unary:
        return x.op + _wrap(x.operand, _UNARY)
    if t is Binary:  # left-nested chains are printed in a loop (no deep recursion)
        spine = []
        while type(x.left) is Binary and _PREC[x.left.op] >= _PREC[x.op]:
            spine.append(x)
            x = x.left
        p = _PREC[x.op]
        parts = [_wrap(x.left, p), f" {x.op} ", _wrap(x.right, p + 1)]
        for b in reversed(spine):
            parts += [f" {b.op} ", _wrap(b.right, _PREC[b.op] + 1)]
        return "".join(parts)
    if t is Conditional:
        if x.then is None:
            o = x.otherwise
            if (type(o) is Unary and o.op in "+-" and type(o.operand) is Literal
                    and type(o.operand.value) in (int, float)):
                rhs = _un(o)  # `a ?: -2` is accepted
            else:
                rhs = _wrap(o, _POSTFIX)
            return _wrap(x.cond, _ELVIS) + " ?: " + rhs
        return (_wrap(x.cond, _COND + 1) + " ? " + _wrap(x.then, _COND) + " : "
                + _wrap(x.otherwise, _COND))
    if t is Call:
        return x.name + "(" + ", ".join(_un(a) for a in x.args) + ")"
    if t is ListExpr:
        return "{ " + ", ".join(_un(i) for i in x.items) + " }" if x.items else "{ }"
    if t is RecordExpr:
        return record_text(x)
    raise TypeError(f"unknown node {x!r}")


def _strength(x: Node) -> int:
    t = type(x)
    if t is Binary:
        return _PREC[x.op]
    if t is Conditional:
        return _COND if x.then is not None else _ELVIS
    if t is Unary:
        return _UNARY
    if t is Literal and type(x.value) in (int, float) and _un(x).startswith("-"):
        return _UNARY
    return _POSTFIX + 1


def _base(x: Node) -> str:
    """The base of `.name` / `[i]`: `(0).a`, since `0.a` would lex as a real."""
    if type(x) is Literal and type(x.value) in (int, float):
        return "(" + _un(x) + ")"
    return _wrap(x, _POSTFIX)


def _wrap(x: Node, need: int) -> str:
    s = _un(x)
    return s if _strength(x) >= need else "(" + s + ")"


def record_text(rec: RecordExpr, indent: int | None = None) -> str:
    """`[ a = 1; b = 2 ]` on one line, or one attribute per line when indent is given."""
    items = [f"{name_text(d.name)} = {_un(d.expr)}" for d in rec.defs if rec.attrs[d.lname] is d]
    if indent is None:
        return "[ " + "; ".join(items) + " ]" if items else "[ ]"
    pad = " " * indent
    return "[\n" + "".join(f"{pad}{i};\n" for i in items) + "]"
