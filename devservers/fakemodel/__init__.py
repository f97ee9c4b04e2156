"""Local fakes of Anthropic's Messages API (`devservers.fakemodel.server`) and OpenAI's Chat
Completions API (`devservers.fakemodel.openai_server`)."""

from devservers.fakemodel.openai_server import FakeChatServer
from devservers.fakemodel.server import FakeModelServer

__all__ = ["FakeChatServer", "FakeModelServer"]
