"""EPUB 2 files written by hand, zip member by member, so that a test can
make what no EPUB tool would: a spine that repeats a document, an empty
NCX ``navMap``, an XHTML document with an internal DTD subset."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf"
 media-type="application/oebps-package+xml"/></rootfiles></container>"""


def page(body: str, title: str = "A page") -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head>'
        f"<title>{title}</title></head><body>{body}</body></html>"
    )


def raw_epub(
    documents: dict[str, str],
    spine: Sequence[str],
    toc: Sequence[tuple[str, str]] | None,
    title: str = "A Raw Book",
) -> bytes:
    """``documents``: file name → XHTML; ``spine``: file names in reading
    order (repeats allowed); ``toc``: (title, href) entries of the NCX, or
    None for an empty ``navMap``."""
    ids = {name: f"d{number}" for number, name in enumerate(documents)}
    manifest = "".join(
        f'<item id="{ids[name]}" href="{name}" media-type="application/xhtml+xml"/>'
        for name in documents
    )
    itemrefs = "".join(f'<itemref idref="{ids[name]}"/>' for name in spine)
    opf = (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<package xmlns="http://www.idpf.org/2007/opf" version="2.0"'
        ' unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">raw-1</dc:identifier><dc:title>{title}</dc:title>'
        "<dc:language>en</dc:language></metadata>"
        f'<manifest><item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
        f"{manifest}</manifest>"
        f'<spine toc="ncx">{itemrefs}</spine></package>'
    )
    points = "".join(
        f'<navPoint id="n{number}" playOrder="{number + 1}"><navLabel><text>{label}'
        f'</text></navLabel><content src="{href}"/></navPoint>'
        for number, (label, href) in enumerate(toc or [])
    )
    ncx = (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
        '<head><meta name="dtb:uid" content="raw-1"/></head>'
        f"<docTitle><text>{title}</text></docTitle>"
        f"<navMap>{points}</navMap></ncx>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", CONTAINER)
        archive.writestr("OEBPS/content.opf", opf)
        archive.writestr("OEBPS/toc.ncx", ncx)
        for name, text in documents.items():
            archive.writestr(f"OEBPS/{name}", text)
    return out.getvalue()
