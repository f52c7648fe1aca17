"""The lark LALR(1) grammar of the new-ClassAd language with the gLite JDL surface.

A JDL file is a record `[ a = e; ... ]` or, as the gLite UI accepts, the bare attribute list
without the brackets. Comments: `//` to end of line, `/* ... */`, and `#` lines.
Operator precedence, lowest first (HTCondor ClassAd reference, "Operators"):
  ?: (and the elvis ?:)  ||  &&  |  ^  &  (== != =?= =!= is isnt)  (< <= > >=)
  (<< >> >>>)  (+ -)  (* / %)  unary (- + ! ~)  postfix ([i] .name)  primary
unescape() gives a STRING / QNAME token its value (both jdl.parser and jdl.fastparse use it).
"""
from __future__ import annotations

import functools
import re

from lark import Lark

GRAMMAR = r"""
start: "[" body "]"      -> bracketed
     | body              -> bare

body: _sep* (attr_def (_sep+ attr_def)* _sep*)?
_sep: ";"
attr_def: attr_name "=" expr
?attr_name: NAME | QNAME

?expr: binary
     | binary "?" expr ":" expr      -> ternary
// Binary operators are parsed as a flat operand/operator sequence and grouped by
// precedence in jdl.parser (precedence climbing): far fewer LALR reductions per token.
?binary: unary
       | unary (_binop unary)+       -> flat
_binop: OROR | ANDAND | BOR | BXOR | BAND | EQOP | RELOP | SHIFTOP | ADDOP | MULOP
?unary: postfix | ADDOP unary -> unop | NOTOP unary -> unop
?postfix: selectable
        | postfix ELVIS selectable           -> elvis
        | postfix ELVIS ADDOP number         -> elvis_neg
?selectable: primary
        | selectable LSQB expr "]"           -> subscript
        | selectable DOT attr_name           -> select
?number: INT -> int_lit
       | REAL -> real_lit
?primary: INT                 -> int_lit
        | REAL                -> real_lit
        | STRING              -> string_lit
        | TRUE                -> true_lit
        | FALSE               -> false_lit
        | UNDEFINED           -> undefined_lit
        | ERROR               -> error_lit
        | NAME                -> attr_ref
        | QNAME               -> attr_ref
        | DOT attr_name       -> abs_ref
        | NAME LPAR args RPAR -> call
        | LPAR expr RPAR      -> paren
        | LBRACE items RBRACE -> list_expr
        | LSQB body "]"       -> record
args: (expr ("," expr)*)?
items: (expr ("," expr)*)?

TRUE.2: /true\b/i
FALSE.2: /false\b/i
UNDEFINED.2: /undefined\b/i
ERROR.2: /error\b/i
EQOP.2: "==" | "!=" | "=?=" | "=!=" | /is\b/i | /isnt\b/i
RELOP: "<=" | ">=" | "<" | ">"
SHIFTOP: ">>>" | ">>" | "<<"
ADDOP: "+" | "-"
MULOP: "*" | "/" | "%"
NOTOP: "!" | "~"
BOR: /\|(?!\|)/
BXOR: "^"
BAND: /&(?!&)/
ELVIS: "?:"
OROR: "||"
ANDAND: "&&"
DOT: "."
LSQB: "["
LPAR: "("
RPAR: ")"
LBRACE: "{"
RBRACE: "}"
NAME: /[A-Za-z_][A-Za-z0-9_]*/
QNAME: /'(?:[^'\\\n]|\\.)*'/
REAL: /(?:[0-9]+\.[0-9]+|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
INT: /[0-9]+/
STRING: /"(?:[^"\\]|\\.)*"/s

LINE_COMMENT: /\/\/[^\n]*/
BLOCK_COMMENT: /\/\*(?:[^*]|\*(?!\/))*\*\//
HASH_COMMENT: /#[^\n]*/
WS: /[ \t\r\n\f]+/
%ignore WS
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
%ignore HASH_COMMENT
"""


@functools.lru_cache(maxsize=None)
def lark_parser(transformer=None, start: str = "start") -> Lark:
    """The LALR parser; with `transformer` the tree is never built (faster)."""
    return Lark(GRAMMAR, parser="lalr", lexer="contextual", start=start,
                transformer=transformer, maybe_placeholders=False,
                propagate_positions=False)


TERMINAL_TEXT = {
    "SEMICOLON": "';'", "EQUAL": "'='", "RSQB": "']'", "LSQB": "'['", "COMMA": "','",
    "RPAR": "')'", "LPAR": "'('", "RBRACE": "'}'", "LBRACE": "'{'", "COLON": "':'",
    "QMARK": "'?'", "DOT": "'.'", "NAME": "an attribute name", "QNAME": "a quoted name",
    "INT": "an integer", "REAL": "a real number", "STRING": "a string", "TRUE": "true",
    "FALSE": "false", "UNDEFINED": "undefined", "ERROR": "error", "ADDOP": "'+' or '-'",
    "NOTOP": "'!' or '~'", "MULOP": "'*', '/' or '%'", "EQOP": "'=='", "RELOP": "'<'",
    "SHIFTOP": "'<<'", "BOR": "'|'", "BXOR": "'^'", "BAND": "'&'", "OROR": "'||'",
    "ANDAND": "'&&'", "ELVIS": "'?:'", "$END": "end of input",
}

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", '"': '"',
            "'": "'", "/": "/", "a": "\a", "v": "\v", "?": "?"}
_ESC_RE = re.compile(r"\\(?:([0-7]{1,3})|(.))", re.S)


def unescape(body: str) -> str:
    """Decode the backslash escapes of a STRING or QNAME body (the quotes removed): `\\n`,
    `\\t`, ..., octal `\\ooo` (low 8 bits); an unknown escape stands for its character."""
    if "\\" not in body:
        return body

    def repl(m):
        if m.group(1):
            return chr(int(m.group(1), 8) & 0xFF)
        return _ESCAPES.get(m.group(2), m.group(2))
    return _ESC_RE.sub(repl, body)
