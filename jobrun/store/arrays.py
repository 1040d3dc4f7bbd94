"""One-dimensional arrays sent to PostgreSQL in its binary array format, encoded in one pass.

The completer sends a batch of outcomes as twelve column arrays. For a plain list psycopg
works out an element type at every call (it scans the list for an element that is not None,
and an int's size picks int2, int4 or int8): for a batch of one that cost more than the
encoding itself. These lists say their element type, so each element is one struct call.

    cur.execute("SELECT $1::bigint[]", [Int8s([1, 2])])  # any connection: dumpers are global

The format is PostgreSQL's array_send: the number of dimensions, a has-nulls flag, the
element type's oid, then the length and lower bound (1) of the dimension, then each element
as its byte length (-1 for NULL) and its binary value; an empty array has no dimension.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

_HEADER = struct.Struct(">iiiii")  # dimensions, has nulls, element oid, length, lower bound
_EMPTY = struct.Struct(">iii")
_NULL = struct.pack(">i", -1)
_INT8 = struct.Struct(">iq").pack
_INT4 = struct.Struct(">ii").pack
_FLOAT8 = struct.Struct(">id").pack
_LENGTH = struct.Struct(">i").pack


def _text(value: str, codec: str) -> bytes:
    data = value.encode(codec)
    return _LENGTH(len(data)) + data


class _Array(list):
    """A list of one element type: ``oid`` is the array type's, ``element`` the element
    type's, ``item`` writes one element (its length and value)."""

    oid = 0
    element = 0
    item: Callable[[Any, str], bytes]

    def to_binary(self, codec: str = "utf-8") -> bytes:
        if not self:
            return _EMPTY.pack(0, 0, self.element)
        item = type(self).item
        nulls = 0
        parts = []
        for value in self:
            if value is None:
                nulls = 1
                parts.append(_NULL)
            else:
                parts.append(item(value, codec))
        return _HEADER.pack(1, nulls, self.element, len(self), 1) + b"".join(parts)


class Int8s(_Array):
    oid, element = 1016, 20
    item = staticmethod(lambda value, codec: _INT8(8, value))


class Int4s(_Array):
    oid, element = 1007, 23
    item = staticmethod(lambda value, codec: _INT4(4, value))


class Float8s(_Array):
    oid, element = 1022, 701
    item = staticmethod(lambda value, codec: _FLOAT8(8, value))


class Texts(_Array):
    oid, element = 1009, 25
    item = staticmethod(_text)


def _dumper(cls: type[_Array]) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = cls.oid

        def __init__(self, kind: type, context: Any = None) -> None:
            super().__init__(kind, context)
            conn = self.connection
            # Text goes in the connection's encoding, as psycopg's own text dumper sends it.
            self._codec = conn.info.encoding if conn is not None else "utf-8"

        def dump(self, obj: _Array) -> bytes:
            try:
                return obj.to_binary(self._codec)
            except (struct.error, TypeError) as exc:  # a value not of the element type
                raise psycopg.DataError(f"{cls.__name__}: {exc}") from None

    ArrayDumper.__name__ = cls.__name__ + "Dumper"
    return ArrayDumper


for _cls in (Int8s, Int4s, Float8s, Texts):
    psycopg.adapters.register_dumper(_cls, _dumper(_cls))
