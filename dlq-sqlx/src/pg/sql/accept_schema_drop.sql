-- Drops the other schemas of type $1's version $2 than the shape $3 (migration 0036): the
-- first step of accept_schema.
DELETE FROM {schema}.dlq_type_schemas WHERE event_type = $1 AND version = $2 AND digest <> $3
