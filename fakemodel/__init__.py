"""Local fakes of Anthropic's Messages API (`fakemodel.server`) and OpenAI's Chat
Completions API (`fakemodel.openai_server`)."""

from fakemodel.openai_server import FakeChatServer
from fakemodel.server import FakeModelServer

__all__ = ["FakeChatServer", "FakeModelServer"]
