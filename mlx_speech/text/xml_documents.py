"""XML that users send or name (pronunciation lexicons), parsed with a real
XML parser and no document type: a ``<!DOCTYPE`` is refused before any of
it is used, so no entity is ever declared, expanded or fetched (no
"billion laughs", no external entities)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from xml.parsers import expat


class XmlError(ValueError):
    """Not XML we read, with where (``line``, ``column``: 1-based) when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        where = "" if line is None else f" (line {line}, column {column})"
        super().__init__(f"{message}{where}")
        self.line, self.column = line, column


def parse(text: str, max_depth: int | None = None) -> ElementTree.Element:
    """The root element of ``text`` (tags as ``{namespace}name``);
    ``XmlError`` naming the line and column where it is not well-formed, has
    a document type, or nests elements deeper than ``max_depth``."""
    parser = expat.ParserCreate(namespace_separator="}")
    builder = ElementTree.TreeBuilder()
    depth = 0

    def where() -> tuple[int, int]:
        return parser.CurrentLineNumber, parser.CurrentColumnNumber + 1

    def refuse_doctype(*_) -> None:
        raise XmlError(
            "a document type (<!DOCTYPE ...>) is not accepted: entities are never read",
            *where(),
        )

    def start(tag: str, attributes: dict) -> None:
        nonlocal depth
        depth += 1
        if max_depth is not None and depth > max_depth:
            raise XmlError(f"elements are nested more than {max_depth} deep", *where())
        builder.start(_clark(tag), {_clark(k): v for k, v in attributes.items()})

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1
        builder.end(_clark(tag))

    parser.StartDoctypeDeclHandler = refuse_doctype
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(text, True)
    except expat.ExpatError as error:
        reason = expat.ErrorString(error.code)
        raise XmlError(
            f"not well-formed XML: {reason}", error.lineno, error.offset + 1
        ) from None
    return builder.close()


def _clark(name: str) -> str:
    """expat's ``namespace}name`` as ElementTree's ``{namespace}name``."""
    return "{" + name if "}" in name else name


def local_name(name: str) -> str:
    """A tag or attribute name without its ``{namespace}``."""
    return name.rpartition("}")[2]
