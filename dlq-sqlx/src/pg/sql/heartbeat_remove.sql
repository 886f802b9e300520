DELETE FROM {schema}.dlq_retriers WHERE owner = $1
