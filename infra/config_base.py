"""What every configuration section shares: the error a bad key raises, the section base, a URL type."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class ConfigError(ValueError):
    """A bad configuration; the message is one line naming the problem."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _http_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL, e.g. http://gpu-box:8000/v1")
    return url


HttpURL = Annotated[str, AfterValidator(_http_url)]  # a server's URL, checked before any request
