"""What every ``vgrid`` command shares: printing an error for a person, and exit codes.

Exit codes: 0 ok; 1 the thing checked is wrong or a service failed; 2 usage or input error.
"""
from __future__ import annotations

import functools

from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


def fail(message: str, code: int) -> None:
    """Print ``vgrid: message`` on stderr (no markup interpretation) and exit with ``code``."""
    err_console.print(f"[bold red]vgrid:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    raise SystemExit(code)


def exit_on(*handlers: tuple[type[BaseException] | tuple[type[BaseException], ...], int]):
    """Decorator: an exception of a listed type becomes ``fail(str(exc), code)``.

    ``handlers`` are ``(exception type(s), exit code)`` pairs, tried in order. Exceptions whose
    ``str()`` is already a located multi-line message (``jdl.JDLError``) are printed as they are.
    """
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised unless listed
                for types, code in handlers:
                    if isinstance(exc, types):
                        if _is_located(exc):
                            err_console.print(str(exc), highlight=False, markup=False)
                            raise SystemExit(code) from None
                        fail(str(exc), code)
                raise
        return wrapper
    return decorate


def _is_located(exc: BaseException) -> bool:
    return exc.__class__.__module__.startswith("jdl")
