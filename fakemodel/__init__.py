"""A local fake of Anthropic's Messages API (see `fakemodel.server`)."""

from fakemodel.server import FakeModelServer

__all__ = ["FakeModelServer"]
