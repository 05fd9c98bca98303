from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Trace(_message.Message):
    __slots__ = ("packet",)
    PACKET_FIELD_NUMBER: _ClassVar[int]
    packet: _containers.RepeatedCompositeFieldContainer[TracePacket]
    def __init__(self, packet: _Optional[_Iterable[_Union[TracePacket, _Mapping]]] = ...) -> None: ...

class TracePacket(_message.Message):
    __slots__ = ("timestamp", "timestamp_clock_id", "trusted_packet_sequence_id", "interned_data", "sequence_flags", "first_packet_on_sequence", "previous_packet_dropped", "trace_packet_defaults", "track_event", "track_descriptor", "clock_snapshot", "compressed_packets", "ftrace_events", "process_tree", "system_info")
    class SequenceFlags(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SEQ_UNSPECIFIED: _ClassVar[TracePacket.SequenceFlags]
        SEQ_INCREMENTAL_STATE_CLEARED: _ClassVar[TracePacket.SequenceFlags]
        SEQ_NEEDS_INCREMENTAL_STATE: _ClassVar[TracePacket.SequenceFlags]
    SEQ_UNSPECIFIED: TracePacket.SequenceFlags
    SEQ_INCREMENTAL_STATE_CLEARED: TracePacket.SequenceFlags
    SEQ_NEEDS_INCREMENTAL_STATE: TracePacket.SequenceFlags
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_PACKET_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    INTERNED_DATA_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    FIRST_PACKET_ON_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_PACKET_DROPPED_FIELD_NUMBER: _ClassVar[int]
    TRACE_PACKET_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_FIELD_NUMBER: _ClassVar[int]
    TRACK_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_PACKETS_FIELD_NUMBER: _ClassVar[int]
    FTRACE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_TREE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INFO_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    timestamp_clock_id: int
    trusted_packet_sequence_id: int
    interned_data: InternedData
    sequence_flags: int
    first_packet_on_sequence: bool
    previous_packet_dropped: int
    trace_packet_defaults: TracePacketDefaults
    track_event: TrackEvent
    track_descriptor: TrackDescriptor
    clock_snapshot: ClockSnapshot
    compressed_packets: bytes
    ftrace_events: FtraceEventBundle
    process_tree: ProcessTree
    system_info: SystemInfo
    def __init__(self, timestamp: _Optional[int] = ..., timestamp_clock_id: _Optional[int] = ..., trusted_packet_sequence_id: _Optional[int] = ..., interned_data: _Optional[_Union[InternedData, _Mapping]] = ..., sequence_flags: _Optional[int] = ..., first_packet_on_sequence: _Optional[bool] = ..., previous_packet_dropped: _Optional[int] = ..., trace_packet_defaults: _Optional[_Union[TracePacketDefaults, _Mapping]] = ..., track_event: _Optional[_Union[TrackEvent, _Mapping]] = ..., track_descriptor: _Optional[_Union[TrackDescriptor, _Mapping]] = ..., clock_snapshot: _Optional[_Union[ClockSnapshot, _Mapping]] = ..., compressed_packets: _Optional[bytes] = ..., ftrace_events: _Optional[_Union[FtraceEventBundle, _Mapping]] = ..., process_tree: _Optional[_Union[ProcessTree, _Mapping]] = ..., system_info: _Optional[_Union[SystemInfo, _Mapping]] = ...) -> None: ...

class TracePacketDefaults(_message.Message):
    __slots__ = ("timestamp_clock_id", "track_event_defaults")
    TIMESTAMP_CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    timestamp_clock_id: int
    track_event_defaults: TrackEventDefaults
    def __init__(self, timestamp_clock_id: _Optional[int] = ..., track_event_defaults: _Optional[_Union[TrackEventDefaults, _Mapping]] = ...) -> None: ...

class TrackEventDefaults(_message.Message):
    __slots__ = ("track_uuid", "extra_counter_track_uuids")
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    track_uuid: int
    extra_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, track_uuid: _Optional[int] = ..., extra_counter_track_uuids: _Optional[_Iterable[int]] = ...) -> None: ...

