"""The EVOLVE block: the one region of a program that evolution may change."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.infra.failure_reasons import FROZEN, NO_EDIT

START_MARKER = "EVOLVE-BLOCK-START"
END_MARKER = "EVOLVE-BLOCK-END"


class EditError(ValueError):
    """A proposed edit that cannot be used; the message is the error recorded on the node, and
    `reason` its bucket (one of infra/failure_reasons.py: NO_EDIT unless the raiser says)."""

    def __init__(self, message: str, reason: str = NO_EDIT) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Split:
    """A program cut into the frozen head, the evolvable block, and the frozen tail.

    ``head`` ends with the START marker line and ``tail`` begins with the END marker line, so
    ``head + block + tail`` is the original program.
    """

    head: str
    block: str
    tail: str

    def join(self, block: str | None = None) -> str:
        body = self.block if block is None else block
        if body and not body.endswith("\n"):
            body += "\n"
        return self.head + body + self.tail


def split_program(code: str) -> Split:
    """Split ``code`` at its markers; a program without both markers is evolvable as a whole."""
    lines = code.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if START_MARKER in line]
    ends = [i for i, line in enumerate(lines) if END_MARKER in line]
    if not starts and not ends:
        return Split(head="", block=code, tail="")
    if len(starts) != 1 or len(ends) != 1:
        raise EditError(
            f"expected one {START_MARKER} and one {END_MARKER} marker, "
            f"found {len(starts)} and {len(ends)}"
        )
    s, e = starts[0], ends[0]
    if e < s:
        raise EditError(f"{END_MARKER} comes before {START_MARKER}")
    return Split(head="".join(lines[: s + 1]), block="".join(lines[s + 1 : e]), tail="".join(lines[e:]))


def has_markers(code: str) -> bool:
    """True when the program carries both EVOLVE markers."""
    return START_MARKER in code and END_MARKER in code


def check_within_block(old_code: str, new_code: str) -> None:
    """Raise EditError when ``new_code`` changes anything outside the EVOLVE block of ``old_code``."""
    old = split_program(old_code)
    try:
        new = split_program(new_code)
    except EditError as exc:
        raise EditError(f"edit broke the EVOLVE markers: {exc}", FROZEN) from None
    if old.head.strip() != new.head.strip():
        raise EditError("edit outside the EVOLVE block (the code before EVOLVE-BLOCK-START changed)", FROZEN)
    if old.tail.strip() != new.tail.strip():
        raise EditError("edit outside the EVOLVE block (the code after EVOLVE-BLOCK-END changed)", FROZEN)
