"""Text -> expression trees: parse_classad (a record / JDL body) and parse_expr.

Uses the LALR grammar of jdl.grammar with an inline transformer (no parse tree is built).
Every lark error becomes a JDLSyntaxError naming file:line:column, with messages such as
"expected ';' after attribute value, found 'Myproxyserver'".
"""
from __future__ import annotations

import re

from lark import Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from . import nodes as n
from .errors import JDLSyntaxError
from .fastparse import MAX_DEPTH, RESERVED_WORDS, FastParseError, parse_defs
from .grammar import TERMINAL_TEXT, lark_parser, unescape
from .values import ERROR, UNDEFINED, wrap64


MAX_INT = (1 << 63) - 1
MAX_TEXT = 512 * 1024  # characters; longer JDL is refused (WMProxy also limits request size)


class _SyntaxProblem(Exception):
    def __init__(self, message: str, token):
        self.message, self.token = message, token


def _name(tok) -> str:
    s = str(tok)
    return unescape(s[1:-1]) if s.startswith("'") else s


class _Builder(Transformer):
    """Inline LALR callbacks building jdl.nodes."""

    def bracketed(self, c):
        return c[0]

    def bare(self, c):
        return c[0]

    def body(self, c):
        return tuple(c)

    def attr_def(self, c):
        name = c[0]
        if str(name).lower() in RESERVED_WORDS:     # HTCondor ClassAds: quote a reserved name
            raise _SyntaxProblem(f"{name} is a reserved word; write '{name}' to use it as an "
                                 "attribute name", name)
        return n.AttrDef(_name(name), c[1], name.line, name.column)

    def record(self, c):
        lsqb = c[0]
        return n.RecordExpr(c[1], lsqb.line, lsqb.column)

    def int_lit(self, c):
        t = c[0]
        v = int(t)
        if v > MAX_INT + 1:
            raise _SyntaxProblem(f"integer literal {t} does not fit in 64 bits", t)
        return n.Literal(wrap64(v), t.line, t.column)

    def real_lit(self, c):
        t = c[0]
        return n.Literal(float(t), t.line, t.column)

    def string_lit(self, c):
        t = c[0]
        return n.Literal(unescape(str(t)[1:-1]), t.line, t.column)

    def true_lit(self, c):
        return n.Literal(True, c[0].line, c[0].column)

    def false_lit(self, c):
        return n.Literal(False, c[0].line, c[0].column)

    def undefined_lit(self, c):
        return n.Literal(UNDEFINED, c[0].line, c[0].column)

    def error_lit(self, c):
        return n.Literal(ERROR, c[0].line, c[0].column)

    def attr_ref(self, c):
        t = c[0]
        return n.AttrRef(_name(t), False, t.line, t.column)

    def abs_ref(self, c):
        return n.AttrRef(_name(c[1]), True, c[0].line, c[0].column)

    def call(self, c):
        t = c[0]
        return n.Call(str(t), c[2], t.line, t.column)

    def args(self, c):
        return tuple(c)

    items = args

    def paren(self, c):
        return c[1]

    def list_expr(self, c):
        return n.ListExpr(c[1], c[0].line, c[0].column)

    def subscript(self, c):
        return n.Subscript(c[0], c[2], c[0].line, c[0].column)

    def select(self, c):
        return n.Select(c[0], _name(c[2]), c[0].line, c[0].column)

    def unop(self, c):
        op = c[0]
        return n.Unary(str(op), c[1], op.line, op.column)

    def binop(self, c):
        op = str(c[1])
        low = op.lower()
        return n.Binary(low if low in ("is", "isnt") else op, c[0], c[2], c[0].line, c[0].column)

    def flat(self, c):
        """Group `operand (op operand)+` by precedence (all binary operators are left-assoc)."""
        operands, ops = [c[0]], []
        for i in range(1, len(c), 2):
            op = str(c[i])
            low = op.lower()
            if low in ("is", "isnt"):
                op = low
            p = _PREC[op]
            while ops and _PREC[ops[-1]] >= p:
                right = operands.pop()
                left = operands.pop()
                operands.append(n.Binary(ops.pop(), left, right, left.line, left.column))
            ops.append(op)
            operands.append(c[i + 1])
        while ops:
            right = operands.pop()
            left = operands.pop()
            operands.append(n.Binary(ops.pop(), left, right, left.line, left.column))
        return operands[0]

    def ternary(self, c):
        return n.Conditional(c[0], c[1], c[2], c[0].line, c[0].column)

    def elvis(self, c):
        return n.Conditional(c[0], None, c[2], c[0].line, c[0].column)

    def elvis_neg(self, c):
        op = c[2]
        rhs = n.Unary(str(op), c[3], op.line, op.column)
        return n.Conditional(c[0], None, rhs, c[0].line, c[0].column)


_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5,
         "==": 6, "!=": 6, "=?=": 6, "=!=": 6, "is": 6, "isnt": 6,
         "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, ">>>": 8,
         "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
_BUILDER = _Builder()
_OPEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*|#[^\n]*|[\[({]|[\])}]', re.S)


def _check_depth(text: str, filename: str):
    """Reject nesting deeper than MAX_DEPTH before parsing (clear error, no recursion)."""
    if text.count("[") + text.count("(") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for m in _OPEN.finditer(text):
        ch = m.group()
        if ch in "[({":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                raise JDLSyntaxError(f"nesting deeper than {MAX_DEPTH} levels", filename,
                                     line, col, text)
        elif ch in "])}":
            depth = max(depth - 1, 0)


