"""Spec review: the findings about an InferenceModel that the admission webhook and the reconciler
both report (the webhook as denials and warnings, the reconciler in the SpecValid condition)."""
