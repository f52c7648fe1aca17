"""Expression tree of the new-ClassAd language (the language gLite JDL is written in).

Every node carries the 1-based line and column of its first character. Nodes are immutable
after parsing; `_fn` caches the compiled evaluator (see jdl.evaluator.compile_expr).
Source: HTCondor ClassAd language reference ("The ClassAd language", HTCondor manual, ch. 4.1)
and Solomon, "The ClassAd Language Reference Manual" v2.4 (the new-ClassAd grammar).
"""
from __future__ import annotations


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

    def __repr__(self) -> str:
        from .printer import unparse  # local: printer imports nodes
        return f"<{type(self).__name__} {unparse(self)}>"


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
