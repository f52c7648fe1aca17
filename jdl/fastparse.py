"""A fast recursive-descent parser for the language of jdl.grammar (same trees, ~4x faster).

jdl.grammar (lark, LALR) is the normative grammar and produces every syntax error message;
this module is the fast path for the texts it accepts: parse_classad tries it first and falls
back to lark when it gives up (FastParseError), so messages stay lark's and any text this
parser cannot handle is still parsed by lark. tests/test_jdl_properties.py checks that both
build equal trees. Nesting deeper than MAX_DEPTH (brackets, unary operators, right operands)
is refused here so that no later tree walk can exhaust the Python stack.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from functools import partial
from itertools import repeat
from operator import sub

from . import nodes as n
from .grammar import unescape
from .values import ERROR, UNDEFINED, wrap64

MAX_DEPTH = 400

_TOKEN = re.compile(r"""[ \t\r\n\f]*(?:
 (?P<comment>//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/|\#[^\n]*)
|(?P<real>(?:[0-9]+\.[0-9]+|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
|(?P<int>[0-9]+)
|(?P<string>"(?:[^"\\]|\\.)*")
|(?P<qname>'(?:[^'\\\n]|\\.)*')
|(?P<kw>(?i:true|false|undefined|error|isnt|is)(?![A-Za-z0-9_]))
|(?P<name>[A-Za-z_][A-Za-z0-9_]*)
|(?P<op>=\?=|=!=|==|!=|<=|>=|>>>|>>|<<|\|\||&&|\?:|[-+*/%<>!~^&|?:;,.=()\[\]{}])
|(?P<bad>.)
|(?P<end>\Z))""", re.X | re.S)
_NEWLINE = re.compile("\n")

_KEYWORDS = {"true": ("lit", True), "false": ("lit", False), "undefined": ("lit", UNDEFINED),
             "error": ("lit", ERROR), "is": ("op", "is"), "isnt": ("op", "isnt")}
#: Words that are literals or operators in ClassAd expressions, so not unquoted attribute names
#: (HTCondor ClassAd language reference, "Reserved words"): the ``kw`` token above, and what
#: the lark parser refuses as an attribute name (``jdl.parser``).
RESERVED_WORDS = frozenset(_KEYWORDS)
PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5,
        "==": 6, "!=": 6, "=?=": 6, "=!=": 6, "is": 6, "isnt": 6,
        "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, ">>>": 8,
        "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
_PREFIX = {"-", "+", "!", "~"}
_MAX_INT = (1 << 63)


class FastParseError(Exception):
    """This parser gives up; lark decides (and words the error). `depth` marks a nesting
    limit error, which is final."""

    def __init__(self, message: str = "", line: int = 0, column: int = 0, depth: bool = False):
        super().__init__(message)
        self.message, self.line, self.column, self.depth = message, line, column, depth


def tokenize(text: str):
    """Lists (kinds, values, lines, columns); kinds: lit int real string qname name op end."""
    kinds, values, starts = [], [], []
    kinds_append, values_append, starts_append = kinds.append, values.append, starts.append
    for m in _TOKEN.finditer(text):
        kind = group = m.lastgroup
        if kind == "comment":
            continue
        if kind == "kw":
            kind, s = _KEYWORDS[m.group(kind).lower()]
        elif kind == "string":
            body = m.group(kind)[1:-1]
            s = unescape(body) if "\\" in body else body
        elif kind == "bad":
            raise FastParseError()
        else:
            s = m.group(kind)
        kinds_append(kind)
        values_append(s)
        starts_append(m.start(group))
        if kind == "end":
            break
    if not kinds or kinds[-1] != "end":
        raise FastParseError()
    if "\n" in text:
        nls = [-1] + [m.start() for m in _NEWLINE.finditer(text)]
        idx = list(map(partial(bisect_right, nls), starts))
        lines = idx
        cols = list(map(sub, starts, map(nls.__getitem__, map(sub, idx, repeat(1)))))
    else:
        lines = [1] * len(starts)
        cols = [x + 1 for x in starts]
    return kinds, values, lines, cols


class _Parser:
    __slots__ = ("k", "v", "ln", "cl", "i", "depth")

    def __init__(self, text: str):
        self.k, self.v, self.ln, self.cl = tokenize(text)
        self.i = 0
        self.depth = 0

    def fail(self):
        raise FastParseError()

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            i = self.i
            raise FastParseError(f"expression nested deeper than {MAX_DEPTH} levels",
                                 self.ln[i], self.cl[i], depth=True)

    def expect(self, op: str):
        i = self.i
        if self.k[i] != "op" or self.v[i] != op:
            self.fail()
        self.i = i + 1

    # ---- records -------------------------------------------------------------------------
    def file(self) -> tuple:
        k, v = self.k, self.v
        if k[0] == "op" and v[0] == "[":
            self.i = 1
            defs = self.body("]")
            self.expect("]")
        else:
            defs = self.body(None)
        if k[self.i] != "end":
            self.fail()
        return defs

    def body(self, close):
        k, v = self.k, self.v
        defs = []
        while k[self.i] == "op" and v[self.i] == ";":
            self.i += 1
        while True:
            i = self.i
            kind = k[i]
            if kind == "end" or (kind == "op" and v[i] == close):
                return tuple(defs)
            if kind == "name":
                name = v[i]
            elif kind == "qname":
                name = unescape(v[i][1:-1])
            else:
                self.fail()
            self.i = i + 1
            self.expect("=")
            defs.append(n.AttrDef(name, self.expr(), self.ln[i], self.cl[i]))
            j = self.i
            if k[j] == "op" and v[j] == ";":
                while k[self.i] == "op" and v[self.i] == ";":
                    self.i += 1
            elif not (k[j] == "end" or (k[j] == "op" and v[j] == close)):
                self.fail()

    # ---- expressions ---------------------------------------------------------------------
    def expr(self):
        cond = self.binary()
        i = self.i
        if self.k[i] == "op" and self.v[i] == "?":
            self.i += 1
            self.enter()
            then = self.expr()
            self.expect(":")
            other = self.expr()
            self.depth -= 1
            return n.Conditional(cond, then, other, cond.line, cond.column)
        return cond

    def binary(self):
        k, v = self.k, self.v
        first = self.unary()
        i = self.i
        if k[i] != "op" or v[i] not in PREC:
            return first
        operands, ops = [first], []
        while k[self.i] == "op" and v[self.i] in PREC:
            op = v[self.i]
            self.i += 1
            p = PREC[op]
            while ops and PREC[ops[-1]] >= p:
                right = operands.pop()
                left = operands.pop()
                operands.append(n.Binary(ops.pop(), left, right, left.line, left.column))
            ops.append(op)
            operands.append(self.unary())
        while ops:
            right = operands.pop()
            left = operands.pop()
            operands.append(n.Binary(ops.pop(), left, right, left.line, left.column))
        return operands[0]

    def unary(self):
        k, v = self.k, self.v
        prefixes = []
        while k[self.i] == "op" and v[self.i] in _PREFIX:
            prefixes.append(self.i)
            self.i += 1
            self.enter()
        node = self.postfix()
        for i in reversed(prefixes):
            node = n.Unary(v[i], node, self.ln[i], self.cl[i])
        self.depth -= len(prefixes)
        return node

    def postfix(self):
        k, v = self.k, self.v
        node = self.selectable()
        depth0 = self.depth
        while k[self.i] == "op" and v[self.i] == "?:":
            self.i += 1
            self.enter()
            i = self.i
            if k[i] == "op" and v[i] in ("-", "+") and k[i + 1] in ("int", "real"):
                self.i += 1
                rhs = n.Unary(v[i], self.primary(), self.ln[i], self.cl[i])
            else:
                rhs = self.selectable()
            node = n.Conditional(node, None, rhs, node.line, node.column)
        self.depth = depth0
        return node

    def selectable(self):
        k, v = self.k, self.v
        node = self.primary()
        depth0 = self.depth
        while k[self.i] == "op":
            op = v[self.i]
            if op == "[":
                self.i += 1
                self.enter()
                index = self.expr()
                self.expect("]")
                node = n.Subscript(node, index, node.line, node.column)
            elif op == ".":
                self.i += 1
                self.enter()
                node = n.Select(node, self.name(), node.line, node.column)
            else:
                break
        self.depth = depth0
        return node

    def name(self) -> str:
        i = self.i
        kind = self.k[i]
        if kind == "name":
            self.i = i + 1
            return self.v[i]
        if kind == "qname":
            self.i = i + 1
            return unescape(self.v[i][1:-1])
        self.fail()

    def primary(self):
        i = self.i
        kind, val, line, col = self.k[i], self.v[i], self.ln[i], self.cl[i]
        self.i = i + 1
        if kind == "name":
            if self.k[i + 1] == "op" and self.v[i + 1] == "(":
                self.i = i + 2
                return n.Call(val, self.sequence(")"), line, col)
            return n.AttrRef(val, False, line, col)
        if kind == "string" or kind == "lit":
            return n.Literal(val, line, col)
        if kind == "int":
            iv = int(val)
            if iv > _MAX_INT:
                self.fail()
            return n.Literal(wrap64(iv), line, col)
        if kind == "real":
            return n.Literal(float(val), line, col)
        if kind == "qname":
            self.i = i
            return n.AttrRef(self.name(), False, line, col)
        if kind == "op":
            if val == "(":
                self.enter()
                e = self.expr()
                self.depth -= 1
                self.expect(")")
                return e
            if val == "{":
                return n.ListExpr(self.sequence("}"), line, col)
            if val == "[":
                self.enter()
                defs = self.body("]")
                self.depth -= 1
                self.expect("]")
                return n.RecordExpr(defs, line, col)
            if val == ".":
                return n.AttrRef(self.name(), True, line, col)
        self.fail()

    def sequence(self, close: str) -> tuple:
        """`e1, e2, ...` up to `close` (consumed); empty allowed."""
        k, v = self.k, self.v
        self.enter()
        items = []
        if k[self.i] == "op" and v[self.i] == close:
            self.i += 1
        else:
            while True:
                items.append(self.expr())
                j = self.i
                if k[j] == "op" and v[j] == ",":
                    self.i = j + 1
                    continue
                if k[j] == "op" and v[j] == close:
                    self.i = j + 1
                    break
                self.fail()
        self.depth -= 1
        return tuple(items)


def parse_defs(text: str) -> tuple:
    """Attribute definitions of a JDL / ClassAd text; FastParseError when not handled."""
    return _Parser(text).file()
