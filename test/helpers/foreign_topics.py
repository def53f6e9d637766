"""Topics a vehicle logger records beside the drive, with message definitions of their own:
one usable, three that no reader can type (a nested type not carried, a definition that does
not match its recorded hash, one that does not parse)."""

from rosbags.typesys import Stores, get_types_from_msg, get_typestore

STATUS_DEF = "int32 level\nstring text\n"
STATUS_STORE = get_typestore(Stores.EMPTY)
STATUS_STORE.register(get_types_from_msg(STATUS_DEF, "custom_msgs/msg/Status"))
STATUS = STATUS_STORE.types["custom_msgs/msg/Status"](level=7, text="ok")
BYTES = b"\x00\x01\x00\x00" + bytes(8)
FOREIGN = (
    ("/vehicle/status", "custom_msgs/msg/Status", STATUS_DEF,
     STATUS_STORE.hash_rihs01("custom_msgs/msg/Status"),
     bytes(STATUS_STORE.serialize_cdr(STATUS, "custom_msgs/msg/Status"))),
    ("/perception/objects", "custom_msgs/msg/Objects", "custom_msgs/Object[] objects\n",
     "RIHS01_" + "1" * 64, BYTES),
    ("/planning/stale", "custom_msgs/msg/Stale", "int32 a\n", "RIHS01_" + "ab" * 32, BYTES),
    ("/system/garbled", "custom_msgs/msg/Garbled", "int32[ a b c\n", "RIHS01_" + "2" * 64,
     BYTES),
)
UNREADABLE = {
    "/perception/objects": "custom_msgs/msg/Objects needs types that neither the bag nor "
                           "ROS 2 Jazzy define: custom_msgs/msg/Object",
    "/planning/stale": "its recorded definition of custom_msgs/msg/Stale does not match its "
                       "recorded type hash RIHS01_abababab...",
    "/system/garbled": "its recorded definition of custom_msgs/msg/Garbled does not parse "
                       "(TypesysError)",
}