class ClockSnapshot(_message.Message):
    __slots__ = ("clocks",)
    class Clock(_message.Message):
        __slots__ = ("clock_id", "timestamp", "is_incremental")
        class BuiltinClocks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            UNKNOWN: _ClassVar[ClockSnapshot.Clock.BuiltinClocks]
            BOOTTIME: _ClassVar[ClockSnapshot.Clock.BuiltinClocks]
        UNKNOWN: ClockSnapshot.Clock.BuiltinClocks
        BOOTTIME: ClockSnapshot.Clock.BuiltinClocks
        CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        IS_INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
        clock_id: int
        timestamp: int
        is_incremental: bool
        def __init__(self, clock_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., is_incremental: _Optional[bool] = ...) -> None: ...
    CLOCKS_FIELD_NUMBER: _ClassVar[int]
    clocks: _containers.RepeatedCompositeFieldContainer[ClockSnapshot.Clock]
    def __init__(self, clocks: _Optional[_Iterable[_Union[ClockSnapshot.Clock, _Mapping]]] = ...) -> None: ...

class TrackEvent(_message.Message):
    __slots__ = ("type", "track_uuid", "name_iid", "name", "debug_annotations", "flow_ids_old", "terminating_flow_ids_old", "flow_ids", "terminating_flow_ids", "counter_value", "double_counter_value", "extra_counter_track_uuids", "extra_counter_values")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_BEGIN: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_END: _ClassVar[TrackEvent.Type]
        TYPE_INSTANT: _ClassVar[TrackEvent.Type]
        TYPE_COUNTER: _ClassVar[TrackEvent.Type]
    TYPE_UNSPECIFIED: TrackEvent.Type
    TYPE_SLICE_BEGIN: TrackEvent.Type
    TYPE_SLICE_END: TrackEvent.Type
    TYPE_INSTANT: TrackEvent.Type
    TYPE_COUNTER: TrackEvent.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    FLOW_IDS_OLD_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FLOW_IDS_OLD_FIELD_NUMBER: _ClassVar[int]
    FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_VALUES_FIELD_NUMBER: _ClassVar[int]
    type: TrackEvent.Type
    track_uuid: int
    name_iid: int
    name: str
    debug_annotations: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    flow_ids_old: _containers.RepeatedScalarFieldContainer[int]
    terminating_flow_ids_old: _containers.RepeatedScalarFieldContainer[int]
    flow_ids: _containers.RepeatedScalarFieldContainer[int]
    terminating_flow_ids: _containers.RepeatedScalarFieldContainer[int]
    counter_value: int
    double_counter_value: float
    extra_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    extra_counter_values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[_Union[TrackEvent.Type, str]] = ..., track_uuid: _Optional[int] = ..., name_iid: _Optional[int] = ..., name: _Optional[str] = ..., debug_annotations: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ..., flow_ids_old: _Optional[_Iterable[int]] = ..., terminating_flow_ids_old: _Optional[_Iterable[int]] = ..., flow_ids: _Optional[_Iterable[int]] = ..., terminating_flow_ids: _Optional[_Iterable[int]] = ..., counter_value: _Optional[int] = ..., double_counter_value: _Optional[float] = ..., extra_counter_track_uuids: _Optional[_Iterable[int]] = ..., extra_counter_values: _Optional[_Iterable[int]] = ...) -> None: ...

class DebugAnnotation(_message.Message):
    __slots__ = ("name_iid", "name", "bool_value", "uint_value", "int_value", "double_value", "string_value", "string_value_iid")
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_IID_FIELD_NUMBER: _ClassVar[int]
    name_iid: int
    name: str
    bool_value: bool
    uint_value: int
    int_value: int
    double_value: float
    string_value: str
    string_value_iid: int
    def __init__(self, name_iid: _Optional[int] = ..., name: _Optional[str] = ..., bool_value: _Optional[bool] = ..., uint_value: _Optional[int] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., string_value_iid: _Optional[int] = ...) -> None: ...

class TrackDescriptor(_message.Message):
    __slots__ = ("uuid", "parent_uuid", "name", "description", "process", "thread", "counter")
    UUID_FIELD_NUMBER: _ClassVar[int]
    PARENT_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    uuid: int
    parent_uuid: int
    name: str
    description: str
    process: ProcessDescriptor
    thread: ThreadDescriptor
    counter: CounterDescriptor
    def __init__(self, uuid: _Optional[int] = ..., parent_uuid: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., process: _Optional[_Union[ProcessDescriptor, _Mapping]] = ..., thread: _Optional[_Union[ThreadDescriptor, _Mapping]] = ..., counter: _Optional[_Union[CounterDescriptor, _Mapping]] = ...) -> None: ...