def parse_classad(text: str, filename: str = "<string>") -> n.RecordExpr:
    """Parse a ClassAd / gLite JDL (with or without the outer [ ]) into a RecordExpr.

    Raises JDLSyntaxError (file:line:column) on any syntax error.
    """
    if len(text) > MAX_TEXT:
        raise JDLSyntaxError(f"JDL is {len(text):,} characters, more than the {MAX_TEXT:,} "
                             "allowed", filename, 1, 1, text)
    _check_depth(text, filename)
    try:
        return n.RecordExpr(parse_defs(text), 1, 1)
    except FastParseError as e:
        if e.depth:
            raise JDLSyntaxError(e.message, filename, e.line, e.column, text) from None
    except RecursionError:
        raise JDLSyntaxError("expression nested too deeply", filename, 1, 1, text) from None
    return _parse_with_lark(text, filename)


def _parse_with_lark(text: str, filename: str) -> n.RecordExpr:
    """The normative LALR parse: used when the fast parser gives up, and for error messages."""
    try:
        defs = lark_parser(_BUILDER).parse(text)
    except _SyntaxProblem as e:
        raise JDLSyntaxError(e.message, filename, e.token.line, e.token.column, text) from None
    except VisitError as e:
        inner = e.orig_exc
        if isinstance(inner, _SyntaxProblem):
            raise JDLSyntaxError(inner.message, filename, inner.token.line, inner.token.column,
                                 text) from None
        raise
    except UnexpectedInput as e:
        raise _syntax_error(e, text, filename) from None
    return n.RecordExpr(defs, 1, 1)


def parse_expr(text: str, filename: str = "<expr>") -> n.Node:
    """Parse one ClassAd expression (e.g. a Requirements value) into a node."""
    rec = parse_classad(f"__e__ = {text}\n", filename) if text.strip() else None
    if rec is None or len(rec.defs) != 1:
        raise JDLSyntaxError("expected one expression", filename, 1, 1, text)
    return _shift(rec.defs[0].expr)


def _shift(node: n.Node) -> n.Node:
    """Positions in parse_expr refer to the expression text (remove the `__e__ = ` prefix)."""
    stack = [node]
    while stack:
        x = stack.pop()
        if x.line == 1:
            x.column -= 8
        stack.extend(x.children())
        if isinstance(x, n.RecordExpr):
            for d in x.defs:
                if d.line == 1:
                    d.column -= 8
    return node


def _describe(tok) -> str:
    if tok is None or tok.type == "$END":
        return "end of input"
    s = str(tok)
    if len(s) > 40:
        s = s[:37] + "..."
    return repr(s) if "'" not in s else f'"{s}"'


_EXPR_START = {"INT", "REAL", "STRING", "NAME", "TRUE", "FALSE", "LPAR", "LBRACE"}


def _syntax_error(e: UnexpectedInput, text: str, filename: str) -> JDLSyntaxError:
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream
        ch = text[pos] if pos < len(text) else ""
        line, col = e.line, e.column
        if ch == '"':
            msg = "unterminated string"
        elif ch == "'":
            msg = "unterminated quoted attribute name"
        elif text.startswith("/*", pos) or (ch == "*" and pos > 0 and text[pos - 1] == "/"):
            msg = "unterminated comment"
            if ch == "*":
                col -= 1
        else:
            msg = f"unexpected character {ch!r}"
        return JDLSyntaxError(msg, filename, line, col, text)
    tok = getattr(e, "token", None)
    expected = _accepted(e)
    if isinstance(e, UnexpectedEOF) or tok is None or tok.type == "$END":
        line, col = _end_position(text)
        found = "end of input"
    else:
        line, col = tok.line, tok.column
        found = _describe(tok)
        start = tok.start_pos or 0
        if str(tok) == "*" and start > 0 and text[start - 1] == "/":
            return JDLSyntaxError("unterminated comment", filename, line, col - 1, text)
    if ("SEMICOLON" in expected and ("RSQB" in expected or "$END" in expected)
            and "MULOP" in expected):  # a complete value could continue or end here
        msg = f"expected ';' after attribute value, found {found}"
    elif "NAME" in expected and "SEMICOLON" in expected:
        msg = f"expected an attribute definition, found {found}"
    elif expected == {"EQUAL"}:
        msg = f"expected '=' after attribute name, found {found}"
    elif expected and expected <= {"NAME", "QNAME"}:
        msg = f"expected an attribute name, found {found}"
    elif expected & _EXPR_START:
        msg = f"expected an expression, found {found}"
    elif "COMMA" in expected and "RBRACE" in expected:
        msg = f"expected ',' or '}}' in list, found {found}"
    elif "COMMA" in expected and "RPAR" in expected:
        msg = f"expected ',' or ')' in argument list, found {found}"
    elif "SEMICOLON" in expected:
        msg = f"expected ';' or ']', found {found}"
    else:
        names = sorted(TERMINAL_TEXT.get(x, x) for x in expected)
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        msg = f"expected {shown}, found {found}" if names else f"unexpected {found}"
    return JDLSyntaxError(msg, filename, line, col, text)


def _accepted(e: UnexpectedInput) -> set[str]:
    """Terminals the parser could really take at the error (LALR 'expected' over-approximates)."""
    expected = set(getattr(e, "expected", ()) or ())
    ip = getattr(e, "interactive_parser", None)
    if ip is not None:
        try:
            expected = set(ip.accepts())
        except Exception:  # noqa: BLE001 - best effort; fall back to lark's set
            pass
    return expected


def _end_position(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    col = len(stripped) - (stripped.rfind("\n") + 1) + 1
    return line, max(col, 1)
