"""Makes the fake API server fixtures available to the tests of the fake itself."""

from tests.fakeapi.fixtures import fake_api_server, fake_controllers, kube_api

__all__ = ["fake_api_server", "fake_controllers", "kube_api"]
