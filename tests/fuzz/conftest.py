"""Registers the fuzzers' hypothesis profiles before hypothesis' pytest plugin looks for the one
`--hypothesis-profile` names (this conftest loads first when pytest is given tests/fuzz or a file in it)."""
import tests.fuzz.profiles  # noqa: F401
