"""The event-driven pipeline's domain logic: events, identities, plans. No Lambda here."""
