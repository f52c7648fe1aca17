"""Errors raised by the jdl package, each naming file:line:column.

JDLSyntaxError: the text is not a ClassAd / gLite JDL (gLite JDL Attributes Specification,
Section 2 "Request description language"); JDLValidationError: it parses but breaks the
attribute rules (types, mandatory attributes, references). Both derive from JDLError.
"""
from __future__ import annotations

from dataclasses import dataclass


class JDLError(Exception):
    """Base class of every error the jdl package raises for bad user input."""


def source_line(text: str | None, line: int) -> str | None:
    """The 1-based `line` of `text` without its newline, or None when not available."""
    if not text or line < 1:
        return None
    lines = text.split("\n")
    if line > len(lines):
        return None
    return lines[line - 1].rstrip("\r")


def caret_excerpt(text: str | None, line: int, column: int) -> str:
    """Two lines: the offending source line (tabs kept) and a caret under `column` (1-based)."""
    src = source_line(text, line)
    if src is None:
        return ""
    if len(src) > 200:  # keep messages readable for minified / 1 MB one-line inputs
        start = max(0, column - 100)
        src, column = src[start:start + 200], column - start
    pad = "".join("\t" if ch == "\t" else " " for ch in src[: max(column - 1, 0)])
    return f"{src}\n{pad}^"


@dataclass(frozen=True)
class Problem:
    """One problem found in a JDL: where (1-based line and column) and what."""

    filename: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}: {self.message}"

    def to_json(self) -> dict:
        return {"line": self.line, "column": self.column, "message": self.message}


class JDLSyntaxError(JDLError):
    """The text does not parse. `str()` is `file:line:col: message`, the source line, a caret."""

    def __init__(self, message: str, filename: str = "<string>", line: int = 1, column: int = 1,
                 text: str | None = None):
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        self.text = text
        super().__init__(message)

    @property
    def problem(self) -> Problem:
        return Problem(self.filename, self.line, self.column, self.message)

    @property
    def problems(self) -> list[Problem]:
        return [self.problem]

    def __str__(self) -> str:
        head = f"{self.filename}:{self.line}:{self.column}: {self.message}"
        excerpt = caret_excerpt(self.text, self.line, self.column)
        return f"{head}\n{excerpt}" if excerpt else head


class JDLValidationError(JDLError):
    """The JDL parses but breaks attribute rules; `.problems` lists every one (list[Problem])."""

    def __init__(self, problems: list[Problem], text: str | None = None):
        self.problems = list(problems)
        self.text = text
        first = self.problems[0] if self.problems else None
        self.filename = first.filename if first else "<string>"
        self.line = first.line if first else 1
        self.column = first.column if first else 1
        self.message = first.message if first else "invalid JDL"
        super().__init__(self.message)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)
