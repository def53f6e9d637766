"""A bag's message types, read topic by topic, so that one topic's unusable definition leaves
the others readable.

rosbags' AnyReader types a ROS 2 bag from every topic's recorded definition at once: a single
topic whose definition does not parse, names a nested type it does not carry, or hashes to
another value than the one recorded stops the whole bag from opening (a KeyError traceback or
a hash-mismatch error), though a vehicle logger's bag holds dozens of topics nobody replays.
`TolerantBagReader` types each topic on its own: such a topic is left unread, with the reason
in `unreadable`; the bag's definitions of the other topics are kept, and a topic recorded
without a definition takes the default store's (ROS 2 Jazzy) where it has one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rosbags.highlevel import AnyReader, AnyReaderError
from rosbags.interfaces import Connection, MessageDefinitionFormat, Nodetype
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

IDL_SEPARATOR = "=" * 80 + "\n"


@dataclass
class TopicTypes:
    store: Typestore
    unreadable: dict[str, str]  # topic -> why it is not read


def definition_types(connection: Connection) -> dict:
    """The types (rosbags parse trees by name) that the connection's recorded definition
    carries; empty when it was recorded without one."""
    msgdef = connection.msgdef
    if msgdef.format == MessageDefinitionFormat.MSG:
        return dict(get_types_from_msg(msgdef.data, connection.msgtype))
    if msgdef.format != MessageDefinitionFormat.IDL:
        return {}
    if not msgdef.data.startswith(f"{IDL_SEPARATOR}IDL: "):
        return dict(get_types_from_idl(msgdef.data))
    types = {}
    for part in msgdef.data.split(IDL_SEPARATOR)[1:]:
        _, idl = part.split("\n", 1)
        types.update(get_types_from_idl(idl))
    return types


def type_closure(types: dict, msgtype: str) -> tuple[dict, list[str]]:
    """The definitions in `types` that `msgtype` needs, itself included, and the names of
    those it needs that `types` does not define."""
    needed, missing, todo = {}, [], [msgtype]
    while todo:
        name = todo.pop()
        if name in needed or name in missing:
            continue
        if name not in types:
            missing.append(name)
            continue
        needed[name] = types[name]
        for _, desc in types[name][1]:
            kind, detail = desc
            if kind in (Nodetype.ARRAY, Nodetype.SEQUENCE):
                kind, detail = detail[0]
            if kind == Nodetype.NAME:
                todo.append(detail)
    return needed, sorted(missing)


def definition_problem(connection: Connection, types: dict, default: Typestore) -> str | None:
    """Why the connection's recorded definition (`types`, completed from `default`) cannot
    type its messages, or None: a nested type nobody defines, or a hash other than the
    recorded one."""
    needed, missing = type_closure({**default.fielddefs, **types}, connection.msgtype)
    if missing:
        return (f"{connection.msgtype} needs types that neither the bag nor ROS 2 Jazzy "
                f"define: {', '.join(missing)}")
    digest = connection.digest
    if not (types and digest and digest.startswith("RIHS01_")):
        return None
    store = get_typestore(Stores.EMPTY)
    store.register(needed)
    if store.hash_rihs01(connection.msgtype) != digest:
        return (f"its recorded definition of {connection.msgtype} does not match its recorded "
                f"type hash {digest[:15]}...")
    return None


def topic_types(connections: list[Connection], default: Typestore) -> TopicTypes:
    """A store of the types of every topic it can type, and why the others are left unread.
    Where two topics define a type differently, the first keeps it and the other is left
    unread."""
    defined: dict = {}
    unreadable: dict[str, str] = {}
    for conn in connections:
        try:
            types = definition_types(conn)
        except Exception as exc:  # rosbags' parsers raise several kinds on malformed text
            unreadable[conn.topic] = (f"its recorded definition of {conn.msgtype} does not "
                                      f"parse ({type(exc).__name__})")
            continue
        problem = definition_problem(conn, types, default)
        clash = sorted(name for name, tree in types.items()
                       if defined.get(name, tree) != tree)
        if problem is None and clash:
            problem = f"another topic of the bag defines {', '.join(clash)} differently"
        if problem is not None:
            unreadable[conn.topic] = problem
            continue
        defined.update(types)
    store = get_typestore(Stores.EMPTY)
    store.register({**default.fielddefs, **defined})
    return TopicTypes(store, unreadable)


class TolerantBagReader(AnyReader):
    """AnyReader over ROS 2 bags whose topics are typed one by one (`topic_types`);
    `unreadable` names the topics left unread and why."""

    unreadable: dict[str, str]

    def _open(self) -> None:
        if not self.is2:
            raise AnyReaderError(f"{self.paths}: a ROS 1 bag; rosbag2 (mcap, sqlite3) only")
        for reader in self.readers:
            self.stack.enter_context(reader)
        self.connections = [conn for reader in self.readers for conn in reader.connections]
        types = topic_types(self.connections,
                            self.default_typestore or get_typestore(Stores.ROS2_JAZZY))
        self.typestore = types.store
        self.unreadable = types.unreadable
