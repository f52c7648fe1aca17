"""The lark LALR(1) grammar of the new-ClassAd language with the gLite JDL surface.

A JDL file is a record `[ a = e; ... ]` or, as the gLite UI accepts, the bare attribute list
without the brackets. Comments: `//` to end of line, `/* ... */`, and `#` lines.
Operator precedence, lowest first (HTCondor ClassAd reference, "Operators"):
  ?: (and the elvis ?:)  ||  &&  |  ^  &  (== != =?= =!= is isnt)  (< <= > >=)
  (<< >> >>>)  (+ -)  (* / %)  unary (- + ! ~)  postfix ([i] .name)  primary
"""
from __future__ import annotations

import functools

from lark import Lark

GRAMMAR = r"""
start: "[" body "]"      -> bracketed
     | body              -> bare

body: _sep* (attr_def (_sep+ attr_def)* _sep*)?
_sep: ";"
attr_def: attr_name "=" expr
?attr_name: NAME | QNAME

?expr: or_expr
     | or_expr "?" expr ":" expr    -> ternary
     | or_expr ELVIS expr           -> elvis
?or_expr: and_expr | or_expr _OROR and_expr       -> or_op
?and_expr: bor_expr | and_expr _ANDAND bor_expr   -> and_op
?bor_expr: bxor_expr | bor_expr BOR bxor_expr    -> binop
?bxor_expr: band_expr | bxor_expr BXOR band_expr -> binop
?band_expr: eq_expr | band_expr BAND eq_expr     -> binop
?eq_expr: rel_expr | eq_expr EQOP rel_expr       -> binop
?rel_expr: shift_expr | rel_expr RELOP shift_expr -> binop
?shift_expr: add_expr | shift_expr SHIFTOP add_expr -> binop
?add_expr: mul_expr | add_expr ADDOP mul_expr    -> binop
?mul_expr: unary | mul_expr MULOP unary          -> binop
?unary: postfix | ADDOP unary -> unop | NOTOP unary -> unop
?postfix: primary
        | postfix LSQB expr "]"              -> subscript
        | postfix DOT attr_name              -> select
?primary: INT                 -> int_lit
        | REAL                -> real_lit
        | STRING              -> string_lit
        | TRUE                -> true_lit
        | FALSE               -> false_lit
        | UNDEFINED           -> undefined_lit
        | ERROR               -> error_lit
        | attr_name           -> attr_ref
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
_OROR: "||"
_ANDAND: "&&"
DOT: "."
LSQB: "["
LPAR: "("
RPAR: ")"
LBRACE: "{"
RBRACE: "}"
NAME: /[A-Za-z_][A-Za-z0-9_]*/
QNAME: /'(?:[^'\\\n]|\\.)*'/
REAL: /(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
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
    "SHIFTOP": "'<<'", "BOR": "'|'", "BXOR": "'^'", "BAND": "'&'", "_OROR": "'||'",
    "_ANDAND": "'&&'", "ELVIS": "'?:'", "$END": "end of input",
}
