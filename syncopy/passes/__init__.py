"""Passes over one kernel, in order: signature -> consumer wait (all_gather) or producer notify
(reduce_scatter, all_reduce) -> tile reorder (+ probe kernel); `transform` (pipeline.py) runs them.

The package itself imports nothing: the runtime reads constants from `names` and a kernel loaded
with `syncopy.load` runs where the frontend's libcst is not installed; `transform` and `Transformed`
import the pipeline (and libcst) when first asked for."""


def __getattr__(name):
    if name == "transform":
        from syncopy.passes import pipeline

        return pipeline.transform
    if name == "Transformed":
        from syncopy.passes import transformed

        return transformed.Transformed
    raise AttributeError(f"module 'syncopy.passes' has no attribute {name!r}")


__all__ = ["transform", "Transformed", "names"]
