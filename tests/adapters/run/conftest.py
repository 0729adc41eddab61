"""The Run's tests lose nodes onto a real S3 server too (``tests/_seaweed.py``)."""

from ..._seaweed import s3_url as s3_url
from ..._seaweed import seaweed as seaweed
from ..._seaweed import seaweed_bucket as seaweed_bucket

__all__ = ["s3_url", "seaweed", "seaweed_bucket"]
