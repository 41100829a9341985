"""Import Ray Serve once with its own pydantic deprecation warnings silenced.

The project turns ``PydanticDeprecatedSince20`` into an error to keep its own models current;
Ray Serve's models still use deprecated ``Field`` arguments when their module is first
imported. Importing it here, before any test module, keeps that strictness for project code.
"""

import warnings

from pydantic.warnings import PydanticDeprecatedSince20

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=PydanticDeprecatedSince20, module=r"ray(\.|$)")
    import ray.serve  # noqa: F401