class ProcessDescriptor(_message.Message):
    __slots__ = ("pid", "cmdline", "process_name")
    PID_FIELD_NUMBER: _ClassVar[int]
    CMDLINE_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    cmdline: _containers.RepeatedScalarFieldContainer[str]
    process_name: str
    def __init__(self, pid: _Optional[int] = ..., cmdline: _Optional[_Iterable[str]] = ..., process_name: _Optional[str] = ...) -> None: ...

class ThreadDescriptor(_message.Message):
    __slots__ = ("pid", "tid", "thread_name")
    PID_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    tid: int
    thread_name: str
    def __init__(self, pid: _Optional[int] = ..., tid: _Optional[int] = ..., thread_name: _Optional[str] = ...) -> None: ...

class CounterDescriptor(_message.Message):
    __slots__ = ("unit", "unit_name", "is_incremental")
    class Unit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNIT_UNSPECIFIED: _ClassVar[CounterDescriptor.Unit]
        UNIT_TIME_NS: _ClassVar[CounterDescriptor.Unit]
        UNIT_COUNT: _ClassVar[CounterDescriptor.Unit]
        UNIT_SIZE_BYTES: _ClassVar[CounterDescriptor.Unit]
    UNIT_UNSPECIFIED: CounterDescriptor.Unit
    UNIT_TIME_NS: CounterDescriptor.Unit
    UNIT_COUNT: CounterDescriptor.Unit
    UNIT_SIZE_BYTES: CounterDescriptor.Unit
    UNIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    unit: CounterDescriptor.Unit
    unit_name: str
    is_incremental: bool
    def __init__(self, unit: _Optional[_Union[CounterDescriptor.Unit, str]] = ..., unit_name: _Optional[str] = ..., is_incremental: _Optional[bool] = ...) -> None: ...

class InternedData(_message.Message):
    __slots__ = ("event_names", "debug_annotation_names", "debug_annotation_string_values")
    EVENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATION_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATION_STRING_VALUES_FIELD_NUMBER: _ClassVar[int]
    event_names: _containers.RepeatedCompositeFieldContainer[EventName]
    debug_annotation_names: _containers.RepeatedCompositeFieldContainer[DebugAnnotationName]
    debug_annotation_string_values: _containers.RepeatedCompositeFieldContainer[InternedString]
    def __init__(self, event_names: _Optional[_Iterable[_Union[EventName, _Mapping]]] = ..., debug_annotation_names: _Optional[_Iterable[_Union[DebugAnnotationName, _Mapping]]] = ..., debug_annotation_string_values: _Optional[_Iterable[_Union[InternedString, _Mapping]]] = ...) -> None: ...

class EventName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class DebugAnnotationName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class InternedString(_message.Message):
    __slots__ = ("iid", "str")
    IID_FIELD_NUMBER: _ClassVar[int]
    STR_FIELD_NUMBER: _ClassVar[int]
    iid: int
    str: bytes
    def __init__(self, iid: _Optional[int] = ..., str: _Optional[bytes] = ...) -> None: ...

