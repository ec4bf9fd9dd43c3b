"""What the kinds that copy data share: the upload downloaded to scratch, a file published whole.

The source is read-only: it is downloaded to local scratch space (Lambda's /tmp, a Fargate
task's disk) and never written.
"""

from __future__ import annotations

from pathlib import Path

from layoutlab.errors import BadInputFile
from layoutlab.storage import S3Location

# Publishing a paged HDF5 variant: parts of 64 MiB, 8 in flight. s3transfer opens each part
# of the file when it sends it rather than loading parts into memory (1 GiB published this way
# to a local moto server raised the uploader's peak RSS by 24 MiB), and raises the part size
# by itself when a file would need more than S3's 10,000 parts (above 625 GiB here).
PUBLISH_PART_BYTES = 64 * 2**20
PUBLISH_THREADS = 8

# Leave room for the interpreter and libraries under the platform's memory limit.
RECHUNK_MEMORY_SHARE = 0.5


def download(s3, source: dict, directory: str) -> Path:
    path = Path(directory) / (Path(source["key"]).name or "source")
    extra = {"VersionId": source["version_id"]} if source.get("version_id") else None
    try:
        s3.download_file(source["bucket"], source["key"], str(path), ExtraArgs=extra)
    except Exception as error:  # botocore raises several types here; name the object either way
        raise BadInputFile(f"s3://{source['bucket']}/{source['key']}", f"cannot be downloaded: {error}") from None
    return path


def publish(s3, path: Path, target: S3Location) -> None:
    """Upload ``path`` straight to its final key; readers see all of it or nothing.

    boto3's managed transfer: a multipart upload above ``PUBLISH_PART_BYTES`` (S3 makes
    the object visible only at CompleteMultipartUpload), aborted by s3transfer when any
    part fails; S3UploadFailedError then reaches the caller (the state machine's retry).
    A process killed mid-upload cannot abort: the outputs bucket's lifecycle rule
    (AbortIncompleteMultipartUpload, cdk data stack) removes its parts. The classic
    transfer client, always: boto3 may pick the CRT one where awscrt is installed, and
    the abort-on-failure tested here is the classic client's.
    """
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(multipart_threshold=PUBLISH_PART_BYTES, multipart_chunksize=PUBLISH_PART_BYTES,
                            max_concurrency=PUBLISH_THREADS, preferred_transfer_client="classic")
    s3.upload_file(str(path), target.bucket, target.key, Config=config)


def memory_bound(memory_mb: int | None) -> int | None:
    """The bytes a rechunk may hold on a platform of ``memory_mb`` (None: not known)."""
    return int(memory_mb * 2**20 * RECHUNK_MEMORY_SHARE) if memory_mb else None
