"""A Hypothesis example database shared between hosts: ``FAKESHARD_DATABASE=URL``.

``redis://host:port/db`` (or ``rediss://``, ``unix://``) is Hypothesis's own
``RedisExampleDatabase`` (extra ``redis``): every host of a campaign saves
the failing examples it finds there, and replays the others' before it
generates new ones, while each host keeps its own seed.  Any other value is
a folder (``DirectoryBasedExampleDatabase``), for hosts sharing a file
system.  A derandomized profile (``ci``) uses no database, so a URL under it
is refused rather than ignored.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

__all__ = ["ENV_VAR", "DatabaseError", "KEY_PREFIX", "example_database", "from_environment"]

#: The environment variable that names the shared database.
ENV_VAR = "FAKESHARD_DATABASE"
#: Every key this project writes in Redis starts with this.
KEY_PREFIX = b"fakeshard-example:"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class DatabaseError(ValueError):
    """A database URL that cannot be used, with the reason in one line."""


def is_redis(url: str) -> bool:
    return url.startswith(_REDIS_SCHEMES)


@functools.lru_cache(maxsize=8)
def example_database(url: str, *, check: bool = False) -> ExampleDatabase:
    """The database ``url`` names; with ``check``, a Redis server must answer a ping."""
    if not url:
        raise DatabaseError("the database URL is empty")
    if not is_redis(url):
        return DirectoryBasedExampleDatabase(url)
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError as exc:
        raise DatabaseError(f"{url}: a Redis database needs the extra 'redis' "
                            f"(pip install 'fakeshard[redis]'): {exc}") from None
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        if check:
            client.ping()
    except (ValueError, redis.RedisError) as exc:
        raise DatabaseError(f"cannot use the Redis database {url}: {exc}") from None
    return RedisExampleDatabase(client, key_prefix=KEY_PREFIX)


def from_environment(derandomized: bool) -> Any:
    """The database ``$FAKESHARD_DATABASE`` names, or ``None`` where it is unset."""
    url = os.environ.get(ENV_VAR, "")
    if not url:
        return None
    if derandomized:
        raise DatabaseError(f"{ENV_VAR} is set, but the loaded profile is derandomized (ci) and uses no "
                            "database; share examples under --profile thorough or dev, a seed per host")
    return example_database(url)