class FtraceEventBundle(_message.Message):
    __slots__ = ("cpu", "compact_sched")
    class CompactSched(_message.Message):
        __slots__ = ("intern_table", "switch_timestamp", "switch_prev_state", "switch_next_pid", "switch_next_prio", "switch_next_comm_index", "waking_timestamp", "waking_pid", "waking_target_cpu", "waking_prio", "waking_comm_index", "waking_common_flags")
        INTERN_TABLE_FIELD_NUMBER: _ClassVar[int]
        SWITCH_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        SWITCH_PREV_STATE_FIELD_NUMBER: _ClassVar[int]
        SWITCH_NEXT_PID_FIELD_NUMBER: _ClassVar[int]
        SWITCH_NEXT_PRIO_FIELD_NUMBER: _ClassVar[int]
        SWITCH_NEXT_COMM_INDEX_FIELD_NUMBER: _ClassVar[int]
        WAKING_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        WAKING_PID_FIELD_NUMBER: _ClassVar[int]
        WAKING_TARGET_CPU_FIELD_NUMBER: _ClassVar[int]
        WAKING_PRIO_FIELD_NUMBER: _ClassVar[int]
        WAKING_COMM_INDEX_FIELD_NUMBER: _ClassVar[int]
        WAKING_COMMON_FLAGS_FIELD_NUMBER: _ClassVar[int]
        intern_table: _containers.RepeatedScalarFieldContainer[str]
        switch_timestamp: _containers.RepeatedScalarFieldContainer[int]
        switch_prev_state: _containers.RepeatedScalarFieldContainer[int]
        switch_next_pid: _containers.RepeatedScalarFieldContainer[int]
        switch_next_prio: _containers.RepeatedScalarFieldContainer[int]
        switch_next_comm_index: _containers.RepeatedScalarFieldContainer[int]
        waking_timestamp: _containers.RepeatedScalarFieldContainer[int]
        waking_pid: _containers.RepeatedScalarFieldContainer[int]
        waking_target_cpu: _containers.RepeatedScalarFieldContainer[int]
        waking_prio: _containers.RepeatedScalarFieldContainer[int]
        waking_comm_index: _containers.RepeatedScalarFieldContainer[int]
        waking_common_flags: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, intern_table: _Optional[_Iterable[str]] = ..., switch_timestamp: _Optional[_Iterable[int]] = ..., switch_prev_state: _Optional[_Iterable[int]] = ..., switch_next_pid: _Optional[_Iterable[int]] = ..., switch_next_prio: _Optional[_Iterable[int]] = ..., switch_next_comm_index: _Optional[_Iterable[int]] = ..., waking_timestamp: _Optional[_Iterable[int]] = ..., waking_pid: _Optional[_Iterable[int]] = ..., waking_target_cpu: _Optional[_Iterable[int]] = ..., waking_prio: _Optional[_Iterable[int]] = ..., waking_comm_index: _Optional[_Iterable[int]] = ..., waking_common_flags: _Optional[_Iterable[int]] = ...) -> None: ...
    CPU_FIELD_NUMBER: _ClassVar[int]
    COMPACT_SCHED_FIELD_NUMBER: _ClassVar[int]
    cpu: int
    compact_sched: FtraceEventBundle.CompactSched
    def __init__(self, cpu: _Optional[int] = ..., compact_sched: _Optional[_Union[FtraceEventBundle.CompactSched, _Mapping]] = ...) -> None: ...

class ProcessTree(_message.Message):
    __slots__ = ("processes", "threads")
    class Thread(_message.Message):
        __slots__ = ("tid", "tgid", "name")
        TID_FIELD_NUMBER: _ClassVar[int]
        TGID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        tid: int
        tgid: int
        name: str
        def __init__(self, tid: _Optional[int] = ..., tgid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...
    class Process(_message.Message):
        __slots__ = ("pid", "ppid", "cmdline")
        PID_FIELD_NUMBER: _ClassVar[int]
        PPID_FIELD_NUMBER: _ClassVar[int]
        CMDLINE_FIELD_NUMBER: _ClassVar[int]
        pid: int
        ppid: int
        cmdline: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, pid: _Optional[int] = ..., ppid: _Optional[int] = ..., cmdline: _Optional[_Iterable[str]] = ...) -> None: ...
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessTree.Process]
    threads: _containers.RepeatedCompositeFieldContainer[ProcessTree.Thread]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessTree.Process, _Mapping]]] = ..., threads: _Optional[_Iterable[_Union[ProcessTree.Thread, _Mapping]]] = ...) -> None: ...

class SystemInfo(_message.Message):
    __slots__ = ("utsname",)
    UTSNAME_FIELD_NUMBER: _ClassVar[int]
    utsname: Utsname
    def __init__(self, utsname: _Optional[_Union[Utsname, _Mapping]] = ...) -> None: ...

class Utsname(_message.Message):
    __slots__ = ("sysname", "version", "release", "machine")
    SYSNAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    sysname: str
    version: str
    release: str
    machine: str
    def __init__(self, sysname: _Optional[str] = ..., version: _Optional[str] = ..., release: _Optional[str] = ..., machine: _Optional[str] = ...) -> None: ...
