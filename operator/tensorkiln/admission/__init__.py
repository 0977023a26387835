"""Admission: what an InferenceModel needs beyond its schema, checked by the webhook and the reconciler."""
