"""A certificate's subject as Kafka names a TLS client: the RFC 2253 string of Java's
`X500Principal.getName()`, which `ssl.principal.mapping.rules=DEFAULT` keeps as it is.

RFC 2253 writes the relative distinguished names last-first (a subject encoded C, O, OU, CN
reads `CN=...,OU=...,O=...,C=...`), the attributes of one name joined by `+`. The keywords are
Java's (CN, C, L, ST, O, OU, STREET, DC, UID); any other attribute (emailAddress, serialNumber,
...) is written `OID=#` and the hex of its value's DER encoding. In a string value, `, + " \\ < >
;` are escaped with a backslash, as are a leading `#` or space and a trailing space.

The subject is read from the certificate's DER encoding (Certificate, TBSCertificate, its sixth
or, with an explicit version, seventh element), so no parser beyond this module is needed.
"""

from __future__ import annotations

from typing import Final

_KEYWORDS: Final = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_STRINGS: Final = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x16: "ascii",  # IA5String
    0x14: "latin-1",  # TeletexString, as Java reads it
    0x1E: "utf-16-be",  # BMPString
    0x1C: "utf-32-be",  # UniversalString
}
_SEQUENCE: Final = 0x30
_SET: Final = 0x31
_OID: Final = 0x06
_EXPLICIT_VERSION: Final = 0xA0


class _Der:
    """One TLV of a DER encoding."""

    __slots__ = ("content", "end", "start", "tag")

    def __init__(self, data: bytes, offset: int) -> None:
        self.start = offset
        self.tag = data[offset]
        length = data[offset + 1]
        offset += 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[offset : offset + count], "big")
            offset += count
        self.content = (offset, offset + length)
        self.end = offset + length
        if self.end > len(data):
            raise ValueError("truncated DER")


def _children(data: bytes, element: _Der) -> list[_Der]:
    found = []
    offset, end = element.content
    while offset < end:
        child = _Der(data, offset)
        found.append(child)
        offset = child.end
    return found


def subject_dn(certificate: bytes) -> str:
    """The RFC 2253 distinguished name of a DER certificate's subject."""
    tbs = _children(certificate, _Der(certificate, 0))[0]
    fields = _children(certificate, tbs)
    if fields[0].tag == _EXPLICIT_VERSION:
        fields = fields[1:]
    subject = fields[4]  # serial, signature, issuer, validity, subject
    rdns = []
    for rdn in _children(certificate, subject):
        if rdn.tag != _SET:
            raise ValueError("malformed subject")
        attributes = []
        for attribute in _children(certificate, rdn):
            oid, value = _children(certificate, attribute)[:2]
            attributes.append(_attribute(certificate, oid, value))
        rdns.append("+".join(attributes))
    return ",".join(reversed(rdns))


def _attribute(data: bytes, oid: _Der, value: _Der) -> str:
    if oid.tag != _OID:
        raise ValueError("malformed attribute")
    dotted = _oid_text(data[oid.content[0] : oid.content[1]])
    keyword = _KEYWORDS.get(dotted)
    encoding = _STRINGS.get(value.tag)
    if keyword is None or encoding is None:
        return f"{dotted}=#{data[value.start : value.end].hex()}"
    return f"{keyword}={_escape(data[value.content[0] : value.content[1]].decode(encoding))}"


def _oid_text(raw: bytes) -> str:
    first = raw[0]
    parts = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    number = 0
    for byte in raw[1:]:
        number = (number << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(number)
            number = 0
    return ".".join(str(p) for p in parts)


def _escape(value: str) -> str:
    escaped = "".join(f"\\{c}" if c in ',+"\\<>;' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
