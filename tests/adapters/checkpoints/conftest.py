"""The SeaweedFS server of ``tests/_seaweed.py`` for the checkpoint
protocol's object-store tests."""

from __future__ import annotations

from ..._seaweed import s3_url as s3_url
from ..._seaweed import seaweed as seaweed
from ..._seaweed import seaweed_bucket as seaweed_bucket
