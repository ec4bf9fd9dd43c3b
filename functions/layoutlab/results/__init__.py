"""Result records: schema, DynamoDB store, queries."""
