"""Chunk schedules: the pydantic model, loading with located errors, chunk geometry."""
from syncopy.schedule.chunks import chunk_bounds, chunk_of_row
from syncopy.schedule.load import from_dict, json_schema, load_schedule, loads
from syncopy.schedule.model import IMPLEMENTED_PATTERNS, Binding, Schedule

__all__ = ["Schedule", "Binding", "load_schedule", "loads", "from_dict", "json_schema", "chunk_bounds", "chunk_of_row", "IMPLEMENTED_PATTERNS"]
