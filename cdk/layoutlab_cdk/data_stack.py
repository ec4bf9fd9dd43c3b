"""layoutlab-<env>-data: where uploads, outputs and results live."""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .nag import acknowledge
from .config import OUTPUT_PREFIXES, EnvConfig

# Results table (single-table design; the contract is in stepfunctions/README.md).
RESULTS_PK = "pk"  # DATASET#<dataset_id>
RESULTS_SK = "sk"  # RUN | VARIANT#<variant> | RESULT#<case_id> | SUMMARY | FAILURE#<stage>#<id>
PATTERN_INDEX = "by-pattern"
PATTERN_INDEX_PK = "pattern_pk"  # PATTERN#<pattern>  (RESULT items only: a sparse index)
PATTERN_INDEX_SK = "pattern_sk"  # <variant>#<reader>#<platform>#<dataset_id>#<repetition>
# Powertools idempotency defaults (DynamoDBPersistenceLayer key_attr / expiry_attr).
IDEMPOTENCY_PK = "id"
IDEMPOTENCY_TTL = "expiration"


class DataStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        removal = config.cdk_removal_policy  # prod: RETAIN_ON_UPDATE_OR_DELETE (config.py)

        bucket_defaults = dict(
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=removal,
            # dev tears down cleanly; prod keeps every object when the stack goes.
            auto_delete_objects=config.destroy_on_delete,
        )

        self.access_logs_bucket = s3.Bucket(
            self,
            "AccessLogs",
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(max(config.log_retention_days, 1)))],
            **bucket_defaults,
        )
        acknowledge(
            self.access_logs_bucket,
            "AwsSolutions-S1",
            "This is the server-access-log bucket of the other buckets; logging it into itself would loop.",
        )

        # Datasets are version-pinned: RUN/VARIANT/RESULT items and the "original" variant's URI
        # name the exact source version they measured, and results are kept (no TTL). A version
        # that became noncurrent (the key was uploaded again) therefore stays as long as what was
        # made from it: for ever where variants are kept (prod: 0 = no expiration rule at all),
        # else at least as long as the variants (config.validate enforces both).
        ingest_lifecycle = []
        if config.noncurrent_versions_expire_days:
            ingest_lifecycle.append(
                s3.LifecycleRule(noncurrent_version_expiration=Duration.days(config.noncurrent_versions_expire_days))
            )
        self.ingest_bucket = s3.Bucket(
            self,
            "Ingest",
            bucket_name=config.bucket_name("ingest"),
            versioned=True,  # a dataset is one object *version*; re-uploads never overwrite evidence
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix="ingest/",
            lifecycle_rules=ingest_lifecycle,
            **bucket_defaults,
        )
        # S3 → EventBridge natively (NotificationConfiguration.EventBridgeConfiguration) instead of
        # the L2 `event_bridge_enabled`, which deploys a custom-resource Lambda to set it.
        self.ingest_bucket.node.default_child.add_property_override(  # type: ignore[union-attr]
            "NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled", True
        )

        lifecycle = [
            s3.LifecycleRule(prefix=OUTPUT_PREFIXES["map_runs"], expiration=Duration.days(30)),
            s3.LifecycleRule(abort_incomplete_multipart_upload_after=Duration.days(2)),
        ]
        if config.variants_expire_days:
            lifecycle.append(
                s3.LifecycleRule(prefix=OUTPUT_PREFIXES["variants"], expiration=Duration.days(config.variants_expire_days))
            )
        self.outputs_bucket = s3.Bucket(
            self,
            "Outputs",
            bucket_name=config.bucket_name("outputs"),
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix="outputs/",
            lifecycle_rules=lifecycle,
            **bucket_defaults,
        )

        table_defaults = dict(
            billing=dynamodb.Billing.on_demand(),
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=removal,
            # off for a first deploy: DeleteTable is refused under it, so a rolled-back create
            # could not remove the fixed-name table (config.table_deletion_protection)
            deletion_protection=config.table_deletion_protection,
        )
        self.results_table = dynamodb.TableV2(
            self,
            "Results",
            table_name=config.table_name("results"),
            partition_key=dynamodb.Attribute(name=RESULTS_PK, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=RESULTS_SK, type=dynamodb.AttributeType.STRING),
            global_secondary_indexes=[
                dynamodb.GlobalSecondaryIndexPropsV2(
                    index_name=PATTERN_INDEX,
                    partition_key=dynamodb.Attribute(name=PATTERN_INDEX_PK, type=dynamodb.AttributeType.STRING),
                    sort_key=dynamodb.Attribute(name=PATTERN_INDEX_SK, type=dynamodb.AttributeType.STRING),
                    projection_type=dynamodb.ProjectionType.ALL,
                )
            ],
            **table_defaults,
        )
        self.idempotency_table = dynamodb.TableV2(
            self,
            "Idempotency",
            table_name=config.table_name("idempotency"),
            partition_key=dynamodb.Attribute(name=IDEMPOTENCY_PK, type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=IDEMPOTENCY_TTL,
            **table_defaults,
        )
        CfnOutput(self, "IngestBucketName", value=self.ingest_bucket.bucket_name,
                  description="Upload HDF5/NetCDF-4 files under incoming/ of this bucket")
        CfnOutput(self, "OutputsBucketName", value=self.outputs_bucket.bucket_name)
        CfnOutput(self, "ResultsTableName", value=self.results_table.table_name)
