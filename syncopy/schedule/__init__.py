"""Chunk schedules: the pydantic model, loading with located errors, chunk geometry, the full form."""
from syncopy.schedule.chunks import chunk_bounds, chunk_of_row
from syncopy.schedule.expand import expand, to_yaml
from syncopy.schedule.load import from_dict, json_schema, load_schedule, loads
from syncopy.schedule.model import IMPLEMENTED_PATTERNS, Binding, Schedule, Transfer

__all__ = ["Schedule", "Binding", "Transfer", "load_schedule", "loads", "from_dict", "json_schema", "chunk_bounds", "chunk_of_row",
           "expand", "to_yaml", "IMPLEMENTED_PATTERNS"]
